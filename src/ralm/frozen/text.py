"""The evaluated text: its LM tokens with character offsets, and its words.

The whole file is tokenized once with the LM's tokenizer, without special tokens (no BOS, as in
HF's perplexity recipe and In-Context RALM): token 0 is context only, tokens 1..N-1 are scored.
`max_tokens` keeps the longest prefix of at most that many tokens that ends at a word boundary
(the next character is whitespace, or the text ends), so its words are exactly
`text[:end].split()`. Words = whitespace-separated words of the evaluated text; word perplexity =
exp(total NLL / words), over the same NLL as the token perplexity.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ralm.errors import RalmError

__all__ = ["EvalText", "read_eval_text", "tokenize_eval_text"]


@dataclass
class EvalText:
    """text: the evaluated characters; ids (N,) int64 LM tokens; offsets (N, 2) character spans."""

    text: str
    ids: np.ndarray
    offsets: np.ndarray

    def __len__(self) -> int:
        return len(self.ids)

    @property
    def n_words(self) -> int:
        """Whitespace-separated words of the evaluated text."""
        return len(self.text.split())

    def span(self, start: int, end: int) -> str:
        """The characters of tokens start..end-1 ("" when empty)."""
        if end <= start:
            return ""
        return self.text[int(self.offsets[start, 0]) : int(self.offsets[end - 1, 1])]


def tokenize_eval_text(text: str, tokenizer, max_tokens: int | None = None, name: str = "text") -> EvalText:
    """Tokenize `text` (see the module docstring for `max_tokens`); RalmError for an empty text."""
    from ralm.models.quiet import quiet_transformers

    if not text.strip():
        raise RalmError(f"{name}: empty text; nothing to evaluate")
    with quiet_transformers():
        enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    ids = np.asarray(enc["input_ids"], dtype=np.int64)
    offsets = np.asarray(enc["offset_mapping"], dtype=np.int64).reshape(-1, 2)
    if max_tokens is not None:
        if max_tokens < 2:
            raise RalmError(f"--max-tokens {max_tokens}: evaluate at least 2 tokens")
        if len(ids) > max_tokens:
            n = max_tokens
            while n > 1:
                end = int(offsets[n - 1, 1])  # a cut at a word boundary: whitespace follows
                if end >= len(text) or text[end].isspace():
                    break
                n -= 1
            if n <= 1:
                n = max_tokens  # one word longer than max_tokens: cut inside it
            ids, offsets = ids[:n], offsets[:n]
            text = text[: int(offsets[-1, 1])]
    return EvalText(text=text, ids=ids, offsets=offsets)


def read_eval_text(path: str | os.PathLike, tokenizer, max_tokens: int | None = None) -> EvalText:
    """Read a UTF-8 text file and tokenize it; RalmError for a missing or undecodable file."""
    p = Path(path)
    if not p.is_file():
        raise RalmError(f"{p}: no such text file")
    try:
        text = p.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise RalmError(f"{p}: not UTF-8 text (byte {exc.start}); convert it first") from None
    return tokenize_eval_text(text, tokenizer, max_tokens, name=str(p))
