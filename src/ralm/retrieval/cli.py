"""`ralm index build|verify`, `ralm search`, `ralm ict`, `ralm eval-retrieval`: thin CLI over ralm.retrieval.

Imports of torch, transformers and FAISS happen inside the commands, after the arguments are
checked: `ralm search --help` and a bad argument answer without loading any of them.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from ralm.errors import RalmError
from ralm.retrieval.eval_cli import add_bm25_args

KINDS = ("flat", "ivf-flat", "hnsw", "sq8", "ivf-pq")


def _encoder_args(p: argparse.ArgumentParser, similarity: str = "dot") -> None:
    p.add_argument(
        "--encoder",
        default=None,
        metavar="MODEL_DIR",
        help="local HF encoder or saved ralm encoder (default: bundled MiniLM)",
    )
    p.add_argument(
        "--pooling",
        choices=["mean", "cls"],
        default=None,
        help="pooling of a fresh encoder (default mean; REALM used cls)",
    )
    p.add_argument(
        "--proj-dim", type=int, default=None, help="linear projection to this size (REALM: 128; default none)"
    )
    p.add_argument("--scale", action="store_true", help="divide scores by sqrt(dim), as BRENT does")
    p.add_argument(
        "--shared",
        action="store_true",
        help="one tower for queries and documents (default: separate, as REALM/BRENT)",
    )
    p.add_argument(
        "--similarity",
        choices=["dot", "cos"],
        default=similarity,
        help=f"score of a fresh encoder: dot (inner product, REALM) or cos (unit vectors, as "
        f"sentence-transformers trains MiniLM); default {similarity}",
    )
    p.add_argument(
        "--max-length", type=int, default=None, help="max tokens of a query or document (default 128)"
    )


def _encoder_config(args: argparse.Namespace):
    """The EncoderConfig to load `--encoder` with: a fresh encoder's from the flags; a saved (trained)
    encoder keeps its own (None), with --max-length / --scale applied when given."""
    from ralm.retrieval.encoders import ENCODER_FILE, EncoderConfig

    saved = None if args.encoder is None else Path(args.encoder).expanduser() / ENCODER_FILE
    if saved is not None and saved.is_file():
        if args.pooling or args.proj_dim or args.shared:
            raise RalmError(
                f"--encoder {args.encoder}: a trained ralm encoder keeps its pooling, projection and towers; "
                "drop --pooling/--proj-dim/--shared"
            )
        if args.max_length is None and not args.scale:
            return None
        try:
            cfg = json.loads(saved.read_text(encoding="utf-8"))["config"]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise RalmError(f"{saved}: unreadable ({exc}); re-save the encoder") from None
        return EncoderConfig.from_dict(
            {
                **cfg,
                "max_length": args.max_length or cfg.get("max_length", 128),
                "scale_by_sqrt_dim": args.scale or cfg.get("scale_by_sqrt_dim", False),
            }
        )
    return EncoderConfig(
        pooling=args.pooling or "mean",
        proj_dim=args.proj_dim,
        scale_by_sqrt_dim=args.scale,
        shared=args.shared,
        max_length=args.max_length or 128,
        normalize=args.similarity == "cos",
    )


def register(sub: argparse._SubParsersAction) -> None:
    """Add `index`, `search`, `ict` and `eval-retrieval` to the top-level parser."""
    index = sub.add_parser("index", help="build a dense (FAISS) and optional BM25 index over a DocStore")
    isub = index.add_subparsers(dest="index_command", metavar="SUBCOMMAND")
    index.set_defaults(func=lambda a: (index.print_help(), 2)[1])
    b = isub.add_parser(
        "build",
        help="embed a DocStore and index it",
        description="Embed every chunk of a DocStore with the document tower (length-sorted batches, bf16 "
        "where supported, resumable) and build a FAISS index; --bm25 adds a BM25 index over the same chunks.",
    )
    b.add_argument("store", type=Path, help="DocStore directory (ralm corpus build)")
    b.add_argument(
        "--out",
        type=Path,
        required=True,
        help="index directory to create (an unfinished one is resumed when asked for the same encoder)",
    )
    b.add_argument(
        "--overwrite",
        action="store_true",
        help="replace the index at --out: the new one is built beside it and swapped in when complete, "
        "so the old one stays usable until then (also starts an unfinished build over)",
    )
    b.add_argument(
        "--kind",
        choices=KINDS,
        default="flat",
        help="flat = exact inner product (default, as BRENT); compressed: sq8, ivf-pq",
    )
    b.add_argument(
        "--center",
        action="store_true",
        help="centre doc and query vectors on the corpus mean and re-normalise (reduces hub chunks; "
        "recommended for the bundled English MiniLM on other languages)",
    )
    b.add_argument(
        "--bm25",
        action="store_true",
        help="also build a BM25 index (implied by --lang/--stopwords/--stemmer)",
    )
    add_bm25_args(b)
    b.add_argument(
        "--shards",
        type=int,
        default=None,
        help="split the dense index into N shards of contiguous chunk ids, built one after the other "
        "(default 1: one index); under torchrun each process builds its share of them (default: one "
        "per process); `ralm search`, `eval-retrieval` and `serve` search them in turn and merge",
    )
    b.add_argument("--batch-size", type=int, default=64, help="chunks per embedding batch (default 64)")
    b.add_argument(
        "--dtype",
        choices=["float16", "float32"],
        default="float16",
        help="embedding file precision (default float16)",
    )
    b.add_argument("--nlist", type=int, default=None, help="IVF lists (default ~4 sqrt(N))")
    b.add_argument("--nprobe", type=int, default=None, help="IVF lists searched per query")
    b.add_argument("--m", type=int, default=None, help="PQ sub-quantisers (ivf-pq) or HNSW links (hnsw)")
    b.add_argument("--quiet", action="store_true", help="no progress bars")
    _encoder_args(b)
    b.set_defaults(func=_index_build)

    pl = isub.add_parser(
        "plan",
        help="memory of an index before building it, whole and per shard",
        description="Estimate the memory of a dense index of N chunks of dimension d (from a DocStore or "
        "--chunks), per kind, and with --shards N what each shard (one per process or host) holds.",
    )
    pl.add_argument("store", type=Path, nargs="?", default=None, help="DocStore directory (or give --chunks)")
    pl.add_argument("--chunks", type=int, default=None, help="number of chunks (instead of a DocStore)")
    pl.add_argument("--dim", type=int, default=384, help="vector dimension (default 384, the bundled MiniLM)")
    pl.add_argument(
        "--kind", choices=KINDS, default=None, help="one kind (default: flat, sq8 and ivf-pq side by side)"
    )
    pl.add_argument("--shards", type=int, default=1, help="number of shards (default 1: one index)")
    pl.set_defaults(func=_index_plan)

    v = isub.add_parser(
        "verify",
        help="check every file of an index against its recorded size and checksum",
        description="Re-hash every file of an index directory (retrieval.json's encoder files and manifests, "
        "embeddings, dense/, bm25/) and compare with the sizes and XXH3-128 digests recorded at build time. "
        "Prints ok, or one line per problem (exit 2).",
    )
    v.add_argument("index", type=Path, metavar="INDEX_DIR", help="index directory (ralm index build)")
    v.set_defaults(func=_index_verify)

    r = isub.add_parser(
        "export-rag",
        help="write an index as passages + FAISS index for transformers' RagRetriever",
        description="Write OUT/passages (a datasets folder: title, text, embeddings, id) and OUT/index.faiss "
        '(the dense index) for RagRetriever with index_name="custom", passages_path=OUT/passages, '
        "index_path=OUT/index.faiss; embed queries with the index's query tower (INDEX/encoder). "
        "Needs the datasets package.",
    )
    r.add_argument("index", type=Path, metavar="INDEX_DIR", help="index directory (ralm index build)")
    r.add_argument("--out", type=Path, required=True, help="folder to write")
    r.add_argument("--overwrite", action="store_true", help="replace an earlier export at --out")
    r.set_defaults(func=_index_export_rag)

    s = sub.add_parser(
        "search",
        help="search an index with a text query",
        description="Print the top-k chunks: rank, score, title, snippet.",
    )
    s.add_argument("index", type=Path, help="index directory (ralm index build)")
    s.add_argument("query", help="query text")
    s.add_argument("-k", type=int, default=5, help="number of results (default 5)")
    s.add_argument(
        "--retriever",
        choices=["dense", "bm25", "hybrid"],
        default="dense",
        help="dense (default), bm25, or hybrid (BM25 and dense fused; see --fusion)",
    )
    s.add_argument(
        "--fusion",
        choices=["rrf", "weighted"],
        default="rrf",
        help="hybrid: reciprocal rank fusion (default) or weighted min-max normalised scores",
    )
    s.add_argument(
        "--dense-weight",
        type=float,
        default=0.5,
        help="hybrid: weight of the dense side (BM25 gets 1 - w; default 0.5, equal)",
    )
    add_bm25_args(s)
    s.add_argument("--store", type=Path, default=None, help="DocStore, if it moved since the index was built")
    s.add_argument("--json", action="store_true", help="print results as JSON lines")
    s.set_defaults(func=_search)

    t = sub.add_parser(
        "ict",
        help="Inverse Cloze Task warm start of a dual encoder",
        description="Train query and document towers with ICT (Lee et al. 2019) on a DocStore: a random sentence "
        "is the query, its chunk (sentence removed 90%% of the time) the document, in-batch negatives. Logs "
        "loss, in-batch accuracy and held-out recall@k to RUN/metrics.jsonl; saves RUN/encoder.",
    )
    t.add_argument("store", type=Path, help="DocStore directory")
    t.add_argument("--out", type=Path, required=True, help="run directory")
    t.add_argument("--steps", type=int, default=1000, help="optimiser steps (default 1000)")
    t.add_argument("--batch-size", type=int, default=32, help="queries per step (default 32; BRENT used 128)")
    t.add_argument("--lr", type=float, default=1e-4, help="peak learning rate (default 1e-4, as BRENT)")
    t.add_argument(
        "--remove-prob",
        type=float,
        default=0.9,
        help="probability of removing the query sentence from its document",
    )
    t.add_argument(
        "--heldout-frac",
        type=float,
        default=0.05,
        help="fraction of chunks held out for recall (default 0.05)",
    )
    t.add_argument("--eval-every", type=int, default=200, help="steps between held-out evaluations")
    t.add_argument("--seed", type=int, default=0, help="random seed")
    t.add_argument("--quiet", action="store_true", help="no progress bar")
    _encoder_args(t)
    t.set_defaults(func=_ict)

    from ralm.retrieval import eval_cli, train_cli

    eval_cli.register(sub)
    train_cli.register(sub, _encoder_args, _encoder_config)


def _index_build(args: argparse.Namespace) -> int:
    from ralm.corpus.docstore import DocStore

    params = {
        k: v for k, v in {"nlist": args.nlist, "nprobe": args.nprobe, "m": args.m}.items() if v is not None
    }
    if "m" in params and args.kind == "hnsw":
        params["M"] = params.pop("m")
    bm25_opts = _bm25_opts(args)
    store = DocStore(args.store)
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:  # under torchrun: one shard per process or more
        from ralm.train.distributed import init_distributed, peer_failure_message

        dist = init_distributed("auto")
        shards = args.shards or dist.world
        try:
            return _run_build(args, store, bm25_opts, params, shards, dist)
        except RuntimeError as exc:
            msg = peer_failure_message(dist, exc)
            if msg is None:
                raise
            raise RalmError(msg) from None
        finally:
            dist.close()
    return _run_build(args, store, bm25_opts, params, args.shards or 1, None)


def _run_build(args: argparse.Namespace, store, bm25_opts, params: dict, shards: int, dist) -> int:
    """`build_index_dir` with the command's options; `dist`: the torchrun job (None: one process)."""
    from ralm.retrieval.search import build_index_dir

    out = build_index_dir(
        store,
        args.out,
        encoder=args.encoder,
        encoder_config=_encoder_config(args),
        kind=args.kind,
        bm25=args.bm25 or bm25_opts is not None,
        bm25_options=bm25_opts,
        center=args.center,
        batch_size=args.batch_size,
        dtype=args.dtype,
        progress=not args.quiet,
        log=lambda m: print(m, file=sys.stderr),
        overwrite=args.overwrite,
        shards=shards,
        dist=dist,
        **params,
    )
    if dist is not None and not dist.is_main:
        return 0
    print(
        f"index {out}: {len(store)} chunks, {args.kind}"
        + (f" in {shards} shards" if shards > 1 else "")
        + (" + bm25" if args.bm25 or bm25_opts else ""),
        file=sys.stderr,
    )
    return 0


