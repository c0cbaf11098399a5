"""`ralm index ...` (ralm.retrieval.index.cli), `ralm search`, `ralm ict`, `ralm eval-retrieval`: thin CLI over ralm.retrieval.

Imports of torch, transformers and FAISS happen inside the commands, after the arguments are
checked: `ralm search --help` and a bad argument answer without loading any of them.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ralm.cli_flags import add_out, add_quiet, add_seed
from ralm.errors import RalmError
from ralm.retrieval.eval.cli import add_bm25_args


def _encoder_args(p: argparse.ArgumentParser, similarity: str = "dot") -> None:
    p.add_argument(
        "--encoder",
        default=None,
        metavar="MODEL_DIR",
        help="local HF encoder, saved ralm encoder, or a decoder-only LM (gemma3, smollm2, a .gguf file, "
        "a causal LM directory; its body, token embeddings frozen) (default: bundled MiniLM)",
    )
    p.add_argument(
        "--pooling",
        choices=["mean", "cls", "last"],
        default=None,
        help="pooling of a fresh encoder (default mean; REALM used cls; last: the last real token, "
        "for decoder-only LMs)",
    )
    p.add_argument(
        "--bidirectional",
        action="store_true",
        help="decoder-only --encoder: bidirectional attention (Gemma-family configs; refused where the "
        "config has no switch)",
    )
    p.add_argument(
        "--query-instruction",
        default=None,
        metavar="TEXT",
        help='prefix for every query text, saved with the encoder (e.g. "query: "); documents get none',
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
        if (
            args.pooling
            or args.proj_dim
            or args.shared
            or args.bidirectional
            or args.query_instruction is not None
        ):
            raise RalmError(
                f"--encoder {args.encoder}: a trained ralm encoder keeps its pooling, projection, towers, "
                "attention and query instruction; drop --pooling/--proj-dim/--shared/--bidirectional/"
                "--query-instruction"
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
        bidirectional=args.bidirectional,
        query_instruction=args.query_instruction or "",
    )


def register(sub: argparse._SubParsersAction) -> None:
    """Add `index` (ralm.retrieval.index.cli), `search`, `ict` and `eval-retrieval` to the top-level parser."""
    from ralm.retrieval.index import cli as index_cli

    index_cli.register(sub, _encoder_args, _encoder_config, _bm25_opts)

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
        "is the query, its chunk (sentence removed 90%% of the time) the document, in-batch negatives. An alias "
        "of `ralm retriever train ict` (the same loop and output: RUN/metrics.jsonl, RUN/results.json, "
        "RUN/encoder) with ICT's learning rate and a held-out fraction.",
    )
    t.add_argument("store", type=Path, help="DocStore directory")
    add_out(t, "run directory")
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
    add_seed(t, "random seed")
    add_quiet(t, "no progress bar")
    _encoder_args(t)
    t.set_defaults(func=_ict)

    from ralm.retrieval.eval import cli as eval_cli
    from ralm.retrieval.training import cli as train_cli

    eval_cli.register(sub)
    train_cli.register(sub, _encoder_args, _encoder_config)


def _bm25_opts(args: argparse.Namespace) -> dict | None:
    """BM25 analysis options from --lang/--stopwords/--stemmer (None when none was given), checked."""
    if args.lang is None and args.stopwords is None and args.stemmer is None:
        return None
    from ralm.retrieval.analysis import Analyzer
    from ralm.retrieval.bm25_spec import bm25_options

    opts = bm25_options(args.lang) if args.lang is not None else {"lang": None}
    for key in ("stopwords", "stemmer"):  # explicit ones override what --lang implies
        opts[key] = getattr(args, key) if getattr(args, key) is not None else opts.get(key)
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
    from ralm.retrieval.retriever import Retriever, snippet

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
    """`ralm ict`: an alias of `ralm retriever train ict` (one loop, the same output), with ICT's
    defaults (lr 1e-4 as BRENT) and --heldout-frac turned into the held-out chunk count."""
    from ralm.corpus.docstore import DocStore
    from ralm.retrieval.training.cli import train_as

    for name in ("steps", "batch_size", "eval_every"):
        if getattr(args, name) < 1:
            raise RalmError(f"--{name.replace('_', '-')} {getattr(args, name)}: must be >= 1")
    if not 0.0 <= args.remove_prob <= 1.0:
        raise RalmError(f"--remove-prob {args.remove_prob}: must be between 0 and 1")
    if not 0.0 < args.heldout_frac < 1.0:
        raise RalmError(f"--heldout-frac {args.heldout_frac}: must be between 0 and 1")
    if not (Path(args.store) / "manifest.json").is_file():
        raise RalmError(f"{args.store}: no DocStore here; build one with `ralm corpus build`")
    heldout = max(1, min(1000, round(args.heldout_frac * len(DocStore(args.store)))))
    argv = [
        "ict",
        str(args.store),
        "--out",
        str(args.out),
        "--steps",
        str(args.steps),
        "--batch-size",
        str(args.batch_size),
        "--lr",
        str(args.lr),
        "--remove-prob",
        str(args.remove_prob),
        "--heldout",
        str(heldout),
        "--eval-every",
        str(args.eval_every),
        "--seed",
        str(args.seed),
        "--similarity",
        args.similarity,
    ]
    flags = {
        "encoder": "--encoder",
        "pooling": "--pooling",
        "max_length": "--max-length",
        "proj_dim": "--proj-dim",
        "query_instruction": "--query-instruction",
    }
    for name, flag in flags.items():
        if getattr(args, name) is not None:
            argv += [flag, str(getattr(args, name))]
    for name in ("quiet", "bidirectional", "scale", "shared"):
        if getattr(args, name):
            argv.append(f"--{name}")
    return train_as(argv, _encoder_args, _encoder_config)
