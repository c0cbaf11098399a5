"""kNN-LM (Khandelwal et al., 2020) over the training sentences: SUREALM's second baseline.

The data store maps the context vector of every training position, the vector the LM's output
projection reads (`SurealmLM.forward(return_hidden=True)`), to the token that followed it.
At test time the k nearest contexts (squared L2, exact FAISS search) give
p_kNN(y) = sum_i softmax(-d_i / temperature) [v_i = y], and the model's probability is
p(y) = lambda p_kNN(y) + (1 - lambda) p_LM(y). lambda and the temperature are chosen on the
validation sentences (grid search; the paper tunes lambda on validation too) and applied to test.

Only what the perplexity needs is kept per evaluated token: log p_LM of the label and the label's
share of the neighbours' softmax, so trying another lambda or temperature costs no new search.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from ralm.models.precision import autocast_context, autocast_dtype
from ralm.surealm.data import IGNORE_INDEX, PerplexityCounts, SentenceBatcher
from ralm.surealm.model import SurealmLM

LAMBDAS = (0.0, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.4, 0.5)
TEMPERATURES = (1.0, 3.0, 10.0, 30.0, 100.0)

__all__ = ["KnnLM", "KnnScores"]


@torch.inference_mode()
def _contexts(model: SurealmLM, batcher: SentenceBatcher, sids: np.ndarray, batch_size: int, autocast: str):
    """Yield (context vectors (M, H) float32, labels (M,), log p_LM(label) (M,), sids of the batch)."""
    dev = next(model.parameters()).device
    ac = autocast_dtype(dev, autocast, torch.float32)
    model.eval()
    for s0 in range(0, len(sids), batch_size):
        ids = sids[s0 : s0 + batch_size]
        b = batcher.batch(ids)
        inputs = {
            k: b[k].to(dev)
            for k in ("input_ids", "attention_mask", "mem_keys", "mem_values", "mem_block")
            if k in b
        }
        with autocast_context(dev, ac):
            logits, hidden = model(**inputs, return_hidden=True)
        labels = b["labels"].to(dev)
        keep = labels != IGNORE_INDEX
        lp = torch.log_softmax(logits.float()[keep], dim=-1)
        y = labels[keep]
        yield (
            hidden.float()[keep].cpu().numpy(),
            y.cpu().numpy(),
            lp.gather(1, y[:, None])[:, 0].cpu().numpy(),
            ids,
        )


@dataclass
class KnnScores:
    """Per evaluated token: log p_LM(label), neighbour distances (M, k) and label matches (M, k)."""

    lm_logp: np.ndarray
    dist: np.ndarray
    match: np.ndarray
    counts: PerplexityCounts

    def perplexity(self, lam: float, temperature: float) -> PerplexityCounts:
        """Counts with the interpolated NLL for one (lambda, temperature)."""
        logits = -self.dist / temperature
        logits -= logits.max(axis=1, keepdims=True)
        w = np.exp(logits)
        p_knn = (w * self.match).sum(1) / w.sum(1)
        p_lm = np.exp(self.lm_logp)
        p = lam * p_knn + (1.0 - lam) * p_lm
        nll = -float(np.log(np.maximum(p, 1e-300)).sum())
        c = PerplexityCounts(nll, self.counts.tokens, self.counts.words, self.counts.sentences)
        return c


class KnnLM:
    """A trained LM (normally the no-retrieval baseline) plus its context -> next-token data store."""

    def __init__(
        self, model: SurealmLM, batcher: SentenceBatcher, *, k: int = 64, autocast: str = "auto"
    ) -> None:
        self.model = model
        self.batcher = batcher
        self.k = k
        self.autocast = autocast
        self.index = None
        self.values: np.ndarray | None = None

    def build(self, sids: np.ndarray, batch_size: int = 64) -> int:
        """Add every position of the sentences `sids` (normally the training split); returns its size."""
        import faiss

        vals = []
        for h, y, _, _ in _contexts(self.model, self.batcher, sids, batch_size, self.autocast):
            if self.index is None:
                self.index = faiss.IndexFlatL2(h.shape[1])
            self.index.add(np.ascontiguousarray(h, dtype=np.float32))
            vals.append(y)
        self.values = np.concatenate(vals).astype(np.int64)
        return len(self.values)

    def scores(self, sids: np.ndarray, batch_size: int = 64) -> KnnScores:
        """Search the neighbours of every predicted token of `sids` (see `KnnScores`)."""
        if self.index is None or self.values is None:
            raise RuntimeError("build() the data store first")
        k = min(self.k, self.index.ntotal)
        lps, dists, matches = [], [], []
        counts = PerplexityCounts()
        for h, y, lp, ids in _contexts(self.model, self.batcher, sids, batch_size, self.autocast):
            d, i = self.index.search(np.ascontiguousarray(h, dtype=np.float32), k)
            lps.append(lp)
            dists.append(d)
            matches.append(self.values[i] == y[:, None])
            counts.add(self.batcher.counts(ids))
        return KnnScores(np.concatenate(lps), np.concatenate(dists), np.concatenate(matches), counts)

    @staticmethod
    def tune(valid: KnnScores) -> tuple[float, float, PerplexityCounts]:
        """(lambda, temperature, validation counts) of the lowest validation perplexity on the grid."""
        best = None
        for t in TEMPERATURES:
            for lam in LAMBDAS:
                c = valid.perplexity(lam, t)
                if best is None or c.nll < best[2].nll:
                    best = (lam, t, c)
        assert best is not None
        return best
