"""Retrieval for Danish and Norwegian text: BM25 analysis variants, dense MiniLM and hybrid fusion,
on stores chunked the old way (greedy packing) and the new way (an article's last chunk gets at
least 32 tokens), with the English trivia table rerun beside it so nothing regresses.

Corpora: `nordic_corpus.build_jsonl` (Danish "da": manpages-da + debian-edu-doc-da; Norwegian
Bokmål "nb": manpages-nb + debian-edu-doc-nb-no), questions benchmarks/data/retrieval_{da,nb}.jsonl.
Per language two DocStores (bundled MiniLM tokenizer, 128-token chunks): min_chunk_tokens=0
("old") and the default 32 ("new"). On each, k = 1, 5, 20:
  bm25            plain (no stopwords, no stemming)
  bm25_stop       the language's stopwords only (`LANG:stop`)
  bm25_stem       its Snowball stemmer only (`LANG:stem`)
  bm25_lang       stopwords + stemmer (`LANG`)
  dense_minilm    the bundled English MiniLM dual encoder (one embedding per store)
  hybrid_rrf      bm25_lang + dense_minilm, reciprocal rank fusion (k=60, depth 100)
  hybrid_weighted bm25_lang + dense_minilm, min-max normalised scores, weights 0.5 / 0.5
  dense_centred   the same embeddings in a centred index (corpus mean removed, re-normalised)
  hybrid_*_centred  the two hybrids with dense_centred in place of dense_minilm
Recorded: answer recall@1/5/20, nDCG@10 and RR@10 (ir-measures, answer hits pooled over the
retrievers of one store), hub_share@20, top1_share, distinct@20 (`ralm.retrieval.eval.measures`);
store stats (chunks, chunks under 32 text tokens); the text of each retriever's hub chunk in
`hubs` (not a metric).

English: the enwiki sample (as `ralm corpus build --sample enwiki`) built with the new default
chunking and with min_chunk_tokens=0, the bundled trivia pairs answerable in each store:
bm25, bm25_lang (en), dense_minilm, hybrid_rrf (bm25_lang + dense), and the centred three. The earlier numbers
(benchmarks/results/eval_retrieval_all.json, 137 questions, 5,409 chunks): bm25 R@20 0.3212,
dense_minilm R@20 0.4234.

Run: python -m benchmarks.retrieval.retrieval_nordic [--work DIR] [--cache DIR]
(--work keeps corpora, DocStores and embeddings so a rerun reuses them; default a temp dir.)
Writes benchmarks/results/retrieval_nordic.json and retrieval_nordic.md.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

from benchmarks.common import BENCH, RESULTS, log, offline, script_command, write_result

os.environ.setdefault("OMP_NUM_THREADS", "2")
offline()
from benchmarks.data_prep.nordic_corpus import build_jsonl, default_cache  # noqa: E402
from benchmarks.retrieval.retrieval_nordic_tables import SHORT, store_stats, table_lines  # noqa: E402

LANGS = ("da", "nb")
CHUNKINGS = {"old": 0, "new": 32}  # min_chunk_tokens
KS = (1, 5, 20)
REUSED: list[str] = []  # DocStores (and so their embeddings) found in --work from an earlier run
PREV_EN = {"bm25": 0.3212, "dense_minilm": 0.4234}  # eval_retrieval_all.json, enwiki trivia R@20
EN_SLACK = 0.02
HYBRID_SLACK = 0.05


def open_or_build(sources: list[Path], out: Path, cfg) -> object:
    """The DocStore at `out` if it was built with `cfg`'s chunking, else (re)built there."""
    from ralm.corpus.build import build_docstore
    from ralm.corpus.docstore import DocStore

    if (out / "manifest.json").is_file():
        store = DocStore(out)
        m = store.manifest
        if (
            m.get("chunk_size") == cfg.chunk_size
            and int(m.get("min_chunk_tokens", 0)) == cfg.min_chunk_tokens
        ):
            log(f"reusing {out} ({len(store)} chunks)")
            REUSED.append(out.name)
            return store
    t = time.perf_counter()
    store = build_docstore(sources, out, cfg, overwrite=True, progress=False, log=lambda m: None)
    log(f"built {out}: {len(store)} chunks in {time.perf_counter() - t:.1f}s")
    return store


