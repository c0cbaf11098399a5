"""WikiText-2 test perplexity of frozen SmolLM2-135M: no retrieval, In-Context RALM, REPLUG.

Question: what does retrieval into the context of a frozen LM buy on WikiText-2, and what does it
cost? One table over the same tokens (ralm.frozen.evaluate):

* no retrieval: sliding window, max length L, stride 16; and the same with max length L - D (the
  text context the retrieval rows keep: what losing D context tokens costs, without a document);
* In-Context RALM, BM25 (English stopwords + Snowball stemmer), query = the last 32 tokens, top-1
  chunk (<= D tokens) in front, at strides 4, 16 and 64 (--no-s4 skips 4: it costs 4x stride 16);
* In-Context RALM at stride 16 with LM reranking of the top 4 by the last 16 tokens' likelihood;
* REPLUG, the top 4 chunks, softmax(BM25 score / T) weights, at stride 64;
* kNN-LM (Khandelwal et al. 2020): a data store of SmolLM2's context vectors over the WikiText-2
  valid part of that corpus (`ralm lm-datastore`; windows of 512 advancing by 384; built under
  --work and reused; the enwiki sample part is left out for CPU time), k = 1024;
  lambda = 0.25 and T = 1 (the paper's WikiText-103 setting), and lambda/T tuned on the next 2,048
  test tokens (disjoint from the evaluated ones).

Same-subject rows (the corpus knows the text's subject, not the text): the corpus above plus the
rest of the test set after the evaluated prefix, the partly evaluated article's remainder as an
article of its own ("Title (rest)"), so retrieval can find the same subject without the evaluated
sentences; the 13-gram exclusion still applies. In-Context RALM at strides 16 and 64 over it
(`subject_*` rows).

--keep-rows reuses the perplexities of rows already in benchmarks/results/frozen_lm.json when the
set-up is the same (they are deterministic: a repeat gives the same NLL), so adding a row does not
re-run the others; with the last run's timing in it, the speed ratio is kept too
(`timing_measured_in` says which run measured it).

Data: the first --tokens SmolLM2 tokens of WikiText-2 raw test (../shared/data/wikitext2/raw,
cut at a word boundary), read by path, never copied. Corpus, built under --work: WikiText-2 raw
valid split into its 60 articles (" = Title = " headings) + the gensim English Wikipedia sample
(`ralm corpus build --sample enwiki`), chunked with MiniLM's tokenizer (128 tokens). Overlap with
test: test titles present in the corpus, and corpus articles sharing a 13-word n-gram with the
whole test set and with the evaluated prefix (the latter are excluded from retrieval: the
--exclude auto rule of `ralm lm-eval`).

Speed target (issue): In-Context RALM at stride 16 <= 1.5 x the no-retrieval time per token x
tokens + the retrieval time of the same queries measured alone; both at stride 16, same run. The
machine is shared (other jobs come and go), so both evaluations and the search run twice,
interleaved, and the faster time of each is used.

    .venv/bin/python -m benchmarks.lm.frozen_lm [--tokens 4096] [--work DIR]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path

from benchmarks.common import ROOT, offline, script_command, write_result

offline()
from benchmarks.lm.frozen_lm_corpus import (  # noqa: E402
    DATA,
    HEADING,
    build_corpus,
    build_subject_corpus,
    wikitext_articles,
    wikitext_articles_from_lines,
)


def row_dict(r) -> dict:
    """The numbers of one evaluation row."""
    return {
        "token_ppl": round(r.token_ppl, 3),
        "word_ppl": round(r.word_ppl, 3),
        "seconds": round(r.seconds["total"], 1),
        "retrieval_seconds": round(r.seconds["retrieval"], 2),
        "tokens_per_s": round(r.tokens_per_s, 1),
        "blocks_with_docs": r.blocks_with_docs,
        "blocks": r.blocks,
    }


KNN_LAMBDAS = (0.0, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.4, 0.5)
KNN_TEMPERATURES = (1.0, 3.0, 10.0, 30.0, 100.0, 300.0)
KNN_STRIDE = 384  # data store windows of --max-length advancing by this (every token stored once)


def knn_rows(args, lm, text, test_full: str, row, log) -> dict:
    """kNN-LM rows: the data store over the WikiText-2 valid articles (built once under --work),
    lambda/T tuned on the next 2,048 test tokens, then the evaluated tokens at the paper's setting
    and at the tuned one."""
    from ralm.corpus.build import BuildConfig, build_docstore
    from ralm.corpus.docstore import DocStore
    from ralm.frozen.datastore import Datastore, build_datastore
    from ralm.frozen.evaluate import EvalConfig, evaluate
    from ralm.frozen.exclusion import overlapping_articles
    from ralm.frozen.text import tokenize_eval_text

    work = Path(args.work)
    vdir = work / "store-valid"
    if not (vdir / "manifest.json").is_file():
        cfg = BuildConfig(auto_annotate=False, dates=False)
        build_docstore([work / "wikitext2-valid.jsonl"], vdir, cfg, progress=False, log=log)
    vstore = DocStore(vdir)
    ds_dir = work / f"datastore-valid-s{KNN_STRIDE}"
    if not (ds_dir / "datastore.json").is_file():
        build_datastore(lm, vstore, ds_dir, max_length=args.max_length, stride=KNN_STRIDE, log=log)
    ds = Datastore(ds_dir)
    t_build = ds.meta["seconds"]
    excluded = overlapping_articles(vstore, text.text)
    # tuning tokens: the test text right after the evaluated prefix (no token in common)
    tune = tokenize_eval_text(test_full[len(text.text) :].lstrip(), lm.tokenizer, 2048)
    base = dict(max_length=args.max_length, stride=16, knn_k=1024)
    t0 = time.perf_counter()
    tuned = evaluate(
        lm,
        tune,
        EvalConfig(mode="knnlm", knn_lambda=0.25, **base),
        datastore=ds,
        exclude_articles=overlapping_articles(vstore, tune.text),
    )
    grid = {}
    for t in KNN_TEMPERATURES:
        sc = tuned.knn.at_temperature(t)
        for lam in KNN_LAMBDAS:
            grid[(lam, t)] = -float(sc.logp(lam).sum()) / len(sc.lm_logp)
    (lam, temp), best = min(grid.items(), key=lambda kv: kv[1])
    t_tune = time.perf_counter() - t0
    log(
        f"kNN-LM tuned on {len(tune) - 1} later test tokens: lambda {lam}, T {temp} (ppl {math.exp(best):.3f})"
    )
    row(
        "knnlm_k1024_s16_paper",
        EvalConfig(mode="knnlm", knn_lambda=0.25, knn_temperature=1.0, **base),
        datastore=ds,
        exclude_articles=excluded,
    )
    row(
        f"knnlm_k1024_s16_tuned_l{lam}_t{temp:g}",
        EvalConfig(mode="knnlm", knn_lambda=lam, knn_temperature=temp, **base),
        datastore=ds,
        exclude_articles=excluded,
    )
    return {
        "knnlm_datastore_corpus": "the 60 WikiText-2 valid articles (the enwiki sample part of the "
        "retrieval corpus is left out: ~1 h more of forward passes on this machine)",
        "knnlm_datastore_excluded_articles": len(excluded),
        "knnlm_datastore_entries": len(ds),
        "knnlm_datastore_seconds": t_build,
        "knnlm_datastore_tokens_per_s": round(len(ds) / t_build, 1) if t_build else None,
        "knnlm_datastore_window": [ds.meta["max_length"], ds.meta["stride"]],
        "knnlm_tuning_tokens": len(tune) - 1,
        "knnlm_tuning_seconds": round(t_tune, 1),
        "knnlm_tuned_lambda": lam,
        "knnlm_tuned_temperature": temp,
        "knnlm_tuning_ppl_lm_alone": round(math.exp(grid[(0.0, 1.0)]), 3),
        "knnlm_tuning_ppl_best": round(math.exp(best), 3),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--tokens", type=int, default=4096, help="evaluate the first N test tokens (default 4096)"
    )
    ap.add_argument("--max-length", type=int, default=512, help="LM input tokens (default 512)")
    ap.add_argument("--doc-tokens", type=int, default=128, help="tokens of a prepended chunk (default 128)")
    ap.add_argument("--temperature", type=float, default=1.0, help="REPLUG score temperature (default 1)")
    ap.add_argument("--no-s4", action="store_true", help="skip In-Context RALM at stride 4 (4x stride 16)")
    ap.add_argument("--autocast", default="auto", help="auto (bf16 where native; default) or off")
    ap.add_argument("--work", default="/tmp/ralm-bench-frozen", help="corpus build directory")
    ap.add_argument("--keep-rows", action="store_true", help="reuse rows of the last result (same set-up)")
    ap.add_argument("--no-knnlm", action="store_true", help="skip kNN-LM (its data store is ~25 min here)")
    args = ap.parse_args()

    import torch

    from ralm.corpus.docstore import DocStore
    from ralm.frozen.evaluate import EvalConfig, Retrieval, evaluate
    from ralm.frozen.exclusion import article_chunk_ids, article_titles, overlapping_articles
    from ralm.frozen.lm import load_frozen_lm
    from ralm.frozen.retrieve import DocTokens, open_retriever, query_text, search_blocks
    from ralm.frozen.text import tokenize_eval_text
    from ralm.frozen.windows import query_range, window_blocks
    from ralm.samples import sample_path

    def log(m: str) -> None:
        print(m, file=sys.stderr, flush=True)

    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "2")))
    t_begin = t0 = time.perf_counter()
    store_dir = build_corpus(Path(args.work), log)
    t_corpus = time.perf_counter() - t0
    store = DocStore(store_dir)
    n_articles = store.manifest["counts"].get("articles")
    log(f"corpus: {len(store)} chunks, {n_articles} articles ({t_corpus:.0f} s)")

    t0 = time.perf_counter()
    lm = load_frozen_lm("smollm2", device="cpu", autocast=args.autocast)
    t_lm = time.perf_counter() - t0
    test_full = (DATA / "test.txt").read_text(encoding="utf-8")
    text = tokenize_eval_text(test_full, lm.tokenizer, args.tokens)
    test_titles = [t for t, _ in wikitext_articles(DATA / "test.txt")]
    in_prefix = [m.group(1).strip() for m in map(HEADING.match, text.text.splitlines()) if m]
    log(f"evaluating {len(text) - 1} tokens, {text.n_words} words: articles {in_prefix}")

    t0 = time.perf_counter()
    _, bm25, desc = open_retriever(corpus=store_dir, kind="bm25", lang="en")
    t_bm25 = time.perf_counter() - t0
    corpus_titles = set(store.articles(["title"]).column("title").to_pylist())
    t0 = time.perf_counter()
    overlap_all = article_titles(store, overlapping_articles(store, test_full))
    excluded = overlapping_articles(store, text.text)
    t_overlap = time.perf_counter() - t0
    retrieval = Retrieval(
        bm25, DocTokens(store, lm.encode, args.doc_tokens), article_chunk_ids(store, excluded)
    )
    log(
        f"excluded from retrieval: {article_titles(store, excluded)}; overlapping the whole test: {overlap_all}"
    )

    common = dict(max_length=args.max_length, doc_tokens=args.doc_tokens, query_tokens=32)
    if args.doc_tokens >= args.max_length - 16:
        raise SystemExit("--doc-tokens must leave room for a block of 16 tokens")
    rows: dict[str, object] = {}
    setup = {
        "tokens_evaluated": len(text) - 1,
        "max_length": args.max_length,
        "doc_tokens": args.doc_tokens,
        "dtype": lm.dtype_name,
        "corpus_chunks": len(store),
        "retriever": desc,
        "replug_temperature": args.temperature,
    }
    kept: dict[str, dict] = {}
    prev_metrics: dict = {}
    last = ROOT / "benchmarks" / "results" / "frozen_lm.json"
    if args.keep_rows and last.is_file():
        prev = json.loads(last.read_text(encoding="utf-8"))
        if all(prev["metrics"].get(k) == v for k, v in setup.items()):
            kept = {
                n: {**r, "kept_from": r.get("kept_from", prev["date"])}
                for n, r in prev["metrics"]["rows"].items()
            }
            prev_metrics = prev["metrics"]
            log(f"--keep-rows: reusing {sorted(kept)} from {last}")
        else:
            log(f"--keep-rows: {last} has another set-up; every row runs")

    def row(name: str, cfg: EvalConfig, **kw):
        if name in kept:
            rows[name] = kept[name]
            return None
        res = evaluate(lm, text, cfg, retrieval if cfg.mode in ("in-context", "replug") else None, **kw)
        rows[name] = res
        log(
            f"{name:<14} token ppl {res.token_ppl:8.3f}  word ppl {res.word_ppl:8.3f}  "
            f"{res.seconds['total']:7.1f} s  {res.tokens_per_s:6.1f} tok/s  docs {res.blocks_with_docs}/{res.blocks}"
        )
        return res

    timing = ("none_s16_seconds_best_of_2", "incontext_s16_seconds_best_of_2", "retrieval_s16_alone_s")
    if all(k in prev_metrics for k in timing) and {"none_s16", "incontext_s16"} <= kept.keys():
        # --keep-rows with the timing of the last run: its two stride-16 rows and their times
        rows["none_s16"], rows["incontext_s16"] = kept["none_s16"], kept["incontext_s16"]
        t_none, t_ic, t_search_alone = (float(prev_metrics[k]) for k in timing)
        timing_from = kept["none_s16"]["kept_from"]
    else:
        timing_from = "this run"
        none16 = row("none_s16", EvalConfig(mode="none", stride=16, **common))
        # the retrieval of stride 16 alone: the same queries, one batched search (BM25 is in memory)
        blocks = window_blocks(len(text), none16.config.max_length, 16, split_first=True)
        queries = [query_text(text.span(*query_range(b, 32))) if b.start > 0 else None for b in blocks]
        t_search = [search_blocks(bm25, queries, 1, retrieval.exclude_ids)[1]]
        ic16 = row("incontext_s16", EvalConfig(mode="in-context", stride=16, **common))
        # timing repeats, interleaved (a shared machine): the faster of two runs each
        again_none = evaluate(lm, text, none16.config)
        t_search.append(search_blocks(bm25, queries, 1, retrieval.exclude_ids)[1])
        again_ic = evaluate(lm, text, ic16.config, retrieval)
        assert again_none.nll == none16.nll and again_ic.nll == ic16.nll  # deterministic
        t_none = min(none16.seconds["total"], again_none.seconds["total"])
        t_ic = min(ic16.seconds["total"], again_ic.seconds["total"])
        t_search_alone = min(t_search)
    row("incontext_s64", EvalConfig(mode="in-context", stride=64, **common))
    if not args.no_s4:
        row("incontext_s4", EvalConfig(mode="in-context", stride=4, **common))
    row("replug_k4_s64", EvalConfig(mode="replug", stride=64, k=4, temperature=args.temperature, **common))
    ctx = args.max_length - args.doc_tokens
    row(f"none_s16_ctx{ctx}", EvalConfig(mode="none", stride=16, max_length=ctx))

    # same subject: the rest of the test set in the corpus (see the docstring)
    rest = test_full[len(text.text) :]
    last_title = f"{in_prefix[-1]} (rest)" if in_prefix else "(rest)"
    subj_dir = build_subject_corpus(
        Path(args.work),
        [Path(args.work) / "wikitext2-valid.jsonl", sample_path("enwiki")],
        rest,
        last_title,
        log,
    )
    subj_store = DocStore(subj_dir)
    _, subj_bm25, _ = open_retriever(corpus=subj_dir, kind="bm25", lang="en")
    subj_excluded = overlapping_articles(subj_store, text.text)
    subj_retrieval = Retrieval(
        subj_bm25,
        DocTokens(subj_store, lm.encode, args.doc_tokens),
        article_chunk_ids(subj_store, subj_excluded),
    )
    log(
        f"same-subject corpus: {len(subj_store)} chunks; excluded {article_titles(subj_store, subj_excluded)}"
    )

    def subject_row(name: str, cfg: EvalConfig):
        if name in kept:
            rows[name] = kept[name]
            return
        res = evaluate(lm, text, cfg, subj_retrieval)
        rows[name] = res
        log(
            f"{name:<22} token ppl {res.token_ppl:8.3f}  word ppl {res.word_ppl:8.3f}  {res.seconds['total']:7.1f} s"
        )

    subject_row("subject_incontext_s16", EvalConfig(mode="in-context", stride=16, **common))
    subject_row("subject_incontext_s64", EvalConfig(mode="in-context", stride=64, **common))
    subject_info = {
        "subject_corpus_chunks": len(subj_store),
        "subject_corpus_added_articles": [
            t for t, _ in wikitext_articles_from_lines(rest.splitlines(), last_title)
        ],
        "subject_partly_evaluated_article": last_title,
        "subject_excluded_articles": article_titles(subj_store, subj_excluded),
    }

    knn_info: dict[str, object] = {"knnlm": "skipped (--no-knnlm)"}
    if not args.no_knnlm:
        knn_info = knn_rows(args, lm, text, test_full, row, log)

    row(
        "incontext_s16_rerank4",
        EvalConfig(mode="in-context", stride=16, rerank=4, rerank_tokens=16, **common),
    )

    budget = 1.5 * t_none + t_search_alone
    ratio = t_ic / budget
    metrics: dict[str, object] = {
        "tokens_evaluated": len(text) - 1,
        "words_evaluated": text.n_words,
        "test_articles_evaluated": in_prefix,
        "max_length": args.max_length,
        "doc_tokens": args.doc_tokens,
        "query_tokens": 32,
        "replug_temperature": args.temperature,
        "dtype": lm.dtype_name,
        "retriever": desc,
        "corpus_chunks": len(store),
        "corpus_articles": n_articles,
        "test_titles_in_corpus": sorted(set(test_titles) & corpus_titles),
        "corpus_articles_sharing_13gram_with_whole_test": overlap_all,
        "excluded_articles": article_titles(store, excluded),
        "seconds_corpus_build": round(t_corpus, 1),
        "seconds_lm_load": round(t_lm, 1),
        "seconds_bm25_build": round(t_bm25, 1),
        "seconds_overlap_scan": round(t_overlap, 1),
        "none_s16_seconds_best_of_2": round(t_none, 1),
        "incontext_s16_seconds_best_of_2": round(t_ic, 1),
        "retrieval_s16_alone_s": round(t_search_alone, 3),
        "incontext_s16_budget_s": round(budget, 1),
        "incontext_s16_time_vs_budget_ratio": round(ratio, 3),
        "timing_measured_in": timing_from,
        "incontext_s4": "skipped (--no-s4)" if args.no_s4 else "measured",
        "seconds_total": round(time.perf_counter() - t_begin, 1),
        **knn_info,
        **subject_info,
        "rows": {name: r if isinstance(r, dict) else row_dict(r) for name, r in rows.items()},
    }
    targets = {"incontext_s16_time_vs_budget_ratio": "<= 1.0 (1.5x no-retrieval time + retrieval alone)"}
    cmd = script_command(__file__, python="OMP_NUM_THREADS=2 .venv/bin/python")
    write_result("frozen_lm", cmd, metrics, targets)
    print(json.dumps(metrics["rows"], indent=2))
    print(f"incontext_s16_time_vs_budget_ratio = {ratio:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
