"""The ARPA reader's bulk path: a block of entry lines parsed with numpy and Arrow, no Python loop
per line.

The file is read into one zero-padded byte buffer (`_read_padded`) seen also as overlapping
little-endian uint64 words (`_u64_view`). `_bulk_section` finds field boundaries and a
per-line field count with numpy (so a missing or extra field is never silently shifted into
the next line) and converts numbers with Arrow's correctly rounded string-to-double cast
(`_parse_numbers`: the values float() gives). `_WordTable` maps words to ids by an exact numpy
hash table over the vocabulary (a word of <= 16 bytes is spelled exactly by its first and
last 8 bytes and its length; longer ones go through a dict). `_find_rows` looks keys up in a
sorted key table (also used by `ralm.lm.scoring`).

Left out: error messages. A block that does not fit this path (odd layout or a defect) gives
None, and `ralm.lm.arpa_read` re-reads it line by line to find and name the offending line.
"""

from __future__ import annotations

import os
import stat
from typing import Protocol

import numpy as np

from ralm.lm.arpa_arrow import _arrow_agrees, _np_values, _pa_strings


class _Reader(Protocol):
    """What the bulk parser reads of ralm.lm.arpa_read._Reader: the file's bytes (`buf`, uint8, and
    `U`, the uint64 view at every byte offset) and each line's start and end offsets."""

    buf: np.ndarray
    U: np.ndarray
    start: np.ndarray
    end: np.ndarray


_PAD = 48  # zero bytes after the text: 8-byte loads near the end stay inside the buffer
_LOW_BYTES = np.array([(1 << (8 * j)) - 1 for j in range(8)] + [2**64 - 1], dtype=np.uint64)
_HIGH_BYTES = np.array(
    [(2**64 - 1) ^ ((1 << (8 * (8 - j))) - 1) if j else 0 for j in range(9)], dtype=np.uint64
)
_U64 = np.uint64


def _read_padded(path: str | os.PathLike) -> tuple[np.ndarray, int]:
    """The file's bytes in a zero-padded uint8 array ending in a newline, and their count."""
    with open(path, "rb") as f:
        st = os.fstat(f.fileno())
        if stat.S_ISREG(st.st_mode):
            buf = np.zeros(st.st_size + 1 + _PAD, dtype=np.uint8)
            size = f.readinto(memoryview(buf)[: st.st_size])
            rest = f.read()  # grew while we read: take the slow way
            if size != st.st_size or rest:
                data = bytes(buf[:size]) + rest
                buf = None
        else:
            data = f.read()
            buf = None
    if buf is None:
        buf = np.zeros(len(data) + 1 + _PAD, dtype=np.uint8)
        buf[: len(data)] = np.frombuffer(data, dtype=np.uint8)
        size = len(data)
    if size and buf[size - 1] != 10:
        buf[size] = 10
        size += 1
    return buf, size


def _u64_view(buf: np.ndarray) -> np.ndarray:
    """U[i] = the little-endian uint64 made of buf[i : i + 8] (overlapping, unaligned view)."""
    return np.ndarray(shape=(len(buf) - 7,), dtype="<u8", buffer=buf, strides=(1,))


