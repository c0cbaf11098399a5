"""`ralm eval-retrieval`: BM25, dense, hybrid and other retrievers side by side on one question set."""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from ralm.atomic import write_json_atomic
from ralm.cli_flags import add_quiet
from ralm.errors import RalmError
from ralm.retrieval.bm25_spec import bm25_options

FUSIONS = ("rrf", "weighted")
# ralm.retrieval.eval.evaluate.ANSWER_MODES, repeated: this module stays free of numpy
ANSWER_MODES = ("auto", "string", "regex")


def add_bm25_args(p: argparse.ArgumentParser) -> None:
    """--lang/--stopwords/--stemmer: the text analysis of a BM25 index."""
    p.add_argument(
        "--lang",
        default=None,
        metavar="LANG",
        help="BM25 language: its stopword list and Snowball stemmer (da, nb, sv, de, en, ...; none for "
        "neither; default: the DocStore's language)",
    )
    p.add_argument(
        "--stopwords",
        default=None,
        metavar="LANG",
        help="BM25 stopword list, overriding --lang ('none' for none)",
    )
    p.add_argument(
        "--stemmer",
        default=None,
        metavar="LANG",
        help="BM25 Snowball stemmer, overriding --lang ('none' for none)",
    )


def register(sub: argparse._SubParsersAction) -> None:
    """Add `eval-retrieval` to the top-level parser."""
    e = sub.add_parser(
        "eval-retrieval",
        help="recall@k, nDCG, MRR and hubness of BM25, dense and hybrid retrievers on question/answer pairs",
        description="A hit is a top-k chunk containing a normalised answer (SQuAD normalisation, whole tokens), "
        "or, for regular-expression answers (CuratedTREC), a chunk a pattern is found in (as DPR: "
        "case-insensitive search). QA: 'trivia' (the bundled trivia pairs whose answer occurs in the corpus) "
        'or a file of questions: JSONL {"question", "answers"} or DPR TSV question<TAB>["a1", ...]. '
        "Rank metrics (ir-measures) use answer hits pooled over the retrievers "
        "evaluated together. Hubness: how often the most retrieved chunk appears in the top-k lists.",
    )
    e.add_argument("store", type=Path, nargs="?", default=None, help="DocStore directory (or give --index)")
    e.add_argument(
        "--index",
        type=Path,
        default=None,
        help="an index directory (ralm index build): evaluate its dense index (and its BM25) without re-embedding",
    )
    e.add_argument(
        "--qa",
        default="trivia",
        help="'trivia', 'triviaqa' (the TriviaQA sample; build its corpus with --sample triviaqa) "
        "or a question file: JSONL {question, answers} or DPR TSV",
    )
    e.add_argument(
        "--answers",
        choices=ANSWER_MODES,
        default="auto",
        help="match answers as strings or as regular expressions; auto (default): regex for JSONL records "
        'with "answer_type": "regex" and for files whose name or folder name contains "curatedtrec" '
        "(DPR's curatedtrec-test.qa.csv), string otherwise",
    )
    e.add_argument(
        "--lang",
        default=None,
        metavar="LANG",
        help="language of corpus and questions: the default BM25 analysis (stopwords + stemmer) "
        "and answer normalisation (English drops a/an/the); e.g. da, nb, en (default: the DocStore's)",
    )
    e.add_argument(
        "--bm25",
        action="append",
        default=None,
        metavar="SPEC",
        help="a BM25 variant: none (plain), LANG (stopwords + stemmer), LANG:stop or LANG:stem; "
        "repeatable (default: --lang, else the DocStore's language)",
    )
    e.add_argument("--no-bm25", dest="use_bm25", action="store_false", help="leave BM25 out")
    e.add_argument(
        "--dense",
        action="append",
        default=None,
        metavar="ENCODER",
        help="'minilm' or an encoder dir (e.g. RUN/encoder); repeatable (default: minilm, or the --index's)",
    )
    e.add_argument(
        "--center",
        action="store_true",
        help="also evaluate each dense encoder (and the --index's) with centred vectors (corpus mean "
        "removed, re-normalised: fewer hub chunks); hybrids then use the centred one",
    )
    e.add_argument(
        "--hybrid",
        action="append",
        choices=FUSIONS,
        default=None,
        help="add the first BM25 and first dense retriever fused: rrf (reciprocal rank fusion) or "
        "weighted (min-max normalised scores); repeatable",
    )
    e.add_argument("--fusion-depth", type=int, default=100, help="chunks per retriever fused (default 100)")
    e.add_argument("--rrf-k", type=float, default=60.0, help="RRF constant (default 60, as Cormack et al.)")
    e.add_argument(
        "--dense-weight",
        type=float,
        default=0.5,
        help="weight of the dense side in either fusion (RRF: its reciprocal ranks; weighted: its "
        "normalised scores), BM25 gets 1 - w (default 0.5, equal); lower it when BM25 is the stronger side",
    )
    e.add_argument("--ql", action="store_true", help="add query-likelihood retrieval (Dirichlet, mu 200)")
    e.add_argument(
        "--colbert-rerank",
        type=int,
        default=None,
        metavar="DEPTH",
        help="add ColBERT MaxSim (bundled MiniLM token embeddings) re-ranking BM25's top DEPTH",
    )
    e.add_argument("-k", type=int, nargs="+", default=[1, 5, 20], help="cut-offs (default 1 5 20)")
    e.add_argument(
        "--measures",
        nargs="*",
        default=["nDCG@10", "RR@10"],
        help="ir-measures rank metrics (default nDCG@10 RR@10; none to skip)",
    )
    e.add_argument(
        "--work", type=Path, default=None, help="cache directory for embeddings (default: a temporary one)"
    )
    e.add_argument("--json-out", type=Path, default=None, help="also write the results as JSON")
    e.add_argument(
        "--run-dir",
        type=Path,
        default=None,
        help="write TREC run files (one per retriever), qrels (TREC and BEIR TSV) and queries.tsv here",
    )
    add_quiet(e, "no progress bars")
    e.set_defaults(func=_eval)


