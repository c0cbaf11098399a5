"""Ragged arrays on disk: variable-length rows in `PREFIX.bin`, int64 row offsets in `PREFIX.idx`.

The DocStore keeps its token ids and salient token spans this way, so training reads a chunk's
tokens as a memory-map slice, with no decode. See `RaggedWriter` for the layout.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from ralm.errors import CorpusError


class RaggedWriter:
    """Appends variable-length rows of `width` values to `PREFIX.bin`; offsets go to `PREFIX.idx`.

    Example: append([1, 2]); append([]); append([3]) -> bin [1 2 3], idx [0 2 2 3] (int64, rows).
    """

    def __init__(self, prefix: Path, dtype: str = "int32", width: int = 1, block: int = 65536) -> None:
        self.prefix = Path(prefix)
        self.dtype = np.dtype(dtype)
        self.width = width
        self._bin = open(self.prefix.with_suffix(".bin"), "wb")  # noqa: SIM115 - closed in close()
        self._idx = open(self.prefix.with_suffix(".idx"), "wb")  # noqa: SIM115 - closed in close()
        self._end = 0  # rows of `width` values written so far
        self._pending = [0]  # offsets not yet on disk: memory stays flat however many rows
        self._block = block

    def append(self, row: np.ndarray | Sequence) -> None:
        if len(row):
            arr = np.ascontiguousarray(row, dtype=self.dtype).reshape(-1, self.width)
            self._bin.write(arr.tobytes())
            self._end += arr.shape[0]
        self._pending.append(self._end)
        if len(self._pending) >= self._block:
            self._flush_idx()

    def _flush_idx(self) -> None:
        np.asarray(self._pending, dtype=np.int64).tofile(self._idx)
        self._pending = []

    def close(self) -> None:
        self._flush_idx()
        self._bin.close()
        self._idx.close()


class RaggedArray:
    """Read side of `RaggedWriter`: `arr[i]` is row i as an (n_i, width) (or (n_i,)) memory-map view."""

    def __init__(self, prefix: Path, dtype: str = "int32", width: int = 1) -> None:
        self.prefix = Path(prefix)
        self.width = width
        for suffix in (".idx", ".bin"):
            if not self.prefix.with_suffix(suffix).is_file():
                raise CorpusError(f"{self.prefix}{suffix}: missing; rebuild the DocStore")
        self.offsets = np.fromfile(self.prefix.with_suffix(".idx"), dtype=np.int64)
        size = os.path.getsize(self.prefix.with_suffix(".bin"))
        dt = np.dtype(dtype)
        if not len(self.offsets) or size != int(self.offsets[-1]) * width * dt.itemsize:
            raise CorpusError(f"{self.prefix}.bin: size does not match its index; rebuild the DocStore")
        self.data = (
            np.memmap(self.prefix.with_suffix(".bin"), dtype=dt, mode="r").reshape(-1, width)
            if size
            else np.zeros((0, width), dtype=dt)
        )

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, i: int) -> np.ndarray:
        row = self.data[self.offsets[i] : self.offsets[i + 1]]
        return row[:, 0] if self.width == 1 else row

    def lengths(self) -> np.ndarray:
        """(N,) int64 number of values per row."""
        return np.diff(self.offsets)
