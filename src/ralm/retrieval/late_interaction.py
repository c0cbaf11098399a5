"""Late interaction (ColBERT, Khattab & Zaharia 2020): token embeddings scored by MaxSim.

Query and document are encoded independently into one vector per token; their score is

    maxsim(Q, D) = sum_i max_j Q_i . D_j        (Q: (Lq, d) query tokens, D: (Ld, d) doc tokens)

with L2-normalised token vectors, so each query token adds the cosine of its best-matching
document token. `TokenEncoder` turns text into token vectors with any local Hugging Face
encoder (the bundled MiniLM by default): last hidden states -> optional linear projection
(untrained unless you train it; default none) -> L2 norm, under `torch.inference_mode` and
bf16 autocast where the CPU/GPU has native bf16. As in ColBERT, documents drop padding and
punctuation tokens (and, by default, [CLS]/[SEP]: an untrained encoder has no [D] marker to
make them useful) before MaxSim; queries keep every non-padding token and may be
augmented with [MASK] tokens up to `query_max_length` (off by default: without ColBERT
training the [MASK] vectors are noise). A titled chunk is encoded as "title | text".

`maxsim_batched` scores many queries against many padded documents in one matrix product
(no Python loop over documents). `LateInteractionSearcher` (a) indexes a small DocStore by
keeping every kept document token vector in memory (one flat float16 tensor plus offsets)
and searches exhaustively, and (b) re-ranks another retriever's top-k (`rerank`), encoding
the candidates on the fly when no index is built. Search results follow the `Searcher`
contract: best first, ties by the lower id, excluded ids never returned, always k.

Left out: ColBERT training (the [Q]/[D] markers, the projection, the pairwise loss), the
PLAID/centroid index and residual compression for large corpora, and saving the token cache.
"""

from __future__ import annotations

import string
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from ralm.corpus.docstore import DocStore
from ralm.errors import RalmError
from ralm.retrieval.base import ExcludeIds, SearchResult, check_queries
from ralm.retrieval.exclusion import filter_excluded, prepare_exclude

BLOCK_ELEMENTS = 1 << 24  # similarity entries (floats) per MaxSim block: 64 MiB in float32


# ----------------------------------------------------------------------------- MaxSim
def maxsim(
    q: torch.Tensor, d: torch.Tensor, q_mask: torch.Tensor | None = None, d_mask: torch.Tensor | None = None
) -> torch.Tensor:
    """sum_i max_j q_i . d_j over unmasked query rows i and doc rows j; q (Lq, dim), d (Ld, dim) -> ().

    A document without unmasked tokens scores 0. Example: q = [[1, 0]], d = [[.5, 0], [2, 0]] -> 2.
    """
    qm = torch.ones(q.shape[0], dtype=torch.bool) if q_mask is None else q_mask
    dm = torch.ones(d.shape[0], dtype=torch.bool) if d_mask is None else d_mask
    return maxsim_batched(q[None], qm[None], d[None], dm[None])[0, 0]


def maxsim_batched(
    q: torch.Tensor, q_mask: torch.Tensor, d: torch.Tensor, d_mask: torch.Tensor
) -> torch.Tensor:
    """MaxSim of every query with every document: q (Q, Lq, dim), d (N, Ld, dim) -> (Q, N) float32.

    q_mask (Q, Lq), d_mask (N, Ld): True for tokens that take part. One matrix product
    (Q Lq, dim) x (dim, N Ld), then a masked max over doc tokens and a masked sum over
    query tokens. Memory: Q Lq N Ld floats (see `LateInteractionSearcher` for blocking).
    """
    nq, lq, dim = q.shape
    n, ld, _ = d.shape
    sim = (q.reshape(nq * lq, dim).float() @ d.reshape(n * ld, dim).float().T).view(nq, lq, n, ld)
    sim = sim.masked_fill(~d_mask.view(1, 1, n, ld), float("-inf"))
    best = sim.amax(dim=3)  # (Q, Lq, N)
    best = torch.where(torch.isfinite(best), best, torch.zeros((), dtype=best.dtype))
    return (best * q_mask.view(nq, lq, 1).to(best.dtype)).sum(dim=1)  # (Q, N)


