"""The ARPA writer's sections: the entry lines of one order at a time, made in bulk.

A block of lines at a time, by Arrow's C++ kernels (pyarrow is a dependency anyway): numbers
formatted by Arrow's shortest round-trip cast (the digits of Python's repr; `_format_floats`,
with `_fmt` for the values whose notation may differ), each distinct backoff once, an
n-gram's words joined from its prefix's text and its last word, lines joined element-wise and
their bytes written as they are; nothing is built line by line in Python.

Left out: the header, the metadata comments and the atomic rename (`ralm.lm.arpa.write_arpa`),
reading (`ralm.lm.arpa_read`).
"""

from __future__ import annotations

import numpy as np

from ralm.lm.arpa_arrow import _arrow_agrees, _np_values, _pa_float64, _pa_int64, _pa_strings, _utf8_blob

WRITE_CHUNK = 1 << 16  # lines assembled per write


def _fmt(x: float) -> str:
    """Shortest round-trip decimal; 0 and -99 written as integers (lmplz / SRILM look)."""
    if x == 0.0:
        return "0"
    if x == -99.0:
        return "-99"
    return repr(x)


def _format_floats(x: np.ndarray):
    """`_fmt` of every value, as an Arrow large_string array.

    The digits come from Arrow's float-to-string cast (double-conversion's shortest
    round-trip, the same digits as Python's repr, ~5x faster); values whose notation may differ
    (integers, |x| < 1e-4 or >= 1e9, non-finite) are formatted by `_fmt`.
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    if not _arrow_agrees():  # an Arrow that formats or parses differently: Python's repr
        return _pa_strings(*_utf8_blob([_fmt(v) for v in np.asarray(x, dtype=np.float64).tolist()]))
    pool = pa.system_memory_pool()  # freed blocks go back to the system at once
    arr = pc.cast(_pa_float64(x), pa.large_string(), memory_pool=pool)
    with np.errstate(invalid="ignore"):
        ax = np.abs(x)
        odd = ~np.isfinite(x) | (x == np.trunc(x)) | (ax < 1e-4) | (ax >= 1e9)
    if odd.any():
        strs = [_fmt(v) for v in x[odd].tolist()]
        off = np.zeros(len(strs) + 1, dtype=np.int64)
        np.cumsum([len(t) for t in strs], out=off[1:])  # ASCII: characters = bytes
        mask = pa.Array.from_buffers(
            pa.bool_(), len(x), [None, pa.py_buffer(np.packbits(odd, bitorder="little"))]
        )
        arr = pc.replace_with_mask(arr, mask, _pa_strings("".join(strs).encode(), off), memory_pool=pool)
    return arr


def _write_strings(f, arr) -> None:
    """Write the bytes of an Arrow large_string array, end to end."""
    if len(arr):
        bufs = arr.buffers()
        off = np.frombuffer(bufs[1], dtype=np.int64)
        f.write(memoryview(bufs[2])[int(off[arr.offset]) : int(off[arr.offset + len(arr)])])


def _vocab_strings(tokens: list[str]) -> tuple:
    """Arrow arrays of the words as `w` and as ` w` (by id)."""
    spaced = np.frombuffer((" " + " ".join(tokens)).encode(), dtype=np.uint8)
    off = np.append(np.flatnonzero(spaced == 32), len(spaced))  # words hold no spaces
    assert len(off) == len(tokens) + 1
    plain = spaced[spaced != 32]
    return _pa_strings(plain, off - np.arange(len(off))), _pa_strings(spaced, off)


def _write_section(f, k: int, keys: np.ndarray, V: int, texts: tuple, log10_prob: np.ndarray, log10_bow):
    """Write the entries of order k, `p<TAB>w1 ... wk[<TAB>bow]\\n` per key; return the
    n-gram texts `w1 ... wk` by row (the next order's prefixes) with the ` w` vocabulary.

    texts: (the order-(k-1) texts by row, or the words for k = 1; the words as ` w`). A block
    of lines at a time, in Arrow's C++ kernels: numbers formatted, a row's text joined from
    its prefix row's text and its last word, the pieces joined element-wise into lines whose
    bytes are written as they are. Memory: the texts of two orders and a block's lines.
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    f.write(f"\n\\{k}-grams:\n".encode())
    prev, spaced = texts
    kind = pa.large_string()
    pool = pa.system_memory_pool()  # freed blocks go back to the system at once
    tab, nl, empty = pa.scalar("\t", kind), pa.scalar("\n", kind), pa.scalar("", kind)
    if log10_bow is not None:  # few distinct backoffs: `\tbow\n` made once each (hashing, not sorting)
        codes = pc.dictionary_encode(_pa_float64(log10_bow), memory_pool=pool)
        tails = [
            "\t" + x + "\n" for x in _format_floats(_np_values(codes.dictionary, np.float64)).to_pylist()
        ]
        bstr = _pa_strings(*_utf8_blob(tails))
        bidx = codes.indices
        del codes
    else:
        bstr = None
    n = len(keys)
    if bstr is not None:  # this order's texts, for the next order: sizes known, filled block by block
        prev_off = np.frombuffer(prev.buffers()[1], dtype=np.int64)[prev.offset : prev.offset + len(prev) + 1]
        spaced_off = np.frombuffer(spaced.buffers()[1], dtype=np.int64)
        if k == 1:
            lengths = np.diff(prev_off)
        else:
            lengths = np.diff(prev_off)[keys // V] + np.diff(spaced_off)[keys % V]
        out_off = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(lengths, out=out_off[1:])
        del lengths
        out_blob = np.empty(int(out_off[-1]), dtype=np.uint8)
    for s in range(0, n, WRITE_CHUNK):
        e = min(n, s + WRITE_CHUNK)
        if k == 1:
            text = [prev.slice(s, e - s)]  # keys[0] = arange(V)
        else:
            key = keys[s:e]
            text = [
                pc.take(prev, _pa_int64(key // V), memory_pool=pool),
                pc.take(spaced, _pa_int64(key % V), memory_pool=pool),
            ]
            if bstr is not None:  # kept for the next order
                text = [pc.binary_join_element_wise(*text, empty, memory_pool=pool)]
        tail = nl if bstr is None else pc.take(bstr, bidx.slice(s, e - s), memory_pool=pool)
        probs = _format_floats(np.minimum(log10_prob[s:e], 0.0))
        _write_strings(f, pc.binary_join_element_wise(probs, tab, *text, tail, empty, memory_pool=pool))
        if bstr is not None:
            text = text[0]
            bufs = text.buffers()
            off = np.frombuffer(bufs[1], dtype=np.int64)[text.offset : text.offset + len(text) + 1]
            out_blob[out_off[s] : out_off[e]] = np.frombuffer(bufs[2], dtype=np.uint8)[off[0] : off[-1]]
        del probs, text, tail
    if log10_bow is None:  # the highest order: no next order needs its texts
        return None, spaced
    return _pa_strings(out_blob, out_off), spaced
