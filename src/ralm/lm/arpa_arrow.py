"""Arrow <-> numpy glue for the ARPA reader and writer, and the check that Arrow's number casts
agree with Python's.

Arrays go both ways through their buffers, never through pa.array() or .to_numpy(), which
would import pandas. `_arrow_agrees` probes, once per process, that this pyarrow's
float-to-string cast gives the digits of repr() and its string-to-float cast the values of
float(); where it does not, the writer formats with repr() and the bulk reader steps aside
for the line-by-line one, so the files and tables stay the same.

Left out: any ARPA syntax (`ralm.lm.arpa_read`, `ralm.lm.arpa_write`); pyarrow itself is
imported only when a function runs.
"""

from __future__ import annotations

import numpy as np


# Arrow arrays are made from and read back into numpy through their buffers: pa.array() and
# .to_numpy() would import pandas (a quarter of a second and ~40 MB) on first use.
def _pa_float64(x: np.ndarray):
    import pyarrow as pa

    x = np.ascontiguousarray(x, dtype=np.float64)
    return pa.Array.from_buffers(pa.float64(), len(x), [None, pa.py_buffer(x)])


def _pa_strings(blob: np.ndarray | bytes, off: np.ndarray):
    """A large_string array: value j is blob[off[j]:off[j + 1]] (off: int64, n + 1)."""
    import pyarrow as pa

    off = np.ascontiguousarray(off, dtype=np.int64)
    return pa.Array.from_buffers(
        pa.large_string(), len(off) - 1, [None, pa.py_buffer(off), pa.py_buffer(blob)]
    )


def _utf8_blob(items: list[str]) -> tuple[bytes, np.ndarray]:
    """Strings as one UTF-8 blob and offsets (n + 1,)."""
    encoded = [t.encode() for t in items]
    off = np.zeros(len(items) + 1, dtype=np.int64)
    np.cumsum([len(t) for t in encoded], out=off[1:])
    return b"".join(encoded), off


def _np_values(arr, dtype) -> np.ndarray:
    """The values of a primitive Arrow array without nulls, as a numpy view."""
    data = arr.buffers()[1]
    if data is None:
        return np.zeros(0, dtype=dtype)
    return np.frombuffer(data, dtype=dtype)[arr.offset : arr.offset + len(arr)]


def _pa_int64(x: np.ndarray):
    import pyarrow as pa

    x = np.ascontiguousarray(x, dtype=np.int64)
    return pa.Array.from_buffers(pa.int64(), len(x), [None, pa.py_buffer(x)])


# Values whose shortest round-trip digits are easy to get wrong (ties, 17 digits, the ends of
# the double range); Arrow must format and parse them exactly as repr() and float() do.
_PROBES = (
    0.1,
    1 / 3,
    -1.0899174144338497,
    2.2250738585072014e-308,
    5e-324,
    1.7976931348623157e308,
    -0.43429448190325176,
    9007199254740993.0,
    0.30000000000000004,
    -99.00000000000001,
    123.456,
)
_ARROW_AGREES: list[bool] = []


def _arrow_agrees() -> bool:
    """Whether this pyarrow's float<->string casts give repr()'s digits and float()'s values."""
    if not _ARROW_AGREES:
        import pyarrow as pa
        import pyarrow.compute as pc

        x = np.array(_PROBES)
        try:
            texts = pc.cast(_pa_float64(x), pa.large_string()).to_pylist()
            back = _np_values(
                pc.cast(_pa_strings(*_utf8_blob([repr(v) for v in _PROBES])), pa.float64()), np.float64
            )
            ok = [float(t) for t in texts] == list(_PROBES) and back.tolist() == list(_PROBES)
            ok = ok and all(
                t == repr(v)
                for t, v in zip(texts, _PROBES, strict=True)
                if 1e-4 <= abs(v) < 1e9 and v != int(v)
            )
        except (pa.ArrowException, ValueError):
            ok = False
        _ARROW_AGREES.append(ok)
    return _ARROW_AGREES[0]