def _pack(U: np.ndarray, s: np.ndarray, e: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """First 8 and last 8 bytes of each token [s, e) (bytes outside it zeroed); with the
    length they spell any token of <= 16 bytes exactly. Needs e >= 8."""
    n = np.minimum(e - s, 8)
    return U[s] & _LOW_BYTES[n], U[e - 8] & _HIGH_BYTES[n]


class _WordTable:
    """Exact bulk lookup of word byte strings: an open-addressing hash table (numpy arrays)
    over the vocabulary's words of <= 16 bytes, keyed and verified by (first 8 bytes, last 8
    bytes, length), which spell such a word exactly; longer words go through a dict.

    Slot rows are (first, last, index << 5 | length); an empty slot is all zeros (length 0
    matches no token)."""

    def __init__(self, tokens: list[bytes]) -> None:
        lengths = np.fromiter(map(len, tokens), dtype=np.int64, count=len(tokens))
        total = int(lengths.sum())
        blob = np.zeros(8 + total + _PAD, dtype=np.uint8)  # 8 leading zeros: e - 8 >= 0
        blob[8 : 8 + total] = np.frombuffer(b"".join(tokens), dtype=np.uint8)
        ends = np.cumsum(lengths) + 8
        first, last = _pack(_u64_view(blob), ends - lengths, ends)
        short = np.flatnonzero(lengths <= 16)
        self.long = {tokens[j]: j for j in np.flatnonzero(lengths > 16).tolist()}
        self.bits = max(8, int(np.ceil(np.log2(2 * max(1, len(short))))))
        self.mask = (1 << self.bits) - 1
        self.rows = np.zeros((1 << self.bits, 3), dtype=np.uint64)
        meta = (short.astype(np.uint64) << _U64(5)) | lengths[short].astype(np.uint64)
        pos = self._home(first[short], last[short], lengths[short])
        pending = np.arange(len(short))
        self.max_probe = 0
        while len(pending):  # linear probing, one round per displacement
            free = np.flatnonzero(self.rows[pos, 2] == 0)
            slots, take = np.unique(pos[free], return_index=True)
            placed = pending[free[take]]
            self.rows[slots, 0] = first[short[placed]]
            self.rows[slots, 1] = last[short[placed]]
            self.rows[slots, 2] = meta[placed]
            keep = np.ones(len(pending), dtype=bool)
            keep[free[take]] = False
            pending, pos = pending[keep], (pos[keep] + 1) & self.mask
            if len(pending):
                self.max_probe += 1

    def _home(self, first: np.ndarray, last: np.ndarray, n: np.ndarray) -> np.ndarray:
        h = last * _U64(0xC2B2AE3D27D4EB4F)
        h ^= first
        h ^= n.astype(np.uint64)
        h *= _U64(0x9E3779B97F4A7C15)
        h >>= _U64(64 - self.bits)
        return h.astype(np.int64)

    def lookup(self, buf: np.ndarray, U: np.ndarray, s: np.ndarray, e: np.ndarray) -> np.ndarray:
        """Index of each token buf[s:e] among the words, -1 where it is none of them."""
        n = e - s
        qf, ql = _pack(U, s, e)
        home = self._home(qf, ql, n)
        qn = n.astype(np.uint64)
        out = np.full(len(s), -1, dtype=np.int64)
        act = None  # round 0: every token
        for r in range(self.max_probe + 1):
            if act is None:
                pos, f, q, m = home, qf, ql, qn
            else:
                pos, f, q, m = (home[act] + r) & self.mask, qf[act], ql[act], qn[act]
            rows = np.take(self.rows, pos, axis=0)
            meta = rows[:, 2]
            ok = rows[:, 0] == f
            ok &= rows[:, 1] == q
            ok &= (meta & _U64(31)) == m
            hit = (meta[ok] >> _U64(5)).astype(np.int64)
            if act is None:
                out[ok] = hit
                act = np.flatnonzero(~ok & (meta != 0))  # a different word there: probe on
            else:
                out[act[ok]] = hit
                act = act[~ok & (meta != 0)]
            if not len(act):
                break
        for j in np.flatnonzero(n > 16).tolist():
            out[j] = self.long.get(buf[s[j] : e[j]].tobytes(), -1)
        return out


def _bulk_section(
    r: _Reader, i: int, n: int, k: int, bow_allowed: bool
) -> tuple[np.ndarray, np.ndarray, tuple[np.ndarray, np.ndarray]] | None:
    """Vectorised parse of n entry lines from line i (see the module docstring).

    Returns (log10 probs (n,), backoffs (n,), (starts, ends) (n, k) of the words in the
    buffer); None when the block does not fit the fast path or anything is wrong there (the
    line-by-line reader then finds and reports the offending line).
    """
    if n == 0:
        return np.empty(0), np.zeros(0), (np.empty((0, k), dtype=np.int64),) * 2
    lo, hi = int(r.start[i]), int(r.end[i + n - 1]) + 1
    x = r.buf[lo:hi]
    sep = x == 32
    sep |= x == 9
    sep |= x == 10
    cr = np.flatnonzero(x == 13)
    if len(cr):  # CRLF: a \r right before the newline is a blank; one inside a line is not
        if not (x[cr + 1] == 10).all():
            return None
        sep[cr] = True
    fe = np.flatnonzero(sep)  # every field ends at a separator (the last one at the newline)
    del sep
    fs = np.empty_like(fe)
    fs[0] = 0
    fs[1:] = fe[:-1] + 1
    if len(fs) and (fs == fe).any():  # runs of blanks: drop the empty fields between them
        keep = fe > fs
        fs, fe = fs[keep], fe[keep]
    fs += lo  # field j is buf[fs[j]:fe[j]]
    fe += lo
    off = np.searchsorted(fs, r.start[i : i + n])  # first field of each line
    per_line = np.diff(np.append(off, len(fs)))
    w0 = int(per_line[0])
    if (per_line == w0).all():
        if w0 not in (k + 1, k + 2) or (w0 == k + 2 and not bow_allowed):
            return None
        has_bow = None if w0 == k + 1 else slice(None)
    else:  # SRILM style: the backoff column only where there is a backoff
        if not bow_allowed or not ((per_line == k + 1) | (per_line == k + 2)).all():
            return None
        has_bow = per_line == k + 2
    p = _parse_numbers(r, fs[off], fe[off])
    if p is None:
        return None
    b = np.zeros(n)
    if has_bow is not None:
        j = off[has_bow] + (k + 1)
        bv = _parse_numbers(r, fs[j], fe[j])
        if bv is None:
            return None
        b[has_bow] = bv
    cols = off[:, None] + np.arange(1, k + 1)
    return p, b, (fs[cols], fe[cols])


def _parse_numbers(r: _Reader, s: np.ndarray, e: np.ndarray) -> np.ndarray | None:
    """float64 of each field buf[s:e]; None if any is not a number (or is longer than 32
    characters). Arrow's string-to-double cast does the conversion: correctly rounded (the
    same values as Python's float()), ~7x faster than numpy's; it refuses `1_5`, which
    float() would read as 15."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if not len(s):
        return np.empty(0)
    n = e - s
    width = (int(n.max()) + 7) // 8
    if width > 4 or not _arrow_agrees():
        return None
    words = np.empty((len(s), width), dtype="<u8")
    for j in range(width):  # 8 bytes at a time
        words[:, j] = r.U[s + 8 * j]
    text = words.view(np.uint8)[np.arange(8 * width)[None, :] < n[:, None]]  # the fields, end to end
    off = np.zeros(len(s) + 1, dtype=np.int64)
    np.cumsum(n, out=off[1:])
    try:
        return _np_values(
            pc.cast(_pa_strings(text, off), pa.float64(), memory_pool=pa.system_memory_pool()), np.float64
        )
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return None


def _find_rows(table: np.ndarray, query: np.ndarray) -> np.ndarray:
    """Row of each query key in the sorted `table`, or -1 where absent."""
    if len(table) == 0:
        return np.full(len(query), -1, dtype=np.int64)
    if len(query) > 512 and not (query[1:] >= query[:-1]).all():
        # sorted queries let searchsorted reuse its last position: ~5x faster
        order = np.argsort(query)
        pos = np.empty(len(query), dtype=np.int64)
        pos[order] = np.searchsorted(table, query[order])
    else:
        pos = np.searchsorted(table, query)
    pos_c = np.minimum(pos, len(table) - 1)
    return np.where(table[pos_c] == query, pos_c, -1).astype(np.int64)