def evaluate(store, pairs, retrievers: dict, lang: str) -> tuple[dict, dict]:
    """{retriever: {metric: value}} and {retriever: hub chunk description} on one store."""
    from ralm.retrieval.eval.compare import compare_retrievers

    reports = compare_retrievers(store, pairs, retrievers, KS, measures=("nDCG@10", "RR@10"), lang=lang)
    rows, hubs = {}, {}
    for name, rep in reports.items():
        h = rep.hubness
        rows[name] = {
            **{f"recall_at_{k}": round(float(rep.recall[k]), 4) for k in KS},
            "ndcg_at_10": round(float(rep.measures["nDCG@10"]), 4),
            "rr_at_10": round(float(rep.measures["RR@10"]), 4),
            "hub_share_at_20": round(float(h["hub_share"]), 4),
            "top1_share": round(float(h["top1_share"]), 4),
            "distinct_at_20": round(float(h["distinct"]), 4),
        }
        chunk = store.get(int(h["hub_id"])) if int(h["hub_id"]) >= 0 else {}
        hubs[name] = {
            "chunk_id": int(h["hub_id"]),
            "in_lists": int(h["hub_count"]),
            "of_questions": len(pairs),
            "tokens": int(store.lengths()[int(h["hub_id"])]) if chunk else 0,
            "title": chunk.get("title", ""),
            "text": chunk.get("text", ""),
        }
    return rows, hubs


def nordic_retrievers(store, lang: str, emb_dir: Path, encoder) -> dict:
    from ralm.retrieval.bm25 import BM25Searcher
    from ralm.retrieval.hybrid import HybridSearcher
    from ralm.retrieval.index.open import dense_retriever_for

    bm25_lang = BM25Searcher.build(store, lang=lang)
    t = time.perf_counter()
    dense = dense_retriever_for(store, encoder, emb_dir, progress=False)
    log(f"  dense index for {store.root.name}: {time.perf_counter() - t:.1f}s")
    return {
        "bm25": BM25Searcher.build(store, stopwords="none", stemmer="none"),
        "bm25_stop": BM25Searcher.build(store, stopwords=lang),
        "bm25_stem": BM25Searcher.build(store, stemmer=lang),
        "bm25_lang": bm25_lang,
        "dense_minilm": dense,
        "hybrid_rrf": HybridSearcher([bm25_lang, dense], len(store), method="rrf"),
        "hybrid_weighted": HybridSearcher(
            [bm25_lang, dense], len(store), method="weighted", weights=[0.5, 0.5]
        ),
        **centred_retrievers(store, bm25_lang, emb_dir, encoder),
    }


def centred_retrievers(store, bm25_lang, emb_dir: Path, encoder) -> dict:
    """The same embeddings in a centred index (mean removed, re-normalised), alone and fused."""
    from ralm.retrieval.hybrid import HybridSearcher
    from ralm.retrieval.index.open import dense_retriever_for

    centred = dense_retriever_for(store, encoder, emb_dir, progress=False, center=True)
    return {
        "dense_centred": centred,
        "hybrid_rrf_centred": HybridSearcher([bm25_lang, centred], len(store), method="rrf"),
        "hybrid_weighted_centred": HybridSearcher(
            [bm25_lang, centred], len(store), method="weighted", weights=[0.5, 0.5]
        ),
    }


