"""kNN-LM for a frozen causal LM: a (context vector -> next token) data store over a DocStore.

Khandelwal et al. (2020), "Generalization through Memorization": run the LM over a corpus once;
every position t gives an entry whose key is the context vector the LM's output layer reads when
it predicts token t + 1 (the final hidden state, after the final norm) and whose value is token
t + 1. At test time the k nearest keys of a position's context vector (squared L2, exact FAISS
search) give p_kNN(y) = sum_i softmax(-d_i / T)_i [v_i = y], and the prediction is
p(y) = lambda p_kNN(y) + (1 - lambda) p_LM(y) (the paper: k = 1024, lambda = 0.25 on WikiText-103).

The corpus is read article by article: the article's chunks are joined with single spaces under
"title\\n" (so a key sees the whole article before it, not only its chunk), tokenized with the
LM's tokenizer, and scored on the same sliding-window grid as the no-retrieval evaluation
(ralm.frozen.windows, `max_length` and `stride`), so each token after an article's first gets
exactly one entry. Each entry records its article, so the articles of an evaluated text are left
out of the search (the kNN-LM counterpart of `--exclude auto`).

Layout of a data store directory (written to a temporary sibling, then renamed):

    keys.npy       (N, H) float16, memory-mapped at search time
    values.npy     (N,) int32 next-token ids
    articles.npy   (N,) int32 DocStore article index of each entry
    datastore.json LM name, vocabulary and hidden sizes, the DocStore's path and fingerprint, the grid,
                   XXH3 records of the three arrays (`ralm.integrity`)

Left out: approximate search (the paper's IVFPQ) and a key on the last FFN's input (the paper's
best); both are a change of index or of hook, not of this layout.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ralm.atomic import replace_dir, temp_sibling
from ralm.corpus.docstore import DocStore
from ralm.errors import RalmError
from ralm.frozen.lm import FrozenLM, ScoreJob
from ralm.frozen.windows import context_start, window_blocks

FORMAT = "ralm-frozen-knnlm-1"
META = "datastore.json"
ARRAYS = ("keys.npy", "values.npy", "articles.npy")

__all__ = ["Datastore", "KnnScores", "article_texts", "build_datastore", "knn_label_probs"]


def article_texts(store: DocStore) -> list[tuple[int, str]]:
    """(article index, "title\\nchunk text ...") of every article of `store`, in article order."""
    arts = store.articles(["article", "title", "first_chunk", "n_chunks"]).to_pydict()
    texts: dict[int, list[str]] = {}
    for batch in store.iter_batches(2048, columns=["article", "text"]):
        for a, t in zip(batch["article"], batch["text"], strict=True):
            texts.setdefault(int(a), []).append(t)
    out = []
    for a, title in zip(arts["article"], arts["title"], strict=True):
        body = " ".join(texts.get(int(a), []))
        out.append((int(a), f"{title}\n{body}"))
    return out


def _article_jobs(ids: np.ndarray, max_length: int, stride: int) -> list[ScoreJob]:
    """The no-retrieval sliding-window passes over one article's tokens (every token 1.. once)."""
    jobs = []
    for b in window_blocks(len(ids), max_length, stride, split_first=False):
        c = context_start(b, max_length)
        tok = np.arange(b.first, b.end, dtype=np.int64)
        jobs.append(ScoreJob(input_ids=ids[c : b.end - 1], positions=tok - 1 - c, labels=ids[tok]))
    return jobs


