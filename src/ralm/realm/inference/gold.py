"""A REALM run scored on queries whose right document is known: does the retriever find it, does
p(z|x) put its mass there, and does the reader fill the span with and without it.

For a query DocStore (the run's own, or another one such as a controlled world's held-out
queries) and each query's gold chunk in the knowledge corpus, `evaluate_gold` masks every query
as `evaluate-mlm` masks held-out chunks (one salient span, seeded per chunk) and reports, per
query and on average:

* `rank`: the gold chunk's place in the run's dense search (1 = first; 0 = not in the top
  `depth`); recall@1 and recall@3 from it;
* `p_right`: the run's p(z|x) of the gold chunk over its k documents (the top k - 1 and the null
  document), 0 when it is not among them;
* content-token log-likelihoods of the span: with retrieval (REALM's marginal over the k
  documents), closed-book (no document) and given the gold chunk alone (the oracle);
* with `generate`: the span the reader generates under each of the three (`predict_spans`: with
  retrieval, the answer with the highest marginal, and `fill_doc`, the document that gives it the
  most mass, -1 the null document), and exact match and token F1 against the masked span;
* `n_content`: the span's content tokens, so that NLLs turn into a perplexity.

A closed-book run (`mode = "mlm"` with a causal reader) gets the closed-book and oracle rows only:
how often its reader copies the value from the right document is BRENT's question (does retrieval
pre-training teach the reader to use its context?).

The trivial retrieval follows the run's one rule (`ralm.realm.modeling.candidates.trivial_ids`): queries from
another store exclude nothing. Left out: more than one span a query (each query's first masked span
is the one generated; its NLL counts all) and masked-LM readers (generation needs a causal reader).
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ralm.answers import squad_scores
from ralm.corpus.docstore import DocStore
from ralm.errors import RalmError
from ralm.models.precision import autocast_context, autocast_dtype
from ralm.realm.inference.causal_fill import predict_spans
from ralm.realm.inference.evaluate import content_tokens
from ralm.realm.modeling.candidates import queries_are_corpus
from ralm.realm.training.heldout import eval_collator, heldout_batches
from ralm.realm.training.run import LoadedRun

__all__ = [
    "evaluate_gold",
    "examples",
    "format_examples",
    "format_gold",
    "gold_chunks",
    "read_gold",
    "row_summary",
    "summarize_gold",
    "with_queries",
]


def with_queries(run: LoadedRun, queries: DocStore) -> LoadedRun:
    """`run` reading its queries from `queries` instead (its exclusion rule follows the store)."""
    return replace(run, query_store=queries, same_corpus=queries_are_corpus(run.store, queries))


def _content_lp(model, batch, rows: list[list[int]]) -> torch.Tensor:
    """(B, K) content-token log p(y|x,z) of each query's spans under each chunk of its row."""
    rr = model.reader.build_rows(batch, rows)
    return rr.sums(model.reader.token_log_probs(rr).float(), content_only=True).cpu()


