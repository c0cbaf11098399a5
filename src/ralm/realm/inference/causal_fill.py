"""`ralm fill` for a causal-reader run: the spans generated given each retrieved chunk, and the marginal.

For a text with [MASK]s (a run of masks with only spaces between them is one span; a causal
reader generates a whole span, not one token), the query tower reads the text with the masks
hidden, as in training, and the index gives the top chunks with p(z|x). Given each chunk z (and
the null document: no chunk), the reader generates every span greedily after its sentinel, up to a
line break: "[1]" -> " Hodgenville, Kentucky". Each distinct answer y (the spans of one chunk's
generation) is then scored under every chunk, and the marginal p(y|x) = sum_z p(z|x) p(y|x,z)
picks the prediction. `alternatives` lists, per mask, the answers' spans with their marginal
probability (summed over answers that agree on that span).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from ralm.errors import RalmError
from ralm.realm.masking.causal import SpanQuery, lm_tensors
from ralm.realm.training.run import LoadedRun

__all__ = ["SpanPrediction", "fill_causal", "generate_spans", "masked_query", "predict_spans"]

MAX_SPAN_TOKENS = 24  # generated tokens per span at most


def masked_query(text: str, mask: str, blank: str) -> SpanQuery:
    """`text` with each run of `mask` tokens (spaces between allowed) replaced by a sentinel.

    Example: masked_query("born in [MASK] [MASK] in 1809", "[MASK]", "[{i}]") ->
    SpanQuery("born in [1] in 1809", [""], ["mask"]).
    """
    pattern = re.compile(rf"{re.escape(mask)}(?:\s*{re.escape(mask)})*")
    pieces, n, at = [], 0, 0
    for m in pattern.finditer(text):
        n += 1
        pieces += [text[at : m.start()], blank.format(i=n)]
        at = m.end()
    pieces.append(text[at:])
    return SpanQuery("".join(pieces), [""] * n, ["mask"] * n)


def _generate(reader, prompts: list[list[int]], max_new: int) -> list[str]:
    """Greedy continuations of token id prompts (left-padded into one batch), cut at the first line break."""
    tok, lm = reader.tokenizer, reader.lm
    dev = next(lm.parameters()).device
    pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
    L = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), L), int(pad), dtype=torch.long)
    am = torch.zeros((len(prompts), L), dtype=torch.long)
    for i, p in enumerate(prompts):
        ids[i, L - len(p) :] = torch.tensor(p, dtype=torch.long)
        am[i, L - len(p) :] = 1
    stop = sorted({t for s in ("\n", "\n\n") for t in tok(s, add_special_tokens=False)["input_ids"]})
    eos = [tok.eos_token_id] if tok.eos_token_id is not None else []
    out = lm.generate(
        input_ids=ids.to(dev),
        attention_mask=am.to(dev),
        max_new_tokens=max_new,
        do_sample=False,
        pad_token_id=int(pad),
        begin_suppress_tokens=stop + eos,  # a span is never empty
        eos_token_id=eos + stop,
    )
    texts = tok.batch_decode(out[:, L:].tolist(), skip_special_tokens=True)
    return [t.split("\n", 1)[0].strip() for t in texts]


def generate_spans(run: LoadedRun, queries: list[SpanQuery], docs: list[list[int]]) -> list[list[list[str]]]:
    """Per query, per document of its row in `docs` (chunk id, -1 = none), the spans the reader
    generates greedily given that document (a list of one string per span)."""
    reader, blank = run.model.reader, run.cfg.causal_blank
    tok = reader.tokenizer
    n_spans = [len(q.spans) for q in queries]
    answers = [[[] for _ in row] for row in docs]
    for j in range(max(n_spans)):
        prompts, where = [], []
        for b, q in enumerate(queries):
            if j >= n_spans[b]:
                continue
            qids = tok(q.masked_text + "\n", add_special_tokens=False)["input_ids"]
            for d, cid in enumerate(docs[b]):
                done = answers[b][d]
                head = "".join(
                    f"{chr(10) if i else ''}{blank.format(i=i + 1)} {s}" for i, s in enumerate(done)
                )
                t = tok(head + ("\n" if j else "") + blank.format(i=j + 1), add_special_tokens=False)[
                    "input_ids"
                ]
                budget = reader.max_length - len(reader.prefix) - len(qids) - len(t) - MAX_SPAN_TOKENS
                if budget < 0:
                    raise RalmError(
                        f"the text takes more than the reader's {reader.max_length} tokens with its spans; shorten it"
                    )
                dids = reader.doc_ids(cid)[:budget] if cid >= 0 else []
                prompts.append(reader.prefix + dids + qids + t)
                where.append((b, d))
        for (b, d), text in zip(where, _generate(reader, prompts, MAX_SPAN_TOKENS), strict=True):
            answers[b][d].append(text)
    return answers


@dataclass
class SpanPrediction:
    """REALM's prediction for one masked text: the answers generated given each document and the
    one with the highest marginal p(y|x) = sum_z p(z|x) p(y|x,z).

    answers: per document of the row, the generated spans; candidates: the distinct non-empty
    answers (C of them); lp (C, K) log p(y|x,z) of each candidate under each document; log_p_z (K,);
    marginal (C,) log p(y|x); best: the index of the prediction in candidates."""

    answers: list[list[str]]
    candidates: list[tuple[str, ...]]
    lp: torch.Tensor
    log_p_z: torch.Tensor
    marginal: torch.Tensor
    best: int

    @property
    def spans(self) -> list[str]:
        """The predicted spans, one per mask."""
        return list(self.candidates[self.best])

    @property
    def p(self) -> float:
        """The prediction's marginal probability."""
        return float(self.marginal[self.best].exp())