def pad_ragged(
    flat: torch.Tensor, offsets: np.ndarray, ids: np.ndarray, max_len: int | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows `ids` of a ragged (T, dim) tensor as (B, L, dim) padded with zeros + mask (B, L).

    Row i is flat[offsets[i]:offsets[i+1]]. Vectorised gather, no loop over rows.
    """
    starts = torch.from_numpy(offsets[ids].astype(np.int64))
    lens = torch.from_numpy((offsets[ids + 1] - offsets[ids]).astype(np.int64))
    width = int(lens.max()) if len(ids) else 0
    if max_len is not None:
        width = max(width, max_len)
    pos = torch.arange(max(width, 1))
    mask = pos[None, :] < lens[:, None]  # (B, L)
    idx = torch.where(mask, starts[:, None] + pos[None, :], torch.zeros((), dtype=torch.long))
    if flat.shape[0] == 0:
        return torch.zeros(len(ids), mask.shape[1], flat.shape[1], dtype=flat.dtype), mask
    out = flat[idx]  # (B, L, dim)
    return out.masked_fill(~mask[..., None], 0), mask


# ----------------------------------------------------------------------------- encoder
@dataclass
class LateInteractionConfig:
    """How text becomes token vectors for MaxSim."""

    proj_dim: int | None = None  # linear h -> proj_dim without bias (ColBERT: 128, trained); None = off
    query_max_length: int = 32  # ColBERT's N_q: query tokens incl. [CLS]/[SEP]
    doc_max_length: int = 180  # ColBERT's doc limit; chunks are <= 128 word pieces + the title
    query_augment: bool = False  # pad queries with [MASK] to query_max_length (ColBERT; needs training)
    mask_punctuation: bool = True  # doc tokens that are single punctuation marks are skipped (ColBERT)
    mask_special: bool = True  # doc [CLS]/[SEP] are skipped too (no trained [D] marker here)
    include_title: bool = True  # encode a DocStore chunk as "title | text"
    batch_size: int = 32  # texts per encoder forward pass
    autocast: str = "auto"  # bf16 where native ("auto"), "bf16", or "off"
    seed: int = 0  # initialisation of the (untrained) projection


class TokenEncoder(nn.Module):
    """HF encoder -> last hidden states -> optional projection -> L2-normalised token vectors."""

    def __init__(self, model: nn.Module, tokenizer, config: LateInteractionConfig | None = None) -> None:
        super().__init__()
        self.config = config or LateInteractionConfig()
        self.model = model
        self.tokenizer = tokenizer
        hidden = int(model.config.hidden_size)
        with torch.random.fork_rng(devices=[]):  # a seeded projection; the caller's RNG is untouched
            torch.manual_seed(self.config.seed)
            self.proj = nn.Linear(hidden, self.config.proj_dim, bias=False) if self.config.proj_dim else None
        self.dim = self.config.proj_dim or hidden
        self.special_ids = torch.tensor(sorted(set(tokenizer.all_special_ids)), dtype=torch.long)
        skip = set()
        for sym in string.punctuation:  # ColBERT's skiplist: each punctuation mark's own token
            ids = tokenizer.encode(sym, add_special_tokens=False)
            if len(ids) == 1:
                skip.add(ids[0])
        self.punct_ids = torch.tensor(sorted(skip), dtype=torch.long)
        self.eval()

    @classmethod
    def from_pretrained(
        cls, path: str | None = None, config: LateInteractionConfig | None = None
    ) -> TokenEncoder:
        """Load a local HF encoder directory (None or "minilm": the bundled MiniLM)."""
        from ralm.models.encoder import load_encoder
        from ralm.models.tokenizers import load_tokenizer

        return cls(load_encoder(path), load_tokenizer(path), config)

    def _device(self) -> torch.device:
        return next(self.parameters()).device

    def _forward(self, enc: dict[str, torch.Tensor]) -> torch.Tensor:
        """Tokenized batch -> (B, T, dim) float32 unit vectors."""
        from ralm.models.precision import autocast_context, autocast_dtype

        dev = self._device()
        dtype = autocast_dtype(dev, self.config.autocast, next(self.model.parameters()).dtype)
        with torch.inference_mode(), autocast_context(dev, dtype):
            h = self.model(**{k: v.to(dev) for k, v in enc.items()}).last_hidden_state
            if self.proj is not None:
                h = self.proj(h)
        return F.normalize(h.float(), dim=-1).cpu()

    def _tokenize(
        self, texts: list[str], max_length: int, pad_to_max: bool = False
    ) -> dict[str, torch.Tensor]:
        enc = self.tokenizer(
            texts,
            truncation=True,
            max_length=max_length,
            padding="max_length" if pad_to_max else True,
            return_tensors="pt",
        )
        keep = ("input_ids", "attention_mask", "token_type_ids")
        return {k: enc[k] for k in keep if k in enc}

    def encode_queries(self, queries: Sequence[str]) -> tuple[torch.Tensor, torch.Tensor]:
        """(Q, Lq, dim) float32 token vectors and (Q, Lq) bool mask (every non-padding token).

        With `query_augment`, padding becomes [MASK] tokens that are attended to and kept.
        """
        cfg = self.config
        embs, masks = [], []
        width = cfg.query_max_length
        for s in range(0, len(queries), cfg.batch_size):
            enc = self._tokenize(list(queries[s : s + cfg.batch_size]), width, pad_to_max=True)
            if cfg.query_augment:
                if self.tokenizer.mask_token_id is None:
                    raise RalmError("query_augment needs a tokenizer with a [MASK] token")
                pad = enc["attention_mask"] == 0
                enc["input_ids"] = enc["input_ids"].masked_fill(pad, self.tokenizer.mask_token_id)
                enc["attention_mask"] = torch.ones_like(enc["attention_mask"])
            embs.append(self._forward(enc))
            masks.append(enc["attention_mask"].bool())
        return torch.cat(embs), torch.cat(masks)

    def doc_token_mask(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """(B, T) bool: document tokens that take part in MaxSim (no padding, punctuation, specials)."""
        keep = attention_mask.bool()
        if self.config.mask_punctuation and len(self.punct_ids):
            keep &= ~torch.isin(input_ids, self.punct_ids)
        if self.config.mask_special and len(self.special_ids):
            keep &= ~torch.isin(input_ids, self.special_ids)
        return keep

    def encode_docs(self, texts: Sequence[str], progress: bool = False) -> tuple[torch.Tensor, np.ndarray]:
        """Kept token vectors of all docs as one flat (T, dim) float16 tensor + offsets (N + 1,) int64.

        Doc i is flat[offsets[i]:offsets[i+1]]. Texts are batched by length to limit padding.
        """
        from ralm.progress import tqdm

        cfg = self.config
        texts = list(texts)
        n = len(texts)
        order = np.argsort([len(t) for t in texts], kind="stable")
        per_doc: list[torch.Tensor | None] = [None] * n
        with tqdm(total=n, disable=not progress, unit="doc") as bar:
            for s in range(0, n, cfg.batch_size):
                idx = order[s : s + cfg.batch_size]
                enc = self._tokenize([texts[i] for i in idx], cfg.doc_max_length)
                h = self._forward(enc).half()  # (B, T, dim)
                keep = self.doc_token_mask(enc["input_ids"], enc["attention_mask"])
                for row, i in enumerate(idx):
                    per_doc[i] = h[row][keep[row]]
                bar.update(len(idx))
        lens = np.array([len(t) for t in per_doc], dtype=np.int64)  # type: ignore[arg-type]
        offsets = np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)
        flat = torch.cat(per_doc) if n else torch.zeros(0, self.dim, dtype=torch.float16)  # type: ignore[arg-type]
        return flat, offsets


def doc_text(title: str | None, text: str, include_title: bool) -> str:
    """The string a chunk is encoded from: "title | text" (or the text alone)."""
    return f"{title} | {text}" if include_title and title else text


# ----------------------------------------------------------------------------- retriever
class LateInteractionSearcher:
    """Exhaustive MaxSim search over an in-memory token cache, and MaxSim re-ranking; a `Searcher`.

    li = LateInteractionSearcher(TokenEncoder.from_pretrained(None), store).index()
    li.search_text(["who wrote the iliad"], k=5)
    li.rerank(["who wrote the iliad"], bm25.search_text(["who wrote the iliad"], 100).ids)
    """

    def __init__(self, encoder: TokenEncoder, store: DocStore | None = None) -> None:
        self.encoder = encoder
        self.store = store
        self.flat: torch.Tensor | None = None  # (T, dim) float16 kept doc token vectors
        self.offsets: np.ndarray | None = None  # (N + 1,) int64

    @classmethod
    def from_pretrained(
        cls,
        path: str | None = None,
        store: DocStore | None = None,
        config: LateInteractionConfig | None = None,
    ) -> LateInteractionSearcher:
        return cls(TokenEncoder.from_pretrained(path, config), store)

    @property
    def count(self) -> int:
        if self.offsets is not None:
            return len(self.offsets) - 1
        if self.store is None:
            raise RalmError("no DocStore: pass one to LateInteractionSearcher(encoder, store)")
        return len(self.store)

    def _texts(self, ids: Sequence[int] | None = None) -> list[str]:
        if self.store is None:
            raise RalmError("no DocStore: pass one to LateInteractionSearcher(encoder, store)")
        inc = self.encoder.config.include_title
        if ids is None:
            out = []
            for b in self.store.iter_batches(1024, ["title", "text"]):
                out.extend(doc_text(t, x, inc) for t, x in zip(b["title"], b["text"], strict=True))
            return out
        return [doc_text(r["title"], r["text"], inc) for r in self.store.get_many(ids)]

    def index(self, progress: bool = False) -> LateInteractionSearcher:
        """Encode every chunk of the DocStore into the in-memory token cache; returns self."""
        self.flat, self.offsets = self.encoder.encode_docs(self._texts(), progress=progress)
        return self

    def memory_bytes(self) -> int:
        """Bytes held by the token cache (0 before `index`)."""
        return 0 if self.flat is None else self.flat.numel() * self.flat.element_size() + self.offsets.nbytes

    def scores(self, queries: Sequence[str]) -> np.ndarray:
        """(Q, N) float32 MaxSim of every query with every indexed chunk (after `index`)."""

        queries = check_queries(queries)
        if self.flat is None:
            raise RalmError("no token index: call .index() first (or use rerank)")
        q, qm = self.encoder.encode_queries(queries)
        n = self.count
        out = np.empty((len(queries), n), dtype=np.float32)
        longest = max(1, int(np.diff(self.offsets).max()) if n else 1)
        q_step = max(1, min(len(queries), BLOCK_ELEMENTS // (q.shape[1] * longest * 256)))
        block = max(1, BLOCK_ELEMENTS // (q_step * q.shape[1] * longest))  # docs per block
        for s in range(0, n, block):
            ids = np.arange(s, min(n, s + block))
            d, dm = pad_ragged(self.flat, self.offsets, ids)  # (B, L, dim), (B, L)
            for j in range(0, len(queries), q_step):
                sl = slice(j, j + q_step)
                out[sl, s : s + len(ids)] = maxsim_batched(q[sl], qm[sl], d, dm).numpy()
        return out

    def search_text(self, queries: Sequence[str], k: int, exclude_ids: ExcludeIds = None) -> SearchResult:
        """Exact top-k chunk ids and MaxSim scores per query (best first, ties: lower id).

        Needs `index()`. Always k results; RalmError for an empty batch or query, or k larger
        than the chunks left after exclusion.
        """
        from ralm.retrieval.query_likelihood import top_k_exact

        queries = check_queries(queries)
        if self.flat is None:
            raise RalmError("no token index: call .index() first (or use rerank)")
        excl = prepare_exclude(exclude_ids, len(queries), self.count, k)
        ids, scores = top_k_exact(self.scores(queries), k, excl)
        return SearchResult(ids=ids, scores=scores)

    def rerank(
        self, queries: Sequence[str], candidate_ids: np.ndarray | Sequence[Sequence[int]]
    ) -> SearchResult:
        """Re-score each query's candidates (Q, K) by MaxSim; returns them re-ordered, (Q, K).

        The candidate set is kept: best MaxSim first, ties by the lower id, -1 (missing)
        candidates last with score -inf. Uses the token cache if built, else encodes the
        candidates from the DocStore (each distinct chunk once).
        """

        queries = check_queries(queries)
        cand = np.asarray(candidate_ids, dtype=np.int64)
        if cand.ndim != 2 or cand.shape[0] != len(queries):
            raise RalmError(f"candidate_ids must be (Q, K) = ({len(queries)}, K), got shape {cand.shape}")
        n = self.count
        if ((cand >= n) | (cand < -1)).any():
            raise RalmError(f"candidate ids must be chunk ids 0..{n - 1} (or -1 for none)")
        if self.flat is not None:
            flat, offsets, uniq = self.flat, self.offsets, None
        else:  # encode each distinct candidate once
            uniq = np.unique(cand[cand >= 0])
            flat, offsets = self.encoder.encode_docs(self._texts(uniq.tolist()))
        q, qm = self.encoder.encode_queries(queries)
        scores = np.full(cand.shape, -np.inf, dtype=np.float32)
        for i in range(len(queries)):  # per query: one batched MaxSim over its K candidates
            ok = cand[i] >= 0
            if ok.any():
                rows = cand[i][ok] if uniq is None else np.searchsorted(uniq, cand[i][ok])
                d, dm = pad_ragged(flat, offsets, rows)  # (K, L, dim), (K, L)
                scores[i, ok] = maxsim_batched(q[i : i + 1], qm[i : i + 1], d, dm)[0].numpy()
        ids, top, _ = filter_excluded(cand, scores, None, cand.shape[1])
        return SearchResult(ids=ids, scores=top)