def english_retrievers(store, emb_dir: Path, encoder) -> dict:
    from ralm.retrieval.bm25 import BM25Searcher
    from ralm.retrieval.hybrid import HybridSearcher
    from ralm.retrieval.index.open import dense_retriever_for

    bm25_lang = BM25Searcher.build(store, lang="en")
    t = time.perf_counter()
    dense = dense_retriever_for(store, encoder, emb_dir, progress=False)
    log(f"  dense index for {store.root.name}: {time.perf_counter() - t:.1f}s")
    return {
        "bm25": BM25Searcher.build(store, stopwords="none", stemmer="none"),
        "bm25_lang": bm25_lang,
        "dense_minilm": dense,
        "hybrid_rrf": HybridSearcher([bm25_lang, dense], len(store), method="rrf"),
        **centred_retrievers(store, bm25_lang, emb_dir, encoder),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--work", type=Path, default=None, help="corpora, DocStores, embeddings (default: a temp dir)"
    )
    ap.add_argument(
        "--cache", type=Path, default=default_cache(), help="the Debian .deb cache (default: %(default)s)"
    )
    ap.add_argument("--skip-english", action="store_true", help="leave the English trivia table out")
    args = ap.parse_args()

    import torch

    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "2")))
    from ralm.corpus.build import BuildConfig
    from ralm.retrieval.encoders import DualEncoder
    from ralm.retrieval.eval.compare import load_qa
    from ralm.samples import sample_format, sample_path

    work = args.work or Path(tempfile.mkdtemp(prefix="ralm-nordic-"))
    work.mkdir(parents=True, exist_ok=True)
    log(f"work dir {work}")
    t_start = time.perf_counter()
    encoder = DualEncoder.from_pretrained(None)

    tables: dict[str, dict] = {}  # "da_new" -> {"stats": ..., "rows": ...}
    hubs: dict[str, dict] = {}
    timings: dict[str, float] = {}

    for lang in LANGS:
        corpus = work / f"nordic_{lang}.jsonl"
        if not corpus.is_file():
            build_jsonl(lang, corpus, args.cache)
        qa = BENCH / "data" / f"retrieval_{lang}.jsonl"
        for chunking, min_tokens in CHUNKINGS.items():
            key = f"{lang}_{chunking}"
            t = time.perf_counter()
            cfg = BuildConfig(format="jsonl", lang=lang, min_chunk_tokens=min_tokens)
            store = open_or_build([corpus], work / f"store_{key}", cfg)
            pairs = load_qa(str(qa), store)
            retrievers = nordic_retrievers(store, lang, work / f"emb_{key}", encoder)
            rows, hub = evaluate(store, pairs, retrievers, lang)
            tables[key] = {"stats": {"questions": len(pairs), **store_stats(store)}, "rows": rows}
            hubs[key] = hub
            timings[key] = round(time.perf_counter() - t, 1)
            log(f"{key}: done in {timings[key]}s")

    if not args.skip_english:
        for chunking, min_tokens in CHUNKINGS.items():
            key = f"en_{chunking}"
            t = time.perf_counter()
            cfg = BuildConfig(format=sample_format("enwiki"), min_chunk_tokens=min_tokens)
            store = open_or_build([sample_path("enwiki")], work / f"store_{key}", cfg)
            pairs = load_qa("trivia", store)
            retrievers = english_retrievers(store, work / f"emb_{key}", encoder)
            rows, hub = evaluate(store, pairs, retrievers, "en")
            tables[key] = {"stats": {"questions": len(pairs), **store_stats(store)}, "rows": rows}
            hubs[key] = hub
            timings[key] = round(time.perf_counter() - t, 1)
            log(f"{key}: done in {timings[key]}s")
    timings["total"] = round(time.perf_counter() - t_start, 1)

    # -- metrics: {lang}_{chunking}_{stat} and {lang}_{chunking}_{retriever}_{metric}
    metrics: dict[str, float | int] = {}
    for key, tab in tables.items():
        for stat, v in tab["stats"].items():
            metrics[f"{key}_{stat}"] = v
        for name, row in tab["rows"].items():
            for m, v in row.items():
                metrics[f"{key}_{name}_{m}"] = v

    # -- targets (on the new, default chunking) and whether each is met
    targets: dict[str, str] = {}
    met: dict[str, bool] = {}
    for lang in LANGS:
        p = f"{lang}_new"
        name = f"{p}_bm25_lang_recall_at_20"
        targets[name] = f">= {p}_bm25_recall_at_20 (stopwords + stemmer no worse than plain BM25)"
        met[name] = metrics[name] >= metrics[f"{p}_bm25_recall_at_20"]
        name = f"{p}_hybrid_rrf_recall_at_20"
        targets[name] = f">= max({p}_bm25_recall_at_20, {p}_dense_minilm_recall_at_20) - {HYBRID_SLACK}"
        best = max(metrics[f"{p}_bm25_recall_at_20"], metrics[f"{p}_dense_minilm_recall_at_20"])
        met[name] = metrics[name] >= round(best - HYBRID_SLACK, 4)
    for lang in (*LANGS, "en"):
        if f"{lang}_new_dense_centred_hub_share_at_20" not in metrics:
            continue
        name = f"{lang}_new_dense_centred_hub_share_at_20"
        targets[name] = f"< {lang}_new_dense_minilm_hub_share_at_20 (centring reduces hubness)"
        met[name] = metrics[name] < metrics[f"{lang}_new_dense_minilm_hub_share_at_20"]
        name = f"{lang}_new_dense_centred_recall_at_20"
        targets[name] = f">= {lang}_new_dense_minilm_recall_at_20 (centring costs no recall)"
        met[name] = metrics[name] >= metrics[f"{lang}_new_dense_minilm_recall_at_20"]
    for lang in (*LANGS, "en"):
        name = f"{lang}_new_dense_minilm_hub_share_at_20"
        if f"{lang}_old_dense_minilm_hub_share_at_20" not in metrics:
            continue
        targets[name] = f"<= {lang}_old_dense_minilm_hub_share_at_20 (the new chunking has no more hubness)"
        met[name] = metrics[name] <= metrics[f"{lang}_old_dense_minilm_hub_share_at_20"]
    if not args.skip_english:
        for ret, prev in PREV_EN.items():
            name = f"en_new_{ret}_recall_at_20"
            bar = round(prev - EN_SLACK, 4)
            targets[name] = f">= {bar} ({prev} in eval_retrieval_all.json - {EN_SLACK})"
            met[name] = metrics[name] >= bar

    # -- tables
    titles = {"da": "Danish (da)", "nb": "Norwegian Bokmål (nb)", "en": "English enwiki sample, trivia"}
    chunk_titles = {"old": "old chunking (min_chunk_tokens=0)", "new": "new chunking (min_chunk_tokens=32)"}
    text_lines: list[str] = []
    md = [
        "# Retrieval for Danish and Norwegian text",
        "",
        f"`python -m benchmarks.retrieval.retrieval_nordic` ({time.strftime('%Y-%m-%d')}). Answer recall@k; "
        "nDCG@10 / RR@10 over answer hits pooled across the retrievers of one table; hub@20 = share of "
        "questions whose top 20 holds the most retrieved chunk, top1 = the same at rank 1, "
        "distinct@20 = distinct chunks / (questions x 20). bm25_lang = stopwords + Snowball stemmer; "
        "hybrids fuse bm25_lang with dense_minilm.",
        "",
    ]
    for key, tab in tables.items():
        lang, chunking = key.split("_")
        title = f"{titles[lang]}, {chunk_titles[chunking]}"
        text_lines += table_lines(title, tab["stats"], tab["rows"], markdown=False)
        md += table_lines(title, tab["stats"], tab["rows"], markdown=True)
    md += ["### Targets", "", "| metric | value | bar | met |", "| --- | ---: | --- | --- |"]
    md += [f"| `{n}` | {metrics[n]} | {targets[n]} | {'yes' if met[n] else '**no**'} |" for n in targets]
    md += ["", "### Dense hub chunks (dense_minilm)", ""]
    for key, hub in hubs.items():
        h = hub["dense_minilm"]
        snippet = " ".join(h["text"].split())
        md.append(
            f"- **{key}**: chunk {h['chunk_id']} ({h['tokens']} tokens), in {h['in_lists']} of "
            f"{h['of_questions']} top-20 lists: *{h['title']}* — {snippet}"
        )
    md.append("")

    out = write_result(
        "retrieval_nordic",
        script_command(__file__, ""),
        metrics,
        targets,
        targets_met=met,
        hubs=hubs,
        settings={
            "ks": list(KS),
            "chunk_size": 128,
            "chunkings": {c: {"min_chunk_tokens": m} for c, m in CHUNKINGS.items()},
            "short_chunk_tokens": SHORT,
            "hybrid": {
                "rrf_k": 60,
                "depth": 100,
                "weighted_weights_bm25_dense": [0.5, 0.5],
                "bm25": "bm25_lang",
            },
            "encoder": "bundled all-MiniLM-L6-v2 (English)",
            "questions": {lang: f"benchmarks/data/retrieval_{lang}.jsonl" for lang in LANGS}
            | {"en": "bundled trivia pairs answerable in the store"},
            "previous_en": {f"{k}_recall_at_20": v for k, v in PREV_EN.items()},
            "threads": int(os.environ.get("OMP_NUM_THREADS", "2")),
        },
        timings_s=timings,
        reused_from_work_dir=REUSED,  # timings of reused stores leave out building and embedding
    )
    (RESULTS / "retrieval_nordic.md").write_text("\n".join(md), encoding="utf-8")
    print("\n".join(text_lines))
    print("targets:")
    for n, bar in targets.items():
        print(f"  {'MET ' if met[n] else 'FAIL'} {n} = {metrics[n]}  ({bar})")
    print(f"\nwrote {RESULTS / 'retrieval_nordic.json'} and retrieval_nordic.md ({out['date']})")
    print(json.dumps(timings))


if __name__ == "__main__":
    main()
