"""`ralm index build|plan|verify|export-rag`: the index subcommands of the CLI (ralm.retrieval.cli adds them).

Imports of torch, transformers and FAISS happen inside the commands, after the arguments are
checked, as in ralm.retrieval.cli.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from pathlib import Path

from ralm.cli_flags import add_command_group, add_out, add_overwrite, add_quiet
from ralm.errors import RalmError
from ralm.retrieval.eval.cli import add_bm25_args

KINDS = ("flat", "ivf-flat", "hnsw", "sq8", "ivf-pq")
_HELPERS: dict[str, Callable] = {}  # the encoder/BM25 option readers shared with ralm.retrieval.cli


def register(
    sub: argparse._SubParsersAction,
    encoder_args: Callable[[argparse.ArgumentParser], None],
    encoder_config: Callable[[argparse.Namespace], object],
    bm25_opts: Callable[[argparse.Namespace], dict | None],
) -> None:
    """Add `index` and its subcommands; the encoder and BM25 options are those of `ralm search`."""
    _HELPERS.update(encoder_config=encoder_config, bm25_opts=bm25_opts)
    isub = add_command_group(
        sub, "index", "build a dense (FAISS) and optional BM25 index over a DocStore", dest="index_command"
    )
    b = isub.add_parser(
        "build",
        help="embed a DocStore and index it",
        description="Embed every chunk of a DocStore with the document tower (length-sorted batches, bf16 "
        "where supported, resumable) and build a FAISS index; --bm25 adds a BM25 index over the same chunks.",
    )
    b.add_argument("store", type=Path, help="DocStore directory (ralm corpus build)")
    add_out(b, "index directory to create (an unfinished one is resumed when asked for the same encoder)")
    add_overwrite(
        b,
        "replace the index at --out: the new one is built beside it and swapped in when complete, "
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
    add_quiet(b, "no progress bars")
    encoder_args(b)
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
    add_out(r, "folder to write")
    add_overwrite(r, "replace an earlier export at --out")
    r.set_defaults(func=_index_export_rag)


def _index_build(args: argparse.Namespace) -> int:
    from ralm.corpus.docstore import DocStore

    params = {
        k: v for k, v in {"nlist": args.nlist, "nprobe": args.nprobe, "m": args.m}.items() if v is not None
    }
    if "m" in params and args.kind == "hnsw":
        params["M"] = params.pop("m")
    bm25_opts = _HELPERS["bm25_opts"](args)
    store = DocStore(args.store)
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:  # under torchrun: one shard per process or more
        from ralm.train.distributed import init_distributed, job

        with job(init_distributed("auto")) as dist:
            return _run_build(args, store, bm25_opts, params, args.shards or dist.world, dist)
    return _run_build(args, store, bm25_opts, params, args.shards or 1, None)


def _run_build(args: argparse.Namespace, store, bm25_opts, params: dict, shards: int, dist) -> int:
    """`build_index_dir` with the command's options; `dist`: the torchrun job (None: one process)."""
    from ralm.retrieval.index.build import build_index_dir

    out = build_index_dir(
        store,
        args.out,
        encoder=args.encoder,
        encoder_config=_HELPERS["encoder_config"](args),
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
    from ralm.retrieval.index.plan import plan_shards

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
    from ralm.retrieval.index.directory import OVERWRITE_HINT, verify_index_dir

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