def _check_args(args: argparse.Namespace) -> None:
    """Refuse bad arguments before anything is loaded."""
    if (args.store is None) == (args.index is None):
        raise RalmError("give a DocStore directory or --index INDEX_DIR (one of them)")
    if min(args.k) < 1:
        raise RalmError(f"-k {args.k}: cut-offs must be >= 1")
    if args.fusion_depth < max(args.k):
        raise RalmError(f"--fusion-depth {args.fusion_depth}: must be >= the largest -k ({max(args.k)})")
    if not 0.0 <= args.dense_weight <= 1.0:
        raise RalmError(f"--dense-weight {args.dense_weight}: must be between 0 and 1")
    if args.rrf_k < 0:
        raise RalmError(f"--rrf-k {args.rrf_k}: must be >= 0")
    if args.hybrid and not args.use_bm25:
        raise RalmError("--hybrid fuses BM25 with a dense retriever; drop --no-bm25")
    args.measures = [m for m in args.measures if m.lower() != "none"]
    if args.measures:
        import ir_measures

        for m in args.measures:
            try:
                ir_measures.parse_measure(m)
            except (ValueError, NameError, SyntaxError, AttributeError):
                raise RalmError(
                    f"--measures {m!r}: not an ir-measures measure; e.g. nDCG@10, RR@10, P@5, AP"
                ) from None
    for spec in args.bm25 or []:
        bm25_options(spec)
    if args.lang is not None or args.bm25:
        from ralm.retrieval.analysis import Analyzer

        for spec in args.bm25 or [args.lang or "none"]:
            Analyzer.resolve(**bm25_options(spec))


def _eval(args: argparse.Namespace) -> int:
    from ralm.corpus.docstore import DocStore
    from ralm.retrieval.bm25 import BM25Searcher, store_analyzer
    from ralm.retrieval.encoders import DualEncoder
    from ralm.retrieval.eval.compare import compare_retrievers, load_qa, report_json
    from ralm.retrieval.hybrid import HybridSearcher, fusion_weights
    from ralm.retrieval.index.directory import read_index_dir
    from ralm.retrieval.index.open import dense_retriever_for, index_dense_centred
    from ralm.retrieval.searchers import open_searcher

    _check_args(args)
    if args.index is not None:
        store, manifest = read_index_dir(args.index, args.store)
    else:
        store, manifest = DocStore(args.store), None
    if max(args.k) > len(store):
        raise RalmError(f"-k {args.k}: cut-offs must be at most the number of chunks ({len(store)})")
    pairs = load_qa(args.qa, store, args.answers)
    if not pairs:
        raise RalmError(f"{args.qa}: no question has an answer in {store.root}; nothing to evaluate")
    log = (lambda m: None) if args.quiet else (lambda m: print(m, file=sys.stderr))
    lang = args.lang or store_analyzer(store).lang
    if args.lang is None and lang is not None:
        log(f"lang: {lang}, the DocStore's (`ralm corpus build --lang`); --lang overrides it")
    retrievers: dict = {}
    sparse = []
    if args.use_bm25:
        index_bm25 = None
        if manifest is not None and manifest.get("bm25"):
            index_bm25 = open_searcher(args.index, "bm25", args.store)[1]
        for spec in args.bm25 or [lang or "none"]:
            opts = bm25_options(spec)
            name = "bm25" if spec in ("none", "plain") else f"bm25:{spec}"
            if index_bm25 is not None and index_bm25.matches(**opts):
                retrievers[name] = index_bm25
                log(f"{name}: the index's BM25 ({index_bm25.describe()})")
            else:
                retrievers[name] = BM25Searcher.build(store, **opts)
            sparse.append(name)
    if args.ql:
        from ralm.retrieval.query_likelihood import QueryLikelihoodSearcher

        retrievers["query_likelihood"] = QueryLikelihoodSearcher.build(store)
    if args.colbert_rerank:
        from ralm.retrieval.late_interaction import LateInteractionSearcher
        from ralm.retrieval.retriever import RerankSearcher

        if args.colbert_rerank < max(args.k) or args.colbert_rerank > len(store):
            raise RalmError(
                f"--colbert-rerank {args.colbert_rerank}: must be between max(-k) and the number of chunks"
            )
        first = retrievers[sparse[0]] if sparse else BM25Searcher.build(store)
        colbert = LateInteractionSearcher.from_pretrained(None, store)
        retrievers[f"colbert_rerank_bm25@{args.colbert_rerank}"] = RerankSearcher(
            first, colbert, args.colbert_rerank
        )
    dense = []
    if args.index is not None:
        retrievers["dense:index"] = open_searcher(args.index, "dense", args.store)[1]
        dense.append("dense:index")
        if args.center:  # the index's embeddings, centred (or the index itself, built --center)
            retrievers["dense:index:centred"] = index_dense_centred(args.index, args.store)
            dense.insert(0, "dense:index:centred")
    work = args.work or Path(tempfile.mkdtemp(prefix="ralm-eval-"))
    for i, spec in enumerate(args.dense or ([] if args.index is not None else ["minilm"])):
        enc = DualEncoder.from_pretrained(None if spec == "minilm" else spec)
        name = f"dense:{spec}"
        retrievers[name] = dense_retriever_for(store, enc, work / f"dense{i}", progress=not args.quiet)
        dense.append(name)
        if args.center:  # the same cached embeddings, a centred index
            centred = dense_retriever_for(store, enc, work / f"dense{i}", progress=False, center=True)
            retrievers[name + ":centred"] = centred
            dense.insert(0, name + ":centred")
    for method in args.hybrid or []:
        if not dense:
            raise RalmError("--hybrid needs a dense retriever (--dense or --index)")
        tag = "" if args.dense_weight == 0.5 else f"@{args.dense_weight:g}"
        retrievers[f"hybrid:{method}{tag}({sparse[0]}+{dense[0]})"] = HybridSearcher(
            [retrievers[sparse[0]], retrievers[dense[0]]],
            len(store),
            method=method,
            weights=fusion_weights(method, args.dense_weight),
            depth=args.fusion_depth,
            rrf_k=args.rrf_k,
        )
    reports = compare_retrievers(
        store, pairs, retrievers, args.k, measures=args.measures, lang=(lang or "en").split("-")[0]
    )
    _print_table(reports, args, pairs, store)
    if args.run_dir:
        _write_runs(args.run_dir, reports, pairs, store)
    if args.json_out:
        payload = report_json(
            reports,
            questions=len(pairs),
            qa=args.qa,
            regex_questions=sum(p.regex for p in pairs),
            store=str(store.root),
            chunks=len(store),
            lang=lang,
        )
        write_json_atomic(args.json_out, payload, ensure_ascii=False)
    return 0