@torch.inference_mode()
def predict_spans(
    run: LoadedRun,
    queries: Sequence[SpanQuery],
    docs: list[list[int]],
    log_p_z: torch.Tensor,
    *,
    score_single: bool = True,
) -> list[SpanPrediction]:
    """The marginal prediction of each query given its documents `docs` (B rows of K chunk ids, -1
    the null document) and their log p(z|x) `log_p_z` (B, K): generate given each document
    (`generate_spans`), score every distinct answer under every document, pick the best marginal.
    With one document a row (closed-book: [[-1]], an oracle: [[the right chunk]]) it is the answer
    generated given that document; `score_single=False` then skips scoring it (`lp` and `marginal`
    are NaN: an evaluation that needs the answer alone saves a reader pass a query)."""
    model, dev = run.model, run.device
    answers = generate_spans(run, list(queries), docs)
    out = []
    for b, q in enumerate(queries):
        cands = list(dict.fromkeys(tuple(a) for a in answers[b] if all(a)))
        if not cands:  # every generation was empty: nothing to score
            cands = [tuple(answers[b][0])]
        if not score_single and len(docs[b]) == 1:
            nan = torch.full((1, 1), float("nan"))
            out.append(SpanPrediction(answers[b], cands[:1], nan, log_p_z[b].float().cpu(), nan[0], 0))
            continue
        cq = [SpanQuery(q.masked_text, list(c), q.kinds) for c in cands]
        lm = {
            kx: torch.from_numpy(v).to(dev)
            for kx, v in lm_tensors(cq, model.reader.tokenizer, run.cfg.causal_blank).items()
        }
        lp = model.reader.log_p_y_given_docs(lm, [docs[b]] * len(cands)).float().cpu()  # (C, K)
        lpz = log_p_z[b].float().cpu()
        marg = torch.logsumexp(lpz[None, :] + lp, dim=1)  # (C,)
        out.append(SpanPrediction(answers[b], cands, lp, lpz, marg, int(marg.argmax())))
    return out


@torch.inference_mode()
def fill_causal(run: LoadedRun, texts: Sequence[str], *, k: int | None = None, top: int = 5) -> list:
    """`ralm.realm.inference.fill.fill_many` for a causal-reader run (see the module docstring)."""
    from ralm.realm.inference.fill_types import FillDoc, FillResult

    model, dev, tok = run.model, run.device, run.tokenizer
    mask = tok.mask_token or "[MASK]"
    queries = [masked_query(t, mask, run.cfg.causal_blank) for t in texts]
    if any(not q.spans for q in queries):
        raise RalmError(f"the text has no {mask}; put {mask} where a span should be generated")
    B = len(texts)
    if model.retrieval:
        kk = run.cfg.k if k is None else int(k)
        n_ret = kk - (0 if model.null_doc == "none" else 1)
        if n_ret < 1 or n_ret > len(run.store):
            raise RalmError(
                f"k={kk}: choose between {2 if model.null_doc != 'none' else 1} and {len(run.store)}"
            )
        enc = tok(
            list(texts),
            truncation=True,
            max_length=run.cfg.encoder_max_length,
            padding=True,
            return_tensors="pt",
        )
        batch = {"input_ids": enc["input_ids"].to(dev), "attention_mask": enc["attention_mask"].to(dev)}
        q = model.embed_queries(batch)
        qn, no_source = q.float().cpu().numpy(), np.full(B, -1, dtype=np.int64)
        if getattr(run.searcher, "wants_query_ids", False):
            found = run.searcher(qn, no_source, n_ret, query_ids=enc["input_ids"].numpy())
        else:
            found = run.refresher.index.search(qn, n_ret).ids
        doc_ids = np.asarray(found, dtype=np.int64)  # (B, n_ret)
        log_p_z = model.prior_over(q, doc_ids).float()
        docs = [[int(c) for c in row] + ([-1] if model.null_doc != "none" else []) for row in doc_ids]
    else:
        log_p_z = torch.zeros((B, 1))
        docs = [[-1] for _ in range(B)]
    out = []
    for b, (q, pred) in enumerate(zip(queries, predict_spans(run, queries, docs, log_p_z), strict=True)):
        answers, cands, lp, lpz, best = pred.answers, pred.candidates, pred.lp, pred.log_p_z, pred.best
        fdocs = []
        for j, cid in enumerate(docs[b]):
            own = cands.index(tuple(answers[j])) if tuple(answers[j]) in cands else best
            row = run.store.get(cid) if cid >= 0 else {"title": "", "text": ""}
            fdocs.append(
                FillDoc(
                    cid,
                    row.get("title") or "",
                    row.get("text") or "",
                    float(lpz[j].exp()),
                    list(answers[j]),
                    float(lp[own, j].exp()),
                )
            )
        null = [x for x in fdocs if x.chunk_id < 0]
        ranked = sorted((x for x in fdocs if x.chunk_id >= 0), key=lambda x: -x.p_z) + null
        p = pred.marginal.exp()
        alts = []
        for s in range(len(q.spans)):
            agg: dict[str, float] = {}
            for c, pc in zip(cands, p.tolist(), strict=True):
                agg[c[s]] = agg.get(c[s], 0.0) + pc
            alts.append(sorted(agg.items(), key=lambda kv: -kv[1])[:top])
        out.append(
            FillResult(texts[b], ranked if model.retrieval else [], list(cands[best]), float(p[best]), alts)
        )
    return out