@torch.inference_mode()
def evaluate_gold(
    run: LoadedRun,
    queries: DocStore,
    gold: np.ndarray,
    *,
    ids: np.ndarray | None = None,
    depth: int = 20,
    reader: bool = True,
    generate: bool = True,
    batch_size: int = 16,
    rows: Sequence[str] = ("retrieval", "closed_book", "oracle"),
) -> dict[str, Any]:
    """Score `run` on the chunks `ids` (default: all) of the query store `queries`, whose right
    documents are `gold` (N,) chunk ids of the run's corpus, one per query chunk (see the module
    docstring). `reader=False` gives the retrieval measures alone (rank, p_right, p_null: the towers
    only, no reader pass); `generate=False` leaves out the generated spans; `rows` names the ways of
    reading a query that are scored (a closed-book run has no "retrieval" row). Returns
    {"summary": {...}, "records": [one dict per query]}."""
    model = run.model
    if not model.causal:
        raise RalmError(f"{run.cfg.out}: gold evaluation needs a run with a causal reader")
    if model.reader.store is None:  # a closed-book run's reader: the oracle row reads the corpus's chunks
        model.reader.store = run.store
    gold = np.asarray(gold, dtype=np.int64)
    if len(gold) != len(queries):
        raise RalmError(f"{queries.root}: {len(queries)} query chunks but {len(gold)} gold documents")
    if ((gold < 0) | (gold >= len(run.store))).any():
        raise RalmError(f"gold documents must be chunk ids of {run.store.root} (0..{len(run.store) - 1})")
    qrun = with_queries(run, queries)
    ids = np.arange(len(queries), dtype=np.int64) if ids is None else np.asarray(ids, dtype=np.int64)
    depth = min(depth, len(run.store) - (1 if qrun.same_corpus else 0))
    ac = autocast_dtype(run.device, run.cfg.autocast, torch.float32)
    col = eval_collator(qrun)
    records: list[dict[str, Any]] = []
    for batch in heldout_batches(qrun, ids, batch_size):
        src = batch["source_ids"].numpy()
        examples = [col.mask(int(c), np.random.default_rng([run.cfg.seed, 3, int(c)])) for c in src]
        spans = [col.span_query(int(c), ex) for c, ex in zip(src, examples, strict=True)]
        batch = {k: v.to(run.device) for k, v in batch.items()}
        g = gold[src]
        n_content = content_tokens(batch).tolist()
        recs: list[dict[str, Any]] = [
            {
                "query": int(c),
                "gold": int(x),
                "span": q.spans[0],
                "masked_text": q.masked_text,
                "n_content": int(n),
            }
            for c, x, q, n in zip(src, g, spans, n_content, strict=True)
        ]
        # each row of the reader: its documents and their log p(z|x) (closed-book and oracle: one)
        one = torch.zeros(len(src), 1)
        ways = {"closed_book": ([[-1]] * len(src), one), "oracle": ([[int(x)] for x in g], one)}
        ways = {name: way for name, way in ways.items() if name in rows}
        with autocast_context(run.device, ac):
            if model.retrieval and "retrieval" in rows:
                ways["retrieval"] = _retrieval(qrun, batch, src, g, depth, recs)
            if reader:
                for name, (docs, lpz) in ways.items():
                    lp = torch.logsumexp(lpz + _content_lp(model, batch, docs), dim=1)
                    for rec, v in zip(recs, lp.tolist(), strict=True):
                        rec[f"lp_{name}"] = v
        if reader and generate:
            for name, (docs, lpz) in ways.items():
                preds = predict_spans(qrun, spans, docs, lpz, score_single=False)
                for rec, q, pr, row in zip(recs, spans, preds, docs, strict=True):
                    rec[f"fill_{name}"] = pr.spans[0]
                    rec[f"em_{name}"], rec[f"f1_{name}"] = squad_scores(pr.spans[0], [q.spans[0]])
                    if name == "retrieval":  # the document that gives the prediction the most mass
                        rec["fill_doc"] = int(row[int((pr.log_p_z + pr.lp[pr.best]).argmax())])
        records += recs
    if not records:
        raise RalmError(f"{queries.root}: none of the {len(ids)} query chunks has a salient span to mask")
    return {"summary": summarize_gold(records), "records": records}


def _retrieval(qrun: LoadedRun, batch, src: np.ndarray, gold: np.ndarray, depth: int, recs: list[dict]):
    """The retrieval measures of a batch into `recs` (rank, p_right, p_null, top_docs); returns the
    retrieval row's (documents with the null last, log p(z|x) (B, K))."""
    model = qrun.model
    q = model.embed_queries(batch)
    found = np.asarray(qrun.search(q.float().cpu().numpy(), src, depth), dtype=np.int64)
    log_p_z, doc_ids = model.log_p_z(batch, qrun.searcher)
    log_p_z = log_p_z.float().cpu()
    has_null = model.null_doc != "none"
    for b, rec in enumerate(recs):
        hit = np.flatnonzero(found[b] == gold[b])
        in_k = [j for j, d in enumerate(doc_ids[b].tolist()) if d == gold[b]]
        rec["rank"] = int(hit[0]) + 1 if len(hit) else 0
        rec["p_right"] = float(log_p_z[b, in_k[0]].exp()) if in_k else 0.0
        rec["p_null"] = float(log_p_z[b, -1].exp()) if has_null else 0.0
        rec["top_docs"] = doc_ids[b].tolist()
    return [[*r, -1] if has_null else list(r) for r in doc_ids.tolist()], log_p_z


def summarize_gold(records: list[dict[str, Any]]) -> dict[str, float]:
    """Means over the records of `evaluate_gold`: recall@1/@3, p_right, p_null, the per-query mean
    content NLL of each row and its content-token perplexity, and the exact match and token F1
    (SQuAD's, in [0, 1]) of each generated row present."""
    out = {"queries": float(len(records))}
    if "rank" in records[0]:
        rank = np.array([r["rank"] for r in records])
        out["recall@1"] = float(np.mean(rank == 1))
        out["recall@3"] = float(np.mean((rank >= 1) & (rank <= 3)))
        out["p_right"] = float(np.mean([r["p_right"] for r in records]))
        out["p_null"] = float(np.mean([r["p_null"] for r in records]))
    for row in ("retrieval", "closed_book", "oracle"):
        out.update({f"{m}_{row}": v for m, v in row_summary(records, row).items()})
    return out


def row_summary(records: list[dict[str, Any]], row: str) -> dict[str, float]:
    """One way of reading the queries (`row`: "retrieval", "closed_book", "oracle", or any name whose
    `lp_`, `em_` and `f1_` fields the records hold), each measure present in the records: "nll" (the
    per-query mean content NLL), "ppl" (the content-token perplexity), "em" and "f1" (means in [0, 1])."""
    out: dict[str, float] = {}
    if f"lp_{row}" in records[0]:
        nll = -np.array([r[f"lp_{row}"] for r in records])
        out["nll"] = float(nll.mean())
        tokens = sum(r.get("n_content", 0) for r in records)
        if tokens:
            out["ppl"] = float(np.exp(nll.sum() / tokens))
    for m in ("em", "f1"):
        if f"{m}_{row}" in records[0]:
            out[m] = float(np.mean([r[f"{m}_{row}"] for r in records]))
    return out