def _index_plan(args: argparse.Namespace) -> int:
    from ralm.retrieval.index_plan import plan_shards

    if (args.store is None) == (args.chunks is None):
        raise RalmError("index plan: give a DocStore directory or --chunks N (one of the two)")
    if args.dim < 1:
        raise RalmError(f"--dim {args.dim}: must be >= 1")
    if args.store is not None:
        if not args.store.is_dir():
            raise RalmError(f"{args.store}: no such DocStore directory; pass what `ralm corpus build` wrote")
        from ralm.corpus.docstore import DocStore

        n = len(DocStore(args.store))
    else:
        n = args.chunks
        if n < 1:
            raise RalmError(f"--chunks {n}: must be >= 1")
    for kind in [args.kind] if args.kind else ["flat", "sq8", "ivf-pq"]:
        print(plan_shards(kind, n, args.dim, args.shards)["text"])
    return 0


def _index_verify(args: argparse.Namespace) -> int:
    from ralm.retrieval.index_dir import OVERWRITE_HINT, verify_index_dir

    report = verify_index_dir(args.index)
    if report.problems:
        for line in report.problems:
            print(line)
        n = len(report.problems)
        raise RalmError(f"{args.index}: {n} problem{'s' if n > 1 else ''} (listed above); {OVERWRITE_HINT}")
    print(report.line(args.index))
    return 0


