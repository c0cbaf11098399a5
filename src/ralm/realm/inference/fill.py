"""Fill in [MASK] tokens with a pre-training run, shown as REALM's Table 3.

For a text with one or more [MASK] tokens, `fill(run, text)` retrieves the top documents for the
masked text (nothing excluded: the text is not a corpus chunk), and gives

* each document z with p(z|x), the reader's prediction given z (the argmax token at every mask)
  and p(y|z,x) of that prediction (the product over the masks);
* the null document's line the same way (when the run has one);
* the marginal prediction: per mask, argmax_y Σ_z p(z|x) p(y_j=y|z,x), and its probability
  p(y|x) = Σ_z p(z|x) Π_j p(y_j|z,x) under the full model.

A run trained without retrieval (the MLM-only baseline) gives the reader's prediction alone.
Consecutive masks are predicted per position (each mask independently given z), as REALM does.
A causal-reader run generates whole spans instead (`ralm.realm.inference.causal_fill`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from ralm.errors import RalmError
from ralm.realm.inference.fill_types import FillDoc, FillResult
from ralm.realm.readers.mlm import build_reader_inputs
from ralm.realm.training.run import LoadedRun

__all__ = ["FillDoc", "FillResult", "fill", "fill_many"]


def _tokens(tok, ids) -> list[str]:
    return [tok.convert_ids_to_tokens(int(i)) for i in ids]


def fill(run: LoadedRun, text: str, *, k: int | None = None, top: int = 5) -> FillResult:
    """Predict the [MASK] tokens of `text` with the run's model (see the module docstring).

    k: documents incl. the null one (default: the run's k). top: alternatives listed per mask.
    """
    return fill_many(run, [text], k=k, top=top)[0]


@torch.inference_mode()
def fill_many(
    run: LoadedRun, texts: Sequence[str], *, k: int | None = None, top: int = 5
) -> list[FillResult]:
    """`fill` for several texts in one batch: one query-tower pass, one index search, one doc-tower
    pass and one reader pass (the texts padded to the longest); the same answers as one by one,
    up to float rounding. RalmError when any text is unusable (no [MASK], or none within reach).
    """
    if run.model.causal:  # spans generated per chunk, then the marginal (ralm.realm.inference.causal_fill)
        from ralm.realm.inference.causal_fill import fill_causal

        return fill_causal(run, texts, k=k, top=top)
    tok = run.tokenizer
    mask_tok = tok.mask_token or "[MASK]"
    for text in texts:
        if mask_tok not in text:
            raise RalmError(f"the text has no {mask_tok}; put {mask_tok} where a token should be predicted")
    enc = tok(
        list(texts), truncation=True, max_length=run.cfg.encoder_max_length, padding=True, return_tensors="pt"
    )
    ids = enc["input_ids"]  # (B, L), padded to the longest text
    masked = [(row == tok.mask_token_id).nonzero().flatten() for row in ids]  # per text: mask positions
    if any(len(m) == 0 for m in masked):
        raise RalmError(
            f"every {mask_tok} of the text lies beyond {run.cfg.encoder_max_length} tokens; shorten it"
        )
    labels = torch.full_like(ids, -100)
    for b, m in enumerate(masked):
        labels[b, m] = tok.mask_token_id  # placeholder labels mark the positions to read
    model, dev = run.model, run.device
    batch = {
        "input_ids": ids.to(dev),
        "attention_mask": enc["attention_mask"].to(dev),
        "labels": labels.to(dev),
    }

    if not model.retrieval:
        rows, cols = (labels != -100).nonzero(as_tuple=True)  # row-major: text b's masks in turn
        inputs = {"input_ids": batch["input_ids"], "attention_mask": batch["attention_mask"]}
        lp_all = torch.log_softmax(model.reader.masked_logits(inputs, rows.to(dev), cols.to(dev)).float(), -1)
        out, at = [], 0
        for text, m in zip(texts, masked, strict=True):
            lp = lp_all[at : at + len(m)]  # (M, V)
            at += len(m)
            best = lp.argmax(-1)
            p = float(lp.gather(1, best[:, None]).sum().exp())
            out.append(FillResult(text, [], _tokens(tok, best), p, _alternatives(tok, lp.exp(), top)))
        return out

    kk = run.cfg.k if k is None else int(k)
    n_ret = kk - (0 if model.null_doc == "none" else 1)
    if n_ret < 1 or n_ret > len(run.store):
        raise RalmError(f"k={kk}: choose between {2 if model.null_doc != 'none' else 1} and {len(run.store)}")
    B = len(texts)
    q = model.embed_queries(batch)  # (B, d)
    qn, no_source = q.float().cpu().numpy(), np.full(B, -1, dtype=np.int64)
    if getattr(run.searcher, "wants_query_ids", False):
        doc_ids = np.asarray(run.searcher(qn, no_source, n_ret, query_ids=ids.numpy()), dtype=np.int64)
    else:
        doc_ids = run.refresher.index.search(qn, n_ret).ids  # (B, n_ret)
    log_p_z = model.prior_over(q, doc_ids)  # (B, K)
    docs = [[model.docs.reader_doc(i) for i in row] for row in doc_ids]
    if model.null_doc != "none":
        for row in docs:
            row.append(([], []))
    K = len(docs[0])
    rin = build_reader_inputs(ids, labels, docs, model.sep_id, model.pad_id, model.reader_max_length)
    rows, cols = (rin["labels"] != -100).nonzero(as_tuple=True)  # row-major: query b's K rows in turn
    inputs = {kx: v.to(dev) for kx, v in rin.items() if kx != "labels"}
    # the vocabulary head on the masked positions only (Reader.masked_logits): on every position
    # it cost about half of a fill with MiniLM (L x H x V multiply-adds per row)
    logits = model.reader.masked_logits(inputs, rows.to(dev), cols.to(dev))
    lp_all = torch.log_softmax(logits.float(), -1)  # (sum_b K * M_b, V)
    out, at = [], 0
    for b, (text, m) in enumerate(zip(texts, masked, strict=True)):
        n = K * len(m)
        lp = lp_all[at : at + n].view(K, len(m), -1)  # (K, M, V)
        at += n
        out.append(_marginal(run, text, doc_ids[b], log_p_z[b], lp, top))
    return out


def _marginal(
    run: LoadedRun, text: str, doc_ids: np.ndarray, log_p_z: torch.Tensor, lp: torch.Tensor, top: int
):
    """One text's FillResult from log p(z|x) (K,) and the reader's log p(y_j|z,x) (K, M, V)."""
    tok, K = run.tokenizer, lp.shape[0]
    best = lp.argmax(-1)  # (K, M)
    lp_best = lp.gather(2, best[..., None])[..., 0].sum(1)  # (K,) log p(argmax|z,x)
    p_marg = (log_p_z.float()[:, None, None] + lp).exp().sum(0)  # (M, V) per-mask marginal
    y = p_marg.argmax(-1)
    joint = torch.logsumexp(
        log_p_z.float() + lp.gather(2, y[None, :, None].expand(K, -1, 1))[..., 0].sum(1), 0
    )
    out_docs = []
    for j in range(K):
        cid = int(doc_ids[j]) if j < len(doc_ids) else -1
        row = run.store.get(cid) if cid >= 0 else {"title": "", "text": ""}
        out_docs.append(
            FillDoc(
                cid,
                row.get("title") or "",
                row.get("text") or "",
                float(log_p_z[j].exp()),
                _tokens(tok, best[j]),
                float(lp_best[j].exp()),
            )
        )
    null = [x for x in out_docs if x.chunk_id < 0]
    ranked = sorted((x for x in out_docs if x.chunk_id >= 0), key=lambda x: -x.p_z) + null
    return FillResult(text, ranked, _tokens(tok, y), float(joint.exp()), _alternatives(tok, p_marg, top))


def _alternatives(tok, probs: torch.Tensor, top: int) -> list[list[tuple[str, float]]]:
    p, i = probs.topk(min(top, probs.shape[-1]), dim=-1)
    return [
        [(t, float(v)) for t, v in zip(_tokens(tok, ii), pp, strict=True)]
        for ii, pp in zip(i, p, strict=True)
    ]
