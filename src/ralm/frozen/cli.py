"""`ralm lm-eval`: perplexity of a frozen causal LM on a text, with or without retrieval.

    ralm lm-eval TEXT                                    # SmolLM2, no retrieval
    ralm lm-eval smollm2 test.txt --corpus STORE --mode none in-context replug --stride 16 64
    ralm lm-eval ./my-llama test.txt --index INDEX --retriever hybrid --mode in-context --rerank 4

Rows: every --mode at every --stride, in one table (--json: one object with a row each), over the
same tokens. The text's own articles are excluded from retrieval (`--exclude auto`, see
ralm.frozen.exclusion), plus any `--exclude-article TITLE`.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from ralm.cli_flags import add_autocast, add_device, add_out, add_overwrite, dataclass_from_args
from ralm.errors import RalmError
from ralm.retrieval.options import add_retrieval_args

__all__ = ["register", "run"]


def register(sub: argparse._SubParsersAction) -> None:
    """Add `lm-eval`, `lm-datastore` and `convert-gguf` to the top-level parser."""
    p = sub.add_parser(
        "lm-eval",
        help="perplexity of a frozen causal LM on a text: no retrieval, In-Context RALM, REPLUG",
        description="Token and word perplexity of a frozen causal LM on a UTF-8 text file, with the "
        "sliding-window recipe (max length, stride; every token scored once). Retrieval modes put "
        "retrieved chunks in front of the context: in-context (Ram et al. 2023: top-1 chunk every "
        "stride tokens, queried with the last --query-tokens tokens; --rerank M picks among the top M "
        "by the LM's own likelihood of the recent tokens) and replug (Shi et al. 2023: the top-k "
        "chunks in separate passes, mixed with softmax(score / temperature) weights); knnlm "
        "(Khandelwal et al. 2020: the k nearest context vectors in a data store of the same LM over a "
        "corpus, `ralm lm-datastore`, interpolated with weight --knn-lambda).",
    )
    p.add_argument(
        "lm", nargs="?", default=None, help="smollm2 (default), a causal LM directory or a .gguf file"
    )
    p.add_argument("text", type=Path, help="UTF-8 text file to evaluate")
    p.add_argument("--lm", dest="lm_option", default=None, metavar="LM", help="the LM, as an option")
    p.add_argument(
        "--gguf-file", default=None, help="the .gguf file inside LM's directory, when it holds several"
    )
    add_retrieval_args(p)  # --index, --corpus, --retriever, --lang
    p.add_argument(
        "--mode",
        nargs="+",
        choices=["none", "in-context", "replug", "knnlm"],
        default=None,
        help="one or more (default: in-context with a retriever, else none)",
    )
    p.add_argument(
        "--stride", type=int, nargs="+", default=[4], help="tokens per block/retrieval (default 4)"
    )
    p.add_argument("--query-tokens", type=int, default=32, help="query = the last l tokens (default 32)")
    p.add_argument("--max-length", type=int, default=None, help="LM input tokens (default min(1024, LM's))")
    p.add_argument(
        "--doc-tokens", type=int, default=256, help="max tokens of a prepended chunk (default 256)"
    )
    p.add_argument("--k", type=int, default=4, help="REPLUG: chunks ensembled (default 4)")
    p.add_argument("--temperature", type=float, default=1.0, help="REPLUG: softmax(score / T) (default 1)")
    p.add_argument(
        "--rerank", type=int, default=1, metavar="M", help="in-context: rerank the top M by LM likelihood"
    )
    p.add_argument(
        "--rerank-tokens", type=int, default=16, help="reranking scores the last l' tokens (default 16)"
    )
    p.add_argument(
        "--exclude",
        default="auto",
        choices=["auto", "none"],
        help="auto (default): never retrieve articles sharing a word n-gram with the text",
    )
    p.add_argument(
        "--exclude-article", action="append", default=[], metavar="TITLE", help="never retrieve it"
    )
    p.add_argument("--overlap-ngram", type=int, default=13, help="n of --exclude auto (default 13 words)")
    p.add_argument(
        "--max-tokens", type=int, default=None, help="evaluate the first N tokens (cut at a word boundary)"
    )
    p.add_argument("--datastore", type=Path, default=None, help="knnlm: a data store (ralm lm-datastore)")
    p.add_argument("--knn-k", type=int, default=1024, help="knnlm: neighbours searched (default 1024)")
    p.add_argument("--knn-lambda", type=float, default=0.25, help="knnlm: weight of p_kNN (default 0.25)")
    p.add_argument(
        "--knn-temperature", type=float, default=1.0, help="knnlm: softmax(-distance / T) (default 1)"
    )
    _common(p)
    p.set_defaults(func=run)

    d = sub.add_parser(
        "lm-datastore",
        help="a kNN-LM data store of a frozen causal LM over a DocStore (for lm-eval --mode knnlm)",
        description="Runs the LM over every article of a DocStore (chunks joined, sliding windows of "
        "--max-length tokens advancing by --stride) and stores, for every token after an article's "
        "first, the context vector that predicted it (float16) and the token: Khandelwal et al. 2020.",
    )
    d.add_argument(
        "lm", nargs="?", default="smollm2", help="smollm2 (default), gemma3, a causal LM dir or .gguf"
    )
    d.add_argument("--corpus", type=Path, required=True, help="the DocStore to store")
    add_out(d, "the data store directory to write")
    d.add_argument("--gguf-file", default=None, help="the .gguf file inside LM's directory")
    d.add_argument("--max-length", type=int, default=512, help="LM input tokens (default 512)")
    d.add_argument("--stride", type=int, default=256, help="window advance (default 256)")
    add_overwrite(d, "replace an existing --out")
    _common(d)
    d.set_defaults(func=run_datastore)
    c = sub.add_parser(
        "convert-gguf",
        help="write a trained causal LM as a GGUF file for `--backend llama.cpp`",
        description="Writes MODEL_DIR/ralm-model.gguf from a Hugging Face causal LM trained in ralm (a "
        "`ralm rag train` generator, an exported causal REALM reader) and the GGUF it was trained from: "
        "the base's metadata and tokenizer, the trained weights. `--backend llama.cpp` and `auto` use it "
        "while MODEL_DIR's weights are the ones it was made from.",
    )
    c.add_argument("model", type=Path, help="the Hugging Face model directory (config.json, *.safetensors)")
    c.add_argument(
        "--base",
        default=None,
        help="the GGUF it was trained from: gemma3, smollm2 or a .gguf file (default: told by its config)",
    )
    c.add_argument(
        "--type",
        dest="qtype",
        default="q8_0",
        choices=["q8_0", "f16", "f32"],
        help="the 2-D weights' type (default q8_0: 8-bit blocks; f32: the same numbers as the torch path)",
    )
    c.set_defaults(func=run_convert)


def run_convert(args: argparse.Namespace) -> int:
    from ralm.frozen.to_gguf import convert

    out = convert(args.model, base=args.base, qtype=args.qtype)
    print(f"gguf: {out} ({out.stat().st_size / 2**20:.0f} MiB, {args.qtype})")
    return 0


def _common(p: argparse.ArgumentParser) -> None:
    add_device(p, "auto (cuda if available), cpu, cuda, ...", default="auto")
    add_autocast(p, "auto (bf16 where native), bf16 or off (float32)", default="auto", choices=None)
    p.add_argument("--batch-tokens", type=int, default=8192, help="padded tokens per forward batch")
    p.add_argument("--json", action="store_true", help="print one JSON object")


def run_datastore(args: argparse.Namespace) -> int:
    from ralm.corpus.docstore import DocStore
    from ralm.frozen.datastore import build_datastore
    from ralm.frozen.lm import load_frozen_lm

    if args.batch_tokens < 1:
        raise RalmError(f"--batch-tokens {args.batch_tokens}: must be positive")
    if args.out.exists() and not args.overwrite:
        raise RalmError(f"{args.out}: exists; pass --overwrite to replace it")
    store = DocStore(args.corpus)
    log = (lambda m: None) if args.json else (lambda m: print(m, file=sys.stderr))
    lm = load_frozen_lm(args.lm, gguf_file=args.gguf_file, device=args.device, autocast=args.autocast)
    meta = build_datastore(
        lm,
        store,
        args.out,
        max_length=args.max_length,
        stride=args.stride,
        batch_tokens=args.batch_tokens,
        overwrite=args.overwrite,
        log=log,
    )
    if args.json:
        print(json.dumps({k: v for k, v in meta.items() if k != "files"}, indent=2))
    else:
        print(f"{args.out}: {meta['entries']:,} entries, {meta['articles']:,} articles, {meta['seconds']} s")
    return 0


def run(args: argparse.Namespace) -> int:
    from ralm.frozen.evaluate import EvalConfig, Retrieval, check_config, evaluate
    from ralm.frozen.exclusion import (
        article_chunk_ids,
        article_titles,
    )
    from ralm.frozen.lm import load_frozen_lm
    from ralm.frozen.retrieve import DocTokens
    from ralm.frozen.text import read_eval_text
    from ralm.retrieval.retriever import Retriever

    if args.lm is not None and args.lm_option is not None:
        raise RalmError("give the LM once: as LM or as --lm")
    spec = args.lm_option or args.lm or "smollm2"
    retrieving = args.index is not None or args.corpus is not None
    modes = args.mode or (["in-context"] if retrieving else ["knnlm"] if args.datastore else ["none"])
    needs = [m for m in modes if m in ("in-context", "replug")]
    if needs and not retrieving:
        raise RalmError(f"mode {needs[0]} needs --index INDEX or --corpus STORE")
    if "knnlm" in modes and args.datastore is None:
        raise RalmError("mode knnlm needs --datastore DIR (build one with `ralm lm-datastore`)")
    if args.batch_tokens < 1:
        raise RalmError(f"--batch-tokens {args.batch_tokens}: must be positive")
    if not args.text.is_file():  # before the LM takes its time to load
        raise RalmError(f"{args.text}: no such text file")
    log = (lambda m: None) if args.json else (lambda m: print(m, file=sys.stderr))

    t0 = time.perf_counter()
    lm = load_frozen_lm(spec, gguf_file=args.gguf_file, device=args.device, autocast=args.autocast)
    t_lm = time.perf_counter() - t0
    text = read_eval_text(args.text, lm.tokenizer, args.max_tokens)

    cfgs = [
        dataclass_from_args(EvalConfig, args, mode=mode, stride=stride)
        for mode in modes
        for stride in args.stride
    ]
    for cfg in cfgs:  # every row's options, before the retriever is loaded
        check_config(cfg, lm, len(text), args.datastore is not None if cfg.mode == "knnlm" else retrieving)

    retrieval, excluded, excluded_titles, info = None, [], [], ""
    t_ret = 0.0
    if needs:
        t0 = time.perf_counter()
        opened = Retriever.from_args(args, log=log)
        store, retriever, info = opened.store, opened.backend, opened.description
        excluded = sorted(_excluded_articles(args, store, text))
        docs = DocTokens(store, lm.encode, args.doc_tokens)
        retrieval = Retrieval(retriever, docs, article_chunk_ids(store, excluded), info)
        t_ret = time.perf_counter() - t0
        excluded_titles = article_titles(store, excluded)
        if excluded:
            log(f"excluded {len(excluded)} article(s) from retrieval: {', '.join(excluded_titles[:10])}")

    datastore, knn_excluded = None, []
    if "knnlm" in modes:
        datastore, knn_excluded = _open_datastore(args, lm, text, log)
    rows = [
        evaluate(lm, text, cfg, retrieval if cfg.mode in needs else None, datastore, knn_excluded).as_dict()
        for cfg in cfgs
    ]
    out = {
        "lm": lm.name,
        "dtype": lm.dtype_name,
        "text": str(args.text),
        "tokens": len(text) - 1,
        "words": text.n_words,
        "retriever": info,
        "excluded_articles": excluded_titles,
        "excluded_chunks": 0 if retrieval is None else int(len(retrieval.exclude_ids)),
        "datastore": None if datastore is None else str(datastore.root),
        "datastore_excluded_articles": len(knn_excluded),
        "load_seconds": {"lm": t_lm, "retriever": t_ret},
        "rows": rows,
    }
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        print(_table(out))
    return 0


def _excluded_articles(args: argparse.Namespace, store, text) -> set:
    """The articles of `store` never to retrieve for `text`: those --exclude-article names, and with
    --exclude auto those sharing a word n-gram (n = --overlap-ngram) with the text."""
    from ralm.frozen.exclusion import articles_by_title, overlapping_articles

    arts = set(articles_by_title(store, args.exclude_article))
    if args.exclude == "auto":
        arts |= set(overlapping_articles(store, text.text, args.overlap_ngram))
    return arts


def _open_datastore(args: argparse.Namespace, lm, text, log) -> tuple:
    """The data store (checked against the LM) and the articles of its corpus to leave out."""
    from ralm.corpus.docstore import DocStore
    from ralm.frozen.datastore import Datastore
    from ralm.frozen.exclusion import article_titles

    ds = Datastore(args.datastore)
    ds.check(lm)
    corpus = Path(ds.meta["corpus"])
    if not corpus.is_dir():
        raise RalmError(
            f"{args.datastore}: its corpus {corpus} is gone; the text's articles cannot be excluded"
        )
    store = DocStore(corpus)
    if store.fingerprint != ds.meta["corpus_fingerprint"]:
        raise RalmError(f"{corpus}: changed since {args.datastore} was built; rebuild the data store")
    arts = _excluded_articles(args, store, text)
    if arts:
        log(
            f"data store: excluded {len(arts)} article(s): {', '.join(article_titles(store, sorted(arts))[:10])}"
        )
    return ds, sorted(arts)


def _table(out: dict) -> str:
    lines = [
        f"LM {out['lm']} ({out['dtype']}); {out['text']}: {out['tokens']:,} tokens scored, {out['words']:,} words",
    ]
    if out["retriever"]:
        lines.append(f"retrieval: {out['retriever']}; {len(out['excluded_articles'])} article(s) excluded")
    head = f"{'mode':<11} {'stride':>6} {'docs':>5} {'token ppl':>10} {'word ppl':>10} {'blocks w/ doc':>14} "
    head += f"{'seconds':>8} {'tokens/s':>9}"
    lines += [head, "-" * len(head)]
    for r in out["rows"]:
        ndocs = {
            "none": "-",
            "in-context": f"1/{r['rerank']}" if r["rerank"] > 1 else "1",
            "replug": str(r["k"]),
            "knnlm": f"k{r['knn_k']}",
        }
        lines.append(
            f"{r['mode']:<11} {r['stride']:>6} {ndocs[r['mode']]:>5} {r['token_ppl']:>10.3f} {r['word_ppl']:>10.3f} "
            f"{r['blocks_with_docs']:>6}/{r['blocks']:<7} {r['seconds']['total']:>8.1f} {r['tokens_per_s']:>9.1f}"
        )
    return "\n".join(lines)