def _print_table(reports, args, pairs, store) -> None:
    from ralm.retrieval.retriever import snippet

    ks = sorted(args.k)
    kmax = ks[-1]
    n_regex = sum(p.regex for p in pairs)
    kinds = f"; {n_regex} with regex answers" if n_regex else ""
    print(f"{len(pairs)} questions ({args.qa}{kinds}) over {len(store)} chunks of {store.root}")
    width = max(12, *(len(n) for n in reports)) + 2
    head = [f"R@{k}" for k in ks] + list(args.measures) + [f"hub@{kmax}", "top1", f"distinct@{kmax}"]
    print(f"{'retriever':<{width}}" + "".join(f"{h:>{max(8, len(h) + 2)}}" for h in head))
    for name, r in reports.items():
        vals = [r.recall[k] for k in ks] + [r.measures[m] for m in args.measures]
        vals += [r.hubness["hub_share"], r.hubness["top1_share"], r.hubness["distinct"]]
        print(
            f"{name:<{width}}"
            + "".join(f"{v:>{max(8, len(h) + 2)}.3f}" for h, v in zip(head, vals, strict=True))
        )
    print(f"most retrieved chunk per retriever (in how many of the {len(pairs)} top-{kmax} lists):")
    for name, r in reports.items():
        hub = int(r.hubness["hub_id"])
        if hub >= 0:
            row = store.get(hub)
            print(f"  {name}: [{hub}] x{r.hubness['hub_count']} {row['title']}: {snippet(row['text'], 70)}")


def _write_runs(run_dir: Path, reports, pairs, store) -> None:
    from ralm.retrieval.eval.measures import pooled_qrels, write_qrels, write_trec_run

    qids = [f"q{i + 1}" for i in range(len(pairs))]
    for name, r in reports.items():
        tag = "".join(c if c.isalnum() or c in "-_.@" else "_" for c in name)
        write_trec_run(run_dir / f"{tag}.trec", r.result.ids, r.result.scores, tag, qids)
    qrels = pooled_qrels(
        {n: r.result.ids for n, r in reports.items()}, {n: r.hits for n, r in reports.items()}
    )
    write_qrels(run_dir / "qrels.trec", qrels, qids)
    write_qrels(run_dir / "qrels.tsv", qrels, qids, beir=True)
    lines = "".join(f"{q}\t{' '.join(p.question.split())}\n" for q, p in zip(qids, pairs, strict=True))
    (run_dir / "queries.tsv").write_text(lines, encoding="utf-8")
    print(f"TREC runs, qrels and queries in {run_dir}", file=sys.stderr)
