"""`ralm retriever train {dpr,contrastive,ict}`: thin CLI over `ralm.retrieval.training.recipes`.

ralm retriever train dpr norquad/train.json --corpus pool/ --dev norquad/dev.json --lang nb --out runs/dpr
ralm retriever train dpr nq-train.json --out runs/dpr              # DPR JSON: its own passages
ralm retriever train dpr beir/scifact --out runs/dpr               # BEIR folder (qrels/train.tsv)
ralm retriever train contrastive corpora/dawiki --out runs/cc     # Contriever crops, no labels
ralm retriever train ict corpora/dawiki --out runs/ict            # = contrastive --recipe ict
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ralm.cli_flags import add_command_group, add_device, add_out, add_overwrite, add_quiet, add_seed
from ralm.errors import RalmError
from ralm.retrieval.bm25_spec import bm25_options


def register(sub: argparse._SubParsersAction, encoder_args, encoder_config) -> None:
    """Add `retriever train` to the top-level parser; `encoder_args(p)` adds --encoder and friends,
    `encoder_config(args)` reads them."""
    rsub = add_command_group(
        sub, "retriever", "train a dense retriever (DPR pairs, contrastive, ICT)", dest="retriever_command"
    )
    t = rsub.add_parser(
        "train",
        help="train a dual encoder for your language and corpus",
        description="Train the query and document towers of a dual encoder. dpr: from labelled pairs (SQuAD "
        "JSON or open-QA questions over --corpus, DPR JSON, a BEIR folder) with in-batch and BM25 hard "
        "negatives; contrastive: from raw text (a DocStore) with Contriever's independent crops, ICT or both; "
        "ict: contrastive --recipe ict. Saves OUT/encoder (the best dev checkpoint), metrics.jsonl and "
        "results.json; rerun the same command to resume after an interruption.",
    )
    add_train_args(t, encoder_args, encoder_config)


def add_train_args(t: argparse.ArgumentParser, encoder_args, encoder_config) -> None:
    """The arguments of `retriever train` on parser `t` (also the standalone parser of `ralm ict`)."""
    t.add_argument("mode", choices=["dpr", "contrastive", "ict"], help="training recipe")
    t.add_argument(
        "data",
        type=Path,
        help="dpr: pairs (SQuAD JSON, DPR JSON, BEIR folder, open-QA JSONL/TSV); contrastive/ict: a DocStore",
    )
    add_out(t, "run directory (resumed when it holds the same run)")
    t.add_argument("--corpus", type=Path, default=None, help="DocStore the pairs' passages are chunks of")
    t.add_argument(
        "--format", choices=["squad", "dpr", "beir", "openqa"], default=None, help="force the pairs' format"
    )
    t.add_argument(
        "--dev",
        default=None,
        help="dev questions (same formats; over --corpus, or the contrastive DocStore) evaluated each epoch",
    )
    t.add_argument(
        "--dev-max", type=int, default=0, help="evaluate on at most this many dev questions (0 = all)"
    )
    t.add_argument(
        "--lang", default=None, help="language: answer normalisation and BM25 analysis (nb, da, en...)"
    )
    t.add_argument(
        "--bm25",
        default=None,
        metavar="SPEC",
        help="BM25 that mines hard negatives: none, LANG, LANG:stop, LANG:stem (default: --lang)",
    )
    t.add_argument("--epochs", type=float, default=3.0, help="dpr: passes over the pairs (default 3)")
    t.add_argument(
        "--steps", type=int, default=0, help="optimiser steps (overrides --epochs; contrastive: 1000)"
    )
    t.add_argument("--batch-size", type=int, default=32, help="questions per step (default 32)")
    t.add_argument(
        "--grad-cache",
        type=int,
        default=0,
        metavar="ROWS",
        help="gradient caching with mini-batches of ROWS (memory of ROWS, any --batch-size; default off)",
    )
    t.add_argument("--lr", type=float, default=2e-5, help="peak learning rate (default 2e-5, DPR)")
    t.add_argument(
        "--temperature",
        type=float,
        default=None,
        help="softmax temperature (default 0.05 for --similarity cos, 1 for dot); saved as 1/T score scale",
    )
    t.add_argument(
        "--hard-negatives", type=int, default=1, help="BM25 negatives per question (default 1, DPR)"
    )
    t.add_argument(
        "--negative-depth", type=int, default=10, help="draw them from this many top negatives (default 10)"
    )
    t.add_argument("--recipe", choices=["crop", "ict", "both"], default="crop", help="contrastive views")
    t.add_argument(
        "--remove-prob",
        type=float,
        default=0.9,
        help="ict: probability of removing the query sentence from its document (default 0.9, Lee et al.)",
    )
    t.add_argument(
        "--heldout",
        type=int,
        default=500,
        help="contrastive/ict without --dev: chunks held out for held-out recall (default 500, at most 1/5)",
    )
    t.add_argument(
        "--eval-every", type=int, default=0, help="steps between dev evaluations (default: each epoch)"
    )
    t.add_argument(
        "--select",
        default="recall@5",
        help="dev metric that picks the saved encoder (recall@K, nDCG@10, RR@10) or 'last' (default recall@5)",
    )
    t.add_argument("--save-every", type=int, default=200, help="steps between resumable checkpoints")
    add_seed(t, "random seed")
    add_device(t, "cpu, cuda or auto", default="auto")
    add_overwrite(t, "start over in an existing --out")
    add_quiet(t, "no progress bar")
    encoder_args(t, similarity="cos")
    t.set_defaults(func=_train, encoder_config=encoder_config)


def train_as(argv: list[str], encoder_args, encoder_config) -> int:
    """Run `ralm retriever train ARGV` (the same parser and code): what `ralm ict` calls."""
    p = argparse.ArgumentParser(prog="ralm retriever train")
    add_train_args(p, encoder_args, encoder_config)
    args = p.parse_args(argv)
    return args.func(args)


def _train(args: argparse.Namespace) -> int:
    from ralm.retrieval.training.recipes import RetrieverTrainConfig, config_from

    mode = "contrastive" if args.mode == "ict" else args.mode
    recipe = "ict" if args.mode == "ict" else args.recipe
    lang = args.lang or "en"
    cfg = config_from(
        {
            **vars(args),
            "mode": mode,
            "recipe": recipe,
            "lang": lang,
            "steps": args.steps or (0 if mode == "dpr" else 1000),
        }
    )
    assert isinstance(cfg, RetrieverTrainConfig)
    if mode == "dpr" and args.format != "beir" and not args.data.exists():
        raise RalmError(f"{args.data}: no such file or folder; pass training pairs")
    if args.corpus is not None and not args.corpus.is_dir():
        raise RalmError(
            f"--corpus {args.corpus}: no such DocStore directory; build one with `ralm corpus build`"
        )
    spec = args.bm25 or lang
    bm25_opts = bm25_options(spec) if spec != "en" or args.bm25 else {}
    log = (lambda m: None) if args.quiet else (lambda m: print(m, file=sys.stderr))
    import torch

    from ralm.corpus.docstore import DocStore
    from ralm.retrieval.encoders import DualEncoder
    from ralm.retrieval.training.data import read_beir_dev, read_pairs

    torch.manual_seed(cfg.seed)  # weights a fresh encoder initialises (a pooler, a projection) repeat too
    enc = DualEncoder.from_pretrained(args.encoder, args.encoder_config(args))
    data = {
        "mode": mode,
        "train": str(args.data.resolve()),
        "corpus": _resolved(args.corpus),
        "dev": _resolved(args.dev),
    }
    negatives = None
    if mode == "dpr":
        store = DocStore(args.corpus) if args.corpus is not None else None
        bm25 = None
        if store is not None:
            bm25 = _bm25_for(store, bm25_opts)
        pairs = read_pairs(args.data, store, args.format, lang=lang, bm25_options=bm25_opts, bm25=bm25)
        for note in pairs.notes:
            log(f"note: {note}")
        log(f"{len(pairs.examples)} training questions ({pairs.format}) over {pairs.passages.describe()}")
        from ralm.retrieval.training.negatives import mine_negatives

        if cfg.hard_negatives:
            bm25 = bm25 or pairs.passages.bm25(**bm25_opts)
            negatives = mine_negatives(pairs, bm25, depth=cfg.negative_depth, lang=lang)
        else:
            negatives = [[] for _ in pairs.examples]
        if args.dev is not None:
            dev = read_pairs(Path(args.dev), store, None, lang=lang, bm25_options=bm25_opts, bm25=bm25)
        elif pairs.format == "beir":
            dev = read_beir_dev(args.data, pairs)
        else:
            dev = None
        train = pairs
    else:
        from ralm.retrieval.passages import StorePassages

        store = DocStore(args.data)
        train = StorePassages(store)
        dev = None
        if args.dev is not None:
            dev = read_pairs(Path(args.dev), store, None, lang=lang, bm25_options=bm25_opts)
    if dev is not None:
        if args.dev_max:
            dev.examples = dev.examples[: args.dev_max]
        log(f"{len(dev.examples)} dev questions")
    from ralm.retrieval.training.recipes import train_retriever

    res = train_retriever(
        enc,
        train,
        args.out,
        cfg,
        dev=dev,
        negatives=negatives,
        data=data,
        overwrite=args.overwrite,
        progress=not args.quiet,
        log=log,
    )
    print(
        json.dumps(
            {
                "run": str(args.out),
                "encoder": res["encoder"],
                "best_step": res["best_step"],
                "best": res["best"],
                **{k: round(v, 4) for k, v in res["last_eval"].items()},
            }
        )
    )
    return 0


def _resolved(p) -> str | None:
    return None if p is None else str(Path(p).resolve())


def _bm25_for(store, opts: dict):
    from ralm.retrieval.bm25 import BM25Searcher

    return BM25Searcher.build(store, **opts)
