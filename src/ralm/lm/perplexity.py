"""Perplexity of a summed negative log-likelihood, per token and per word.

A language model scored on a text sums its NLL (nats) over the `tokens` it predicted; the text also
has `words` (whitespace-separated). Token perplexity exp(NLL / tokens) depends on the tokenizer;
word perplexity exp(NLL / words) compares models with different tokenizers on the same text (the
lecture's and SUREALM's measure). `Perplexities` gives both to a result class that holds `nll`,
`tokens` and `words` (`ralm.frozen.evaluate.EvalResult`, `ralm.surealm.data.PerplexityCounts`).
"""

from __future__ import annotations

import math
from typing import Any

__all__ = ["Perplexities"]


class Perplexities:
    """Token and word perplexity of the `nll`, `tokens` and `words` a subclass holds."""

    nll: float
    tokens: int
    words: int

    @property
    def token_ppl(self) -> float:
        """exp(NLL / tokens); NaN over no token (there is no perplexity of nothing)."""
        return math.exp(self.nll / self.tokens) if self.tokens else math.nan

    @property
    def word_ppl(self) -> float:
        """exp(NLL / words); NaN over no word."""
        return math.exp(self.nll / self.words) if self.words else math.nan

    def perplexity_fields(self) -> dict[str, Any]:
        """token_ppl, word_ppl, nll, tokens and words, in that order (rows of results files)."""
        return {
            "token_ppl": self.token_ppl,
            "word_ppl": self.word_ppl,
            "nll": self.nll,
            "tokens": self.tokens,
            "words": self.words,
        }
