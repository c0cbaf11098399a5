"""The held-out span table: what a causal REALM run's retrieval is worth on spans it never trained
on, counted rather than shown by a hand-picked example.

The queries are the first `n` chunks of the run's held-out split that have a span to mask, masked
as `evaluate-mlm` masks them (the run's masking, seeded per chunk; the first masked span is the
one counted), never chosen by outcome. The reader fills each span three ways:

* closed-book: no document;
* with retrieval: REALM's marginal over the run's top k - 1 chunks and the null document;
* oracle: given the chunk that holds the span.

and the table counts, per way, the exact match and token F1 of the filled span against the masked
text (SQuAD v1.1, `ralm.answers.squad_scores`) and the span's content-token perplexity; beside them,
how often a chunk that holds the span (any chunk whose text contains it) is among the retrieved ones. With the run's starting point
(`initial`), the retrieval row at step 0 is counted too, so a run that is not above its own
start shows it.

The chunk that holds the span: of the corpus chunks other than the query's own whose text contains
the span (case folded), the one that shares the most words with the masked text (the lowest id on
a tie). It does not depend on the run's towers, so the oracle row is the same question at every
step. A query whose span no other chunk holds has no oracle and is skipped (the table counts
them); with `masking.retrievable_only` there are none but the rare span whose tokens match and
whose text does not. The search for holders reads every chunk's text once and tests each span
against each chunk: fine for a demo corpus; for millions of chunks keep `n` small.

Example (the demo's corpus): the masked text "Lincoln was born in [1] in 1809." with the span
"Hodgenville" is held by a chunk of the article on Lincoln's early life; the oracle row reads that
chunk, the retrieval row whatever the query tower finds.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from ralm.errors import RalmError
from ralm.realm.inference.gold import evaluate_gold, format_examples, row_summary
from ralm.realm.inference.gold import examples as gold_examples
from ralm.realm.training.heldout import eval_collator
from ralm.realm.training.run import LoadedRun

__all__ = ["choose_holder", "format_span_table", "heldout_spans", "span_table"]

ROWS = ("closed_book", "retrieval", "oracle")
_WORD = re.compile(r"\w+", re.UNICODE)
_SENTINEL = re.compile(r"\[\d+\]")  # the masked spans' blanks, "[1]": not words of the text


def _words(text: str) -> set[str]:
    return set(_WORD.findall(text.lower()))


def choose_holder(span: str, masked_text: str, texts: list[str], own: int) -> int:
    """The chunk id (an index into `texts`, lower-cased chunk texts) other than `own` whose text
    contains `span` and shares the most words with `masked_text` (its "[1]" blanks left out); -1
    when no other chunk holds it.

    Example: choose_holder("Oslo", "[1] is the capital", ["oslo is big", "the capital oslo"], own=5)
    -> 1 (both hold "oslo"; the first shares "is", the second "the" and "capital")."""
    needle = span.lower().strip()
    if not needle:
        return -1
    context = _words(_SENTINEL.sub(" ", masked_text)) - _words(span)
    best, best_overlap = -1, -1
    for i, t in enumerate(texts):
        if i == own or needle not in t:
            continue
        overlap = len(context & _words(t))
        if overlap > best_overlap:
            best, best_overlap = i, overlap
    return best


def heldout_spans(run: LoadedRun, n: int) -> tuple[list[dict[str, Any]], int]:
    """The first `n` held-out chunks with a span to mask and a chunk that holds it, in the split's
    order: [{"query", "masked_text", "span", "holder"}], and how many chunks with a span were
    skipped because no other chunk holds it."""
    col = eval_collator(run)
    texts = [str(t or "").lower() for b in run.store.iter_batches(columns=["text"]) for t in b["text"]]
    out: list[dict[str, Any]] = []
    skipped = 0
    for c in np.asarray(run.heldout_ids, dtype=np.int64).tolist():
        if len(out) >= n:
            break
        ex = col.mask(int(c), np.random.default_rng([run.cfg.seed, 3, int(c)]))
        if ex is None:
            continue
        q = col.span_query(int(c), ex)
        holder = choose_holder(q.spans[0], q.masked_text, texts, int(c))
        if holder < 0:
            skipped += 1
            continue
        out.append({"query": int(c), "masked_text": q.masked_text, "span": q.spans[0], "holder": holder})
    return out, skipped


def _row(records: list[dict[str, Any]], name: str) -> dict[str, float]:
    """EM and F1 in percent, content perplexity and mean NLL a span of one way of filling."""
    s = row_summary(records, name)
    return {"em": 100.0 * s["em"], "f1": 100.0 * s["f1"], "ppl": s["ppl"], "nll_per_span": s["nll"]}


def span_table(
    run: LoadedRun,
    *,
    n: int = 100,
    initial: LoadedRun | None = None,
    examples: int = 3,
    batch_size: int = 8,
) -> dict[str, Any]:
    """Count `run` on its first `n` held-out spans (see the module docstring); with `initial` (the
    same run loaded at step 0, `load_run(..., initial=True)`) add the retrieval row at step 0.

    Returns {"spans", "asked", "skipped_no_holder", "rows": {way: {"em", "f1", "ppl",
    "nll_per_span"}}, "holder_in_top_k", "k", "examples": [...], "records": [...]}, EM and F1 in
    percent."""
    if not run.model.causal or not run.model.retrieval:
        raise RalmError(f"{run.cfg.out}: the held-out span table needs a REALM run with a causal reader")
    spans, skipped = heldout_spans(run, n)
    if not spans:
        raise RalmError(
            f"{run.cfg.out}: none of the {len(run.heldout_ids)} held-out chunks has a span that another "
            "chunk holds; hold out more chunks (`heldout`)"
        )
    ids = np.array([s["query"] for s in spans], dtype=np.int64)
    gold = np.zeros(len(run.store), dtype=np.int64)
    gold[ids] = [s["holder"] for s in spans]
    res = evaluate_gold(run, run.store, gold, ids=ids, batch_size=batch_size)
    records = res["records"]
    for r in records:
        r["holder_in_top_k"] = _held_by_any(run, r["span"], r["top_docs"])
    rows = {name: _row(records, name) for name in ROWS}
    if initial is not None:
        res0 = evaluate_gold(
            initial, initial.store, gold, ids=ids, batch_size=batch_size, rows=("retrieval",)
        )
        step0 = {r["query"]: r for r in res0["records"]}
        for r in records:
            r0 = step0[r["query"]]
            for m in ("fill", "lp", "em", "f1"):
                r[f"{m}_retrieval_step0"] = r0[f"{m}_retrieval"]
            r["holder_in_top_k_step0"] = _held_by_any(run, r["span"], r0["top_docs"])
        rows = {"retrieval_step0": _row(records, "retrieval_step0"), **rows}
    out: dict[str, Any] = {
        "spans": len(records),
        "asked": n,
        "skipped_no_holder": skipped,
        "k": int(run.cfg.k),
        "rows": rows,
        "holder_in_top_k": float(np.mean([r["holder_in_top_k"] for r in records])),
    }
    if initial is not None:
        out["holder_in_top_k_step0"] = float(np.mean([r["holder_in_top_k_step0"] for r in records]))
    out["examples"] = gold_examples(run, records, examples)
    out["records"] = records
    return out


def _held_by_any(run: LoadedRun, span: str, docs: list[int]) -> float:
    """1.0 when the text of one of the chunks `docs` contains `span` (case folded), else 0.0."""
    needle = span.lower().strip()
    return float(any(needle in str(run.store.get(int(d))["text"] or "").lower() for d in docs if d >= 0))


NAMES = {
    "retrieval_step0": "with retrieval, step 0",
    "closed_book": "closed-book",
    "retrieval": "with retrieval",
    "oracle": "oracle (the chunk holding the span)",
}


def format_span_table(table: dict[str, Any], *, width: int = 200) -> str:
    """The table of `span_table` as plain text: one line a way of filling, then the top-k line and the
    examples (chunk texts cut to `width` characters)."""
    n = table["spans"]
    head = f"held-out spans: {n}"
    if n < table["asked"]:
        head += (
            f" (asked for {table['asked']}: the held-out split has only {n} with a span another chunk holds)"
        )
    if table["skipped_no_holder"]:
        head += f"; {table['skipped_no_holder']} skipped: no other chunk holds their span"
    lines = [head, f"{'':<38} {'EM':>6} {'F1':>6} {'span ppl':>9}"]
    for name, row in table["rows"].items():
        lines.append(f"{NAMES[name]:<38} {row['em']:>6.1f} {row['f1']:>6.1f} {row['ppl']:>9.2f}")
    k = table["k"] - 1
    top = f"a chunk holding the span in the retrieved top {k}: {100 * table['holder_in_top_k']:.1f}%"
    if "holder_in_top_k_step0" in table:
        top += f" (step 0: {100 * table['holder_in_top_k_step0']:.1f}%)"
    lines.append(top)
    rows = table["rows"]
    if "retrieval_step0" in rows and rows["retrieval"]["em"] <= rows["retrieval_step0"]["em"]:
        lines.append("the trained run's exact match is not above its own step 0")
    return "\n".join(lines) + format_examples(table["examples"], width=width)