def read_gold(path: str | os.PathLike) -> dict[str, str]:
    """query source id -> document source id from a JSONL file of {"query", "document"} objects (a
    controlled world's gold.jsonl); RalmError naming the file and line when one is not."""
    p = Path(path)
    try:
        lines = p.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise RalmError(f"{p}: cannot read ({exc}); give a JSONL file of query/document ids") from None
    out: dict[str, str] = {}
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
            out[str(rec["query"])] = str(rec["document"])
        except (ValueError, KeyError, TypeError):
            raise RalmError(f'{p}:{n}: expected {{"query": ID, "document": ID}}; fix the line') from None
    return out


def format_gold(summary: dict[str, float]) -> str:
    """The summary of `evaluate_gold` as plain text, one measure a line."""
    names = {
        "queries": "queries",
        "recall@1": "right document first (dense recall@1)",
        "recall@3": "right document in the top 3 (dense recall@3)",
        "p_right": "mean p(right | x) over the run's k documents",
        "p_null": "mean p(null | x)",
        "em_retrieval": "span exact match, with retrieval",
        "em_closed_book": "span exact match, closed-book",
        "em_oracle": "span exact match, given the right document",
        "f1_retrieval": "span token F1, with retrieval",
        "f1_closed_book": "span token F1, closed-book",
        "f1_oracle": "span token F1, given the right document",
        "ppl_retrieval": "span content perplexity, with retrieval",
        "ppl_closed_book": "span content perplexity, closed-book",
        "ppl_oracle": "span content perplexity, given the right document",
        "nll_retrieval": "span content NLL (nats), with retrieval",
        "nll_closed_book": "span content NLL (nats), closed-book",
        "nll_oracle": "span content NLL (nats), given the right document",
    }
    return "\n".join(
        f"{names[k]:<48} {v:.0f}" if k == "queries" else f"{names[k]:<48} {v:.3f}"
        for k, v in summary.items()
        if k in names
    )


def gold_chunks(queries: DocStore, corpus: DocStore, gold: dict[str, str]) -> np.ndarray:
    """(N,) the gold chunk of each of the N chunks of `queries`, from `gold` (a query's source id ->
    its document's source id, the JSONL "id"s): a document's first chunk, -1 for a query with no
    entry. RalmError when a gold document is not in `corpus`."""
    q_art = queries.articles(["source_id", "first_chunk", "n_chunks"]).to_pylist()
    c_art = {
        a["source_id"]: a["first_chunk"] for a in corpus.articles(["source_id", "first_chunk"]).to_pylist()
    }
    out = np.full(len(queries), -1, dtype=np.int64)
    for a in q_art:
        doc = gold.get(a["source_id"])
        if doc is None:
            continue
        if doc not in c_art:
            raise RalmError(
                f"{corpus.root}: no document {doc!r} (the gold document of query {a['source_id']!r})"
            )
        out[a["first_chunk"] : a["first_chunk"] + a["n_chunks"]] = c_art[doc]
    return out


def examples(run: LoadedRun, records: list[dict[str, Any]], n: int = 3) -> list[dict[str, Any]]:
    """The first `n` records of `evaluate_gold` as a demo shows them: the masked text, the right
    answer, the fill with retrieval and closed-book, and the chunk the fill came from (`from_chunk`
    -1 and no text: the null document)."""
    out = []
    for r in records[:n]:
        doc = int(r.get("fill_doc", -1))
        row = run.store.get(doc) if doc >= 0 else None
        out.append(
            {
                "masked_text": r["masked_text"],
                "answer": r["span"],
                "fill": r.get("fill_retrieval"),
                "fill_closed_book": r.get("fill_closed_book"),
                "from_chunk": doc,
                "from_title": (row.get("title") or "") if row else None,
                "from_text": (row.get("text") or "") if row else None,
            }
        )
    return out


def format_examples(shown: list[dict[str, Any]], *, width: int = 200) -> str:
    """The `examples` as plain text, the source chunk's text cut to `width` characters."""
    lines: list[str] = []
    for i, ex in enumerate(shown, 1):
        src = "the null document (no chunk)"
        if ex["from_chunk"] >= 0:
            text = " ".join(ex["from_text"].split())
            text = text if len(text) <= width else text[: width - 3] + "..."
            src = f"chunk {ex['from_chunk']} ({ex['from_title']}): {text}"
        lines += [
            "",
            f"example {i}: {' '.join(ex['masked_text'].split())}",
            f"  fill [1]: {ex['fill']!r}   right answer: {ex['answer']!r}   closed-book: {ex['fill_closed_book']!r}",
            f"  from {src}",
        ]
    return "\n".join(lines)
