"""Whether a tokenizer gives a DocStore's token ids: the towers and a causal reader's masks read the
ids the DocStore was built with, so a tower whose tokenizer differs would embed other tokens."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ralm.corpus.docstore import DocStore
from ralm.errors import RalmError
from ralm.models.tokenizers import tokenizer_fingerprint

if TYPE_CHECKING:
    from ralm.retrieval.encoders import Tower

__all__ = ["check_tokenizer", "tokenizer_misses", "tokenizes_like"]


def check_tokenizer(tower: Tower, store: DocStore, n_check: int = 8) -> None:
    """RalmError unless the doc tower tokenizes like the DocStore did (same sha256, or same ids on samples)."""
    bad = tokenizer_misses(tower.tokenizer, store, n_check)
    if bad:
        name = store.manifest.get("tokenizer", {}).get("name_or_path", "?")
        raise RalmError(
            f"{store.root}: tokenized with {name}, which differs from the doc encoder's tokenizer "
            f"(chunks {bad[:3]}); rebuild the DocStore with --tokenizer set to the encoder's directory"
        )


def tokenizes_like(tokenizer, store: DocStore, n_check: int = 8) -> bool:
    """Whether `tokenizer` gives the DocStore's token ids (see `tokenizer_misses`)."""
    return not tokenizer_misses(tokenizer, store, n_check)


def tokenizer_misses(tokenizer, store: DocStore, n_check: int = 8) -> list[int]:
    """The sampled chunk ids that `tokenizer` re-tokenizes differently from the DocStore, when they
    are a majority of `n_check` chunks spread over the store; [] when it tokenizes like the build
    (the same sha256 as the build's tokenizer, or a saved copy that serialises padding or
    truncation settings differently but gives the same ids)."""
    want = store.manifest.get("tokenizer", {}).get("sha256")
    if want is not None and want == tokenizer_fingerprint(tokenizer):
        return []
    n = len(store)
    sample = np.unique(np.linspace(0, n - 1, num=min(n, n_check)).astype(np.int64))
    # re-tokenizing a chunk alone may differ at its edges, so only a majority of misses counts
    bad = [
        int(i)
        for i in sample
        if tokenizer(store.get(int(i))["text"], add_special_tokens=False)["input_ids"]
        != store.input_ids(int(i)).tolist()
    ]
    return bad if len(bad) * 2 > len(sample) else []
