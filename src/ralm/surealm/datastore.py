"""The SUREALM prefix/suffix data store, opened memory-mapped (built by `ralm.surealm.datastore_build`).

Every training sentence W = w_1..w_N (LM tokens, at most `max_tokens`) gives N-1 entries
(p_i, w_i, s_i), 0 < i < N: the key is the sentence-transformer embedding of the prefix
p_i = w_1..w_{i-1}, the value the embedding of the suffix s_i = w_{i+1}..w_{i+m} (the current
word w_i is in neither; `ralm.surealm.embedder`). The store holds sum(N_i - 1) entries. With
`include_current_word` (the paper's §5 variant) the suffix is w_i..w_{i+m-1} instead.

Offline retrieval (SUREALM §3.2.1): for every sentence of every split and every prefix length
L = 1..N, the query w_1..w_L is embedded and its top-K entries are kept, never an entry of the
query's own sentence. The LM predicting w_{L+1} may attend to them. Validation and test prefixes
are embedded and searched but never indexed.

Layout of a data store directory (all arrays `.npy`, memory-mapped when read)::

    manifest.json        format, encoder/tokenizer fingerprints, m, K, counts, sizes, timings
    sentences.parquet    sid, split, group, text (one row per sentence)
    lengths.npy          (S,) int32      N_s, LM tokens of each sentence
    token_offset.npy     (S+1,) int64    sentence s owns rows token_offset[s]..+N_s of lm_ids / neighbors
    lm_ids.npy           (T,) int32      the LM tokens w_1..w_N of every sentence, concatenated
    neighbors.npy        (T, K) int32    top-K entries for the query w_1..w_L (row token_offset[s]+L-1)
    entry_offset.npy     (S+1,) int64    sentence s owns entries entry_offset[s]..+N_s-1 (train only)
    entry_sid.npy        (E,) int32      the sentence of each entry
    entry_pos.npy        (E,) int16      its split point i (1-based)
    keys.npy             (E, d) float16  prefix embeddings (what the index searches)
    values.npy           (E, d) float16  suffix embeddings
    index/               a `ralm.retrieval.index.dense.DenseIndex` over keys (exact inner product by default)

Memory: sentences are processed `batch_sentences` at a time and written into the memory maps;
what stays in RAM is the FAISS index (E x d float32 for "flat"; pick a compressed kind for big
stores) and the per-sentence offsets.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

from ralm.errors import RalmError
from ralm.surealm.sentences import SPLITS, empty_split

FORMAT = "ralm-surealm-datastore"
FORMAT_VERSION = 1
MANIFEST = "manifest.json"

__all__ = ["Datastore"]


class Datastore:
    """A built data store, memory-mapped. See the module docstring for the arrays."""

    def __init__(self, root: str | os.PathLike) -> None:
        self.root = Path(root)
        mpath = self.root / MANIFEST
        if not mpath.is_file():
            raise RalmError(
                f"{self.root}: not a SUREALM data store (no {MANIFEST}); build one with `ralm surealm datastore`"
            )
        try:
            self.manifest = json.loads(mpath.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise RalmError(f"{mpath}: unreadable ({exc}); rebuild the data store") from None
        if self.manifest.get("format") != FORMAT or self.manifest.get("format_version") != FORMAT_VERSION:
            raise RalmError(f"{mpath}: not a {FORMAT} v{FORMAT_VERSION} manifest; rebuild the data store")

        def load(name: str) -> np.ndarray:
            p = self.root / f"{name}.npy"
            if not p.is_file():
                raise RalmError(f"{p}: missing; the data store is incomplete, rebuild it")
            return np.load(p, mmap_mode="r")

        self.lengths = np.asarray(load("lengths"))
        self.token_offset = np.asarray(load("token_offset"))
        self.entry_offset = np.asarray(load("entry_offset"))
        self.lm_ids = load("lm_ids")
        self.neighbors = load("neighbors")
        self.entry_sid = load("entry_sid")
        self.entry_pos = load("entry_pos")
        self.keys = load("keys")
        self.values = load("values")
        self._sentences = None
        self._index = None

    # -- facts
    @property
    def fingerprint(self) -> str:
        return self.manifest["fingerprint"]

    @property
    def k(self) -> int:
        return int(self.manifest["k"])

    @property
    def dim(self) -> int:
        return int(self.manifest["dim"])

    @property
    def m(self) -> int:
        return int(self.manifest["m"])

    @property
    def include_current_word(self) -> bool:
        """True when each suffix starts at its entry's current word (SUREALM §5's variant)."""
        return bool(self.manifest.get("include_current_word", False))

    def __len__(self) -> int:
        """Number of entries."""
        return int(self.manifest["entries"])

    @property
    def num_sentences(self) -> int:
        return len(self.lengths)

    # -- sentences
    def sentences(self):
        """The sentences table (pyarrow), read once."""
        if self._sentences is None:
            import pyarrow.parquet as pq

            self._sentences = pq.read_table(self.root / "sentences.parquet")
        return self._sentences

    def split_ids(self, split: str) -> np.ndarray:
        if split not in SPLITS:
            raise RalmError(f"split {split!r}: choose one of {', '.join(SPLITS)}")
        col = self.sentences().column("split").to_numpy(zero_copy_only=False)
        return np.flatnonzero(col == split)

    def require_split(self, split: str, why: str) -> np.ndarray:
        """`split_ids(split)`; a RalmError saying how splits are formed and `why` the split is needed
        when it holds no sentence."""
        ids = self.split_ids(split)
        if not len(ids):
            groups = len(self.sentences().column("group").unique())
            raise RalmError(
                f"{self.root}: {empty_split(split, self.manifest.get('sources', []), groups)}; {why}"
            )
        return ids

    def text(self, sid: int) -> str:
        return str(self.sentences().column("text")[int(sid)].as_py())

    def tokens(self, sid: int) -> np.ndarray:
        """(N,) LM token ids w_1..w_N of sentence `sid`."""
        return np.asarray(self.lm_ids[self.token_offset[sid] : self.token_offset[sid + 1]])

    def sentence_neighbors(self, sid: int, k: int | None = None) -> np.ndarray:
        """(N, k) entry ids: row L-1 holds the top-k entries for the query w_1..w_L."""
        k = self.k if k is None else k
        return np.asarray(self.neighbors[self.token_offset[sid] : self.token_offset[sid + 1], :k])

    def read_entries(self, ent: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Prefix (key) and suffix (value) embeddings of the entry ids `ent` (any shape), float32
        arrays of shape ent.shape + (d,); slots with id -1 stay zero. Reads the memory maps in
        sorted order."""
        d = self.dim
        flat = ent.reshape(-1)
        valid = flat >= 0
        keys = np.zeros((flat.size, d), dtype=np.float32)
        values = np.zeros((flat.size, d), dtype=np.float32)
        if valid.any():
            idx = flat[valid]
            order = np.argsort(idx, kind="stable")
            got = np.empty((len(idx), d), dtype=np.float32)
            got[order] = self.keys[idx[order]]
            keys[valid] = got
            got[order] = self.values[idx[order]]
            values[valid] = got
        return keys.reshape(*ent.shape, d), values.reshape(*ent.shape, d)

    def entry(self, e: int) -> tuple[int, int]:
        """(sentence id, split point i) of entry e."""
        return int(self.entry_sid[e]), int(self.entry_pos[e])

    def entry_tokens(self, e: int) -> tuple[int, np.ndarray]:
        """LM tokens of entry e: its current word w_i and the suffix as stored (w_{i+1}..w_{i+m}, or
        w_i..w_{i+m-1} in a store built with include_current_word)."""
        sid, i = self.entry(e)
        toks = self.tokens(sid)
        lo = i - 1 if self.include_current_word else i
        return int(toks[i - 1]), toks[lo : lo + self.m]

    # -- search (generation)
    @property
    def index(self):
        if self._index is None:
            from ralm.retrieval.index.dense import DenseIndex

            self._index = DenseIndex.load(self.root / "index", docstore_fingerprint=self.fingerprint)
        return self._index

    def search(self, q: np.ndarray, k: int) -> np.ndarray:
        """(Q, k) entry ids of the top k keys for query embeddings q (Q, d)."""
        if k > len(self):
            raise RalmError(f"K={k} is more than the {len(self)} entries of {self.root}; lower K")
        q = np.asarray(q, dtype=np.float16).astype(np.float32)
        return self.index.search(q, k).ids
