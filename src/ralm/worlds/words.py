"""Invented words for the controlled worlds: pronounceable, seeded, distinct, and absent from any
real vocabulary a pre-trained model could have memorised facts about.

A word is built from consonant-vowel syllables (`"ka" + "vel" + "mor"` -> "Kavelmor"), so every
tokenizer splits it into a few ordinary pieces. `Lexicon` hands out words without repeats, so a
value invented for one fact never occurs in another.

Example: Lexicon(seed=0).word(3) -> "Tavenor" (capitalised, 3 syllables).
"""

from __future__ import annotations

import numpy as np

__all__ = ["Lexicon"]

ONSETS = ("b", "d", "f", "g", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z", "br", "dr", "kr", "tr", "st")
VOWELS = ("a", "e", "i", "o", "u")
CODAS = ("", "", "", "n", "r", "l", "s", "m")


class Lexicon:
    """A seeded source of distinct invented words (`word`, `words`) and record codes (`code`).

    `reserved`: words never to hand out (e.g. those of another lexicon or of the templates)."""

    def __init__(self, seed: int, reserved: set[str] | frozenset[str] = frozenset()) -> None:
        self.rng = np.random.default_rng([seed, 1009])
        self.used: set[str] = {w.lower() for w in reserved}

    def word(self, syllables: int = 3, capital: bool = True) -> str:
        """A word of `syllables` consonant-vowel(-coda) syllables not handed out before."""
        while True:
            parts = [
                ONSETS[self.rng.integers(len(ONSETS))]
                + VOWELS[self.rng.integers(len(VOWELS))]
                + CODAS[self.rng.integers(len(CODAS))]
                for _ in range(syllables)
            ]
            w = "".join(parts)
            if w not in self.used:
                self.used.add(w)
                return w.capitalize() if capital else w

    def words(self, n: int, syllables: int = 3, capital: bool = True) -> list[str]:
        """`n` distinct words (`word` n times)."""
        return [self.word(syllables, capital) for _ in range(n)]

    def code(self) -> str:
        """A record code such as "KX-4821" not handed out before (two letters, four digits)."""
        while True:
            letters = "".join(chr(ord("A") + int(i)) for i in self.rng.integers(26, size=2))
            c = f"{letters}-{int(self.rng.integers(1000, 10000))}"
            if c.lower() not in self.used:
                self.used.add(c.lower())
                return c
