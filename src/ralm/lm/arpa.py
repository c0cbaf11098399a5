"""Reading and writing ARPA back-off language model files.

Writing: one line per n-gram, `log10 p <TAB> w1 ... wk [<TAB> log10 backoff]`, the backoff
column on every order but the highest (0 where the n-gram is not a context), numbers in
Python's shortest round-trip notation so that reading the file back gives the very same
float64 values. Optional `# key=value` comment lines before `\\data\\` carry ralm's metadata
(order, estimator, tokenizer); KenLM skips such lines. The file is written under a temporary
name and renamed into place, so a failed write leaves no half-written model (and an older
file of that name untouched).

Reading: strict. Fields are separated by spaces and tabs only (as KenLM: a no-break space is
part of a word); a `\\r` before the newline is allowed. Any malformed line raises RalmError
naming the file and line number: non-numbers, a log10 probability above 0 or not finite (inf,
1e999, nan; write -99 for an impossible n-gram, as SRILM and KenLM do), a backoff weight that
is not finite (a positive one is legal), a header count that disagrees with a section, a
truncated file, text after `\\end\\`. A missing `<unk>` unigram is added with log10 prob -100
(KenLM does the same); `<s>` and `</s>` are required. Every n-gram's context (its first k-1
words) must itself be listed, which holds for lmplz and unpruned SRILM output; files that
break this (pruned SRILM models) are refused rather than patched.

This module holds the public API and the `ArpaModel` tables; the work is done in
`ralm.lm.arpa_write` (the sections, made in bulk by Arrow's kernels), `ralm.lm.arpa_read` (the
file's structure, the line-by-line parser and its messages), `ralm.lm.arpa_bulk` (the
vectorised reading path) and `ralm.lm.arpa_arrow` (Arrow <-> numpy glue, the check that
Arrow's number casts agree with repr() and float()).

Left out: the binary KenLM format, gzip/xz input, quantisation.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass, field

import numpy as np

from ralm.atomic import move_into_place, temp_sibling
from ralm.errors import RalmError, opening
from ralm.lm.arpa_bulk import _read_padded
from ralm.lm.arpa_read import META_PREFIX, _Reader
from ralm.lm.arpa_write import _vocab_strings, _write_section
from ralm.lm.counts import Vocab


@dataclass
class ArpaModel:
    """Tables read from an ARPA file, in ralm's layout (see `ralm.lm.counts`)."""

    vocab: Vocab
    keys: list[np.ndarray]
    log10_prob: list[np.ndarray]
    log10_bow: list[np.ndarray]
    meta: dict[str, str] = field(default_factory=dict)


def read_arpa(path: str | os.PathLike) -> ArpaModel:
    """Parse an ARPA file into ralm tables. Raises RalmError with `path:line` on any defect."""
    with opening(path, "an ARPA file"):
        buf, size = _read_padded(path)
    vocab, keys, probs, bows, meta = _Reader(os.fspath(path), buf, size).read()
    return ArpaModel(vocab=vocab, keys=keys, log10_prob=probs, log10_bow=bows, meta=meta)


def write_arpa(
    path: str | os.PathLike,
    vocab: Vocab,
    keys: list[np.ndarray],
    log10_prob: list[np.ndarray],
    log10_bow: list[np.ndarray],
    meta: dict[str, str] | None = None,
) -> None:
    """Write tables (keys/probs/bows per order, ralm layout) as an ARPA file, atomically."""
    V = len(vocab)
    order = len(keys)
    name = os.fspath(path)
    head = "".join(f"{META_PREFIX}{key}={value}\n" for key, value in (meta or {}).items())
    head += "\n\\data\\\n" + "".join(f"ngram {k}={len(keys[k - 1])}\n" for k in range(1, order + 1))
    directory, base = os.path.split(os.path.abspath(name))
    tmp = str(temp_sibling(os.path.join(directory, base)))
    try:
        with open(tmp, "wb") as f:
            f.write(head.encode())
            texts = _vocab_strings(vocab.id_to_token)
            for k in range(1, order + 1):
                bow = log10_bow[k - 1] if k < order else None
                texts = _write_section(f, k, keys[k - 1], V, texts, log10_prob[k - 1], bow)
            del texts
            f.write(b"\n\\end\\\n")
        move_into_place(tmp, name)
    except OSError as exc:
        _remove(tmp)
        raise RalmError(f"cannot write ARPA file {name}: {exc.strerror or exc}") from None
    except BaseException:
        _remove(tmp)
        raise


def _remove(path: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(path)