def _index_export_rag(args: argparse.Namespace) -> int:
    from ralm.retrieval.hf_export import export_rag

    out = export_rag(args.index, args.out, overwrite=args.overwrite)
    print(f"wrote {out}: passages_path={out / 'passages'} index_path={out / 'index.faiss'}")
    return 0


def _bm25_opts(args: argparse.Namespace) -> dict | None:
    """BM25 analysis options from --lang/--stopwords/--stemmer (None when none was given), checked."""
    if args.lang is None and args.stopwords is None and args.stemmer is None:
        return None
    from ralm.retrieval.analysis import Analyzer

    opts = {"lang": args.lang, "stopwords": args.stopwords, "stemmer": args.stemmer}
    Analyzer.resolve(**opts)
    return opts


def _search(args: argparse.Namespace) -> int:
    # Everything that can be checked without a model first: no torch import for a typo.
    if not args.query.strip():
        raise RalmError("empty query; pass some text to search for")
    if args.k < 1:
        raise RalmError(f"-k {args.k}: must be >= 1")
    if not 0.0 <= args.dense_weight <= 1.0:
        raise RalmError(f"--dense-weight {args.dense_weight}: must be between 0 and 1")
    if not args.index.is_dir():
        raise RalmError(f"{args.index}: no such index directory; build one with `ralm index build`")
    if args.store is not None and not args.store.is_dir():
        raise RalmError(
            f"--store {args.store}: no such DocStore directory; pass the directory that `ralm corpus build` wrote"
        )
    bm25_options = _bm25_opts(args)
    from ralm.retrieval.retriever import Retriever
    from ralm.retrieval.search import snippet

    retriever = Retriever.load(
        args.index,
        args.retriever,
        store=args.store,
        bm25_options=bm25_options,
        fusion=args.fusion,
        dense_weight=args.dense_weight,
        log=lambda m: print(m, file=sys.stderr),
    )
    if args.k > len(retriever.store):
        raise RalmError(f"-k {args.k}: must be between 1 and the number of chunks ({len(retriever.store)})")
    for hit in retriever.search(args.query, args.k):
        if args.json:
            row = {"rank": hit.rank, "id": hit.id, "score": hit.score, "title": hit.title, "text": hit.text}
            print(json.dumps(row, ensure_ascii=False))
        else:
            print(f"{hit.rank:>3}  {hit.score:8.3f}  [{hit.id}] {hit.title}: {snippet(hit.text)}")
    return 0


def _ict(args: argparse.Namespace) -> int:
    from ralm.corpus.docstore import DocStore
    from ralm.retrieval.encoders import DualEncoder
    from ralm.retrieval.ict import ICTConfig, train_ict

    for name in ("steps", "batch_size", "eval_every"):
        if getattr(args, name) < 1:
            raise RalmError(f"--{name.replace('_', '-')} {getattr(args, name)}: must be >= 1")
    if not 0.0 <= args.remove_prob <= 1.0:
        raise RalmError(f"--remove-prob {args.remove_prob}: must be between 0 and 1")
    store = DocStore(args.store)
    enc = DualEncoder.from_pretrained(args.encoder, _encoder_config(args))
    cfg = ICTConfig(
        steps=args.steps,
        batch_size=args.batch_size,
        lr=args.lr,
        remove_prob=args.remove_prob,
        heldout_frac=args.heldout_frac,
        eval_every=args.eval_every,
        seed=args.seed,
    )
    last = train_ict(enc, store, args.out, cfg, progress=not args.quiet)
    print(json.dumps({"run": str(args.out), **last}))
    return 0