def build_datastore(
    lm: FrozenLM,
    store: DocStore,
    out: str | os.PathLike,
    *,
    max_length: int = 512,
    stride: int = 256,
    batch_tokens: int = 8192,
    overwrite: bool = False,
    log: Callable[[str], None] = print,
) -> dict:
    """Write the data store of `lm` over every article of `store` to `out`; returns its metadata."""
    from ralm import integrity

    out = Path(out)
    if out.exists() and not overwrite:
        raise RalmError(f"{out}: exists; pass --overwrite to replace it")
    limit = lm.max_positions
    if limit is not None and max_length > limit:
        raise RalmError(f"--max-length {max_length}: the LM has {limit} positions")
    if not 1 <= stride <= max_length:
        raise RalmError(f"--stride {stride}: must be between 1 and the max length {max_length}")
    t0 = time.perf_counter()
    arts = article_texts(store)
    toks = lm.encode([t for _, t in arts]) if arts else []
    n_entries = sum(max(len(t) - 1, 0) for t in toks)
    if n_entries == 0:
        raise RalmError(f"{store.root}: no article has two LM tokens; nothing to store")
    h = lm.hidden_size
    tmp = temp_sibling(out)
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        keys = np.lib.format.open_memmap(tmp / "keys.npy", mode="w+", dtype=np.float16, shape=(n_entries, h))
        values = np.lib.format.open_memmap(tmp / "values.npy", mode="w+", dtype=np.int32, shape=(n_entries,))
        owner = np.lib.format.open_memmap(tmp / "articles.npy", mode="w+", dtype=np.int32, shape=(n_entries,))
        pos = 0
        done_tokens = 0
        pending: list[tuple[int, list[ScoreJob]]] = []
        budget = 0

        def flush() -> None:
            nonlocal pos, pending, budget
            flat = [j for _, js in pending for j in js]
            if not flat:
                return
            _, hid = lm.score_hidden(flat, batch_tokens)
            i = 0
            for art, js in pending:
                for j in js:
                    m = len(j.labels)
                    keys[pos : pos + m] = hid[i].astype(np.float16)
                    values[pos : pos + m] = j.labels
                    owner[pos : pos + m] = art
                    pos += m
                    i += 1
            pending, budget = [], 0

        last = time.perf_counter()
        for (art, _), ids in zip(arts, toks, strict=True):
            if len(ids) < 2:
                continue
            jobs = _article_jobs(np.asarray(ids, dtype=np.int64), max_length, stride)
            pending.append((art, jobs))
            budget += sum(len(j.input_ids) for j in jobs)
            done_tokens += len(ids) - 1
            if budget >= 4 * batch_tokens:
                flush()
                if time.perf_counter() - last > 30:
                    rate = pos / (time.perf_counter() - t0)
                    log(f"datastore: {pos:,}/{n_entries:,} entries ({rate:,.0f}/s)")
                    last = time.perf_counter()
        flush()
        if pos != n_entries:
            raise RuntimeError(f"datastore wrote {pos} entries, expected {n_entries}")  # a bug
        for a in (keys, values, owner):
            a.flush()
        meta = {
            "format": FORMAT,
            "lm": lm.name,
            "vocab_size": int(len(lm.tokenizer)),
            "hidden_size": h,
            "corpus": str(Path(store.root).resolve()),
            "corpus_fingerprint": store.fingerprint,
            "articles": len(arts),
            "entries": n_entries,
            "max_length": max_length,
            "stride": stride,
            "key": "final hidden state (after the final norm), float16",
            "seconds": round(time.perf_counter() - t0, 1),
            "files": integrity.records(tmp, ARRAYS),
        }
        (tmp / META).write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
        replace_dir(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    log(f"datastore: {n_entries:,} entries over {len(arts):,} articles -> {out} ({meta['seconds']} s)")
    return meta


def knn_label_probs(dist: np.ndarray, match: np.ndarray, temperature: float) -> np.ndarray:
    """p_kNN of each query's label: sum over its neighbours i of softmax(-dist / T)_i [v_i = label].

    dist (M, k) squared L2 distances, match (M, k) bool; returns (M,) float64. Rows with no
    neighbour (k = 0) give 0."""
    if dist.shape[1] == 0:
        return np.zeros(len(dist))
    logits = -dist.astype(np.float64) / temperature
    logits -= logits.max(axis=1, keepdims=True)
    w = np.exp(logits)
    return (w * match).sum(1) / w.sum(1)


@dataclass
class KnnScores:
    """Per scored token: log p_LM(label) (M,) and p_kNN(label) (M,) at `temperature`, so any lambda
    is free; with the neighbours' distances (M, k) and label matches (M, k) kept (4 + 1 bytes per
    neighbour), any temperature is too (`at_temperature`)."""

    lm_logp: np.ndarray
    p_knn: np.ndarray
    temperature: float = 1.0
    dist: np.ndarray | None = None
    match: np.ndarray | None = None

    def logp(self, lam: float) -> np.ndarray:
        """log(lambda p_kNN + (1 - lambda) p_LM) per token."""
        if lam == 0.0:
            return self.lm_logp.copy()
        p = lam * self.p_knn + (1.0 - lam) * np.exp(self.lm_logp)
        return np.log(np.maximum(p, 1e-300))

    def at_temperature(self, temperature: float) -> KnnScores:
        """The same neighbours with p_kNN recomputed at another temperature."""
        if self.dist is None or self.match is None:
            raise ValueError("the neighbours were not kept")
        p = knn_label_probs(self.dist, self.match, temperature)
        return KnnScores(self.lm_logp, p, temperature, self.dist, self.match)


class Datastore:
    """An opened data store (see the module docstring): `check(lm)`, then `search(h, k, exclude)`."""

    def __init__(self, root: str | os.PathLike) -> None:
        self.root = Path(root)
        mpath = self.root / META
        if not mpath.is_file():
            raise RalmError(
                f"{self.root}: not a kNN-LM data store (no {META}); build one with `ralm lm-datastore`"
            )
        try:
            self.meta = json.loads(mpath.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise RalmError(f"{mpath}: unreadable ({exc}); rebuild the data store") from None
        if self.meta.get("format") != FORMAT:
            raise RalmError(f"{mpath}: format {self.meta.get('format')!r}, expected {FORMAT}; rebuild it")
        from ralm import integrity

        problems = integrity.check_sizes(self.root, self.meta.get("files", {}))
        if problems:
            raise RalmError(f"{problems[0]}; rebuild the data store")
        try:
            self.keys = np.load(self.root / "keys.npy", mmap_mode="r")
            self.values = np.load(self.root / "values.npy")
            self.articles = np.load(self.root / "articles.npy")
        except (ValueError, OSError) as exc:
            raise RalmError(f"{self.root}: a data store array is unreadable ({exc}); rebuild it") from None
        n = int(self.meta["entries"])
        if not (len(self.keys) == len(self.values) == len(self.articles) == n):
            raise RalmError(f"{self.root}: arrays disagree with {META} ({n} entries); rebuild it")
        self._index = None
        self._excluded: tuple[int, ...] | None = None
        self._rows: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.values)

    def check(self, lm: FrozenLM) -> None:
        """RalmError when `lm` is not the LM the store was built with (vocabulary or width differ)."""
        vs, hs = int(self.meta["vocab_size"]), int(self.meta["hidden_size"])
        if vs != len(lm.tokenizer) or hs != lm.hidden_size:
            raise RalmError(
                f"{self.root}: built with {self.meta['lm']} (vocabulary {vs}, width {hs}), not with "
                f"{lm.name} (vocabulary {len(lm.tokenizer)}, width {lm.hidden_size}); build a data store "
                "with this LM"
            )

    def _prepare(self, exclude_articles: tuple[int, ...]) -> None:
        import faiss

        if self._index is not None and self._excluded == exclude_articles:
            return
        keep = ~np.isin(self.articles, np.asarray(exclude_articles, dtype=np.int32))
        rows = np.flatnonzero(keep)
        index = faiss.IndexFlatL2(self.keys.shape[1])
        for s in range(0, len(rows), 65536):
            index.add(np.ascontiguousarray(self.keys[rows[s : s + 65536]], dtype=np.float32))
        self._index, self._excluded, self._rows = index, exclude_articles, rows

    def search(self, h: np.ndarray, k: int, exclude_articles=()) -> tuple[np.ndarray, np.ndarray]:
        """(distances (M, k') float32, values (M, k') int64) of the k nearest entries of each row of
        h (M, H), entries of `exclude_articles` left out; k' = min(k, entries left)."""
        self._prepare(tuple(sorted(int(a) for a in exclude_articles)))
        assert self._index is not None and self._rows is not None
        k = min(k, self._index.ntotal)
        if k == 0 or len(h) == 0:
            return np.zeros((len(h), 0), np.float32), np.zeros((len(h), 0), np.int64)
        d, i = self._index.search(np.ascontiguousarray(h, dtype=np.float32), k)
        return d, self.values[self._rows[i]].astype(np.int64)
