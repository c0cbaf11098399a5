"""`ralm ngram ...`: train an n-gram LM into an ARPA file, score text with it, sample from it.

  ralm ngram train TEXT --order 3 --estimator mkn --out model.arpa
  ralm ngram score MODEL.arpa TEXT          (prints the perplexity)
  ralm ngram sample MODEL.arpa --seed 0 -n 5
  ralm lm ladder lee --json-out ladder.json   (n-gram -> FFNN -> LSTM -> transformer perplexities)

TEXT is UTF-8, one sentence per line (blank lines are skipped), `-` for stdin. The
tokenizer ("word": `\\w+|[^\\w\\s]`, or "whitespace") and lower-casing chosen at training
time are recorded in the ARPA header and reused by `score` and `sample` unless overridden.
`train` writes estimators with a backoff form only (katz, kn, mkn; laplace and lidstone at
order 1), since the model is an ARPA file. laplace and lidstone above order 1 use only the
full context (nltk.lm's definition): an unseen word after a seen context gets its own
smoothed probability, an unseen context a uniform one, which ARPA backoff cannot express
without listing every one of the |V| words after every context; mle gives unseen words and
n-grams probability 0, which ARPA cannot state (its floor is -99, and it backs off); stupid
backoff scores are not probabilities. Fit and score those in memory instead:

  ralm ngram score --train TEXT --order 3 --estimator laplace HELD_OUT.txt
"""

from __future__ import annotations

import argparse
import os
import sys

from ralm.cli_flags import (
    add_autocast,
    add_command_group,
    add_out,
    add_overwrite,
    add_quiet,
    add_seed,
    add_threads,
    dataclass_from_args,
)
from ralm.errors import RalmError, opening
from ralm.lm.counts import TOKENIZERS
from ralm.lm.ngram import ESTIMATORS, MAX_ORDER, NGramLM, canonical_estimator


def read_sentences(path: str, tokenizer: str = "word", lowercase: bool = False) -> list[list[str]]:
    """Tokenised non-blank lines of a UTF-8 text file (`-` = stdin), one sentence per line.

    Lines end at `\\n` (a `\\r` before it is whitespace). Invalid UTF-8 raises RalmError naming
    the line and the byte offset of the bad byte in the file.
    """
    tok = TOKENIZERS[tokenizer]
    out: list[list[str]] = []
    with opening(path, "a text file"):
        f = sys.stdin.buffer if path == "-" else open(path, "rb")  # noqa: SIM115
    offset = 0
    try:
        for lineno, raw in enumerate(f, start=1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                bad = raw[exc.start : exc.start + 1].hex()
                raise RalmError(
                    f"{path}:{lineno}: not valid UTF-8 (byte 0x{bad} at byte offset {offset + exc.start} of the "
                    f"file, {exc.reason}); convert the file to UTF-8, e.g. iconv -f latin1 -t utf-8"
                ) from None
            offset += len(raw)
            tokens = tok(line, lowercase)
            if tokens:
                out.append(tokens)
    finally:
        if path != "-":
            f.close()
    return out


def _meta_bool(value: str | None) -> bool:
    return str(value).lower() in ("1", "true", "yes")


def _text_options(args: argparse.Namespace, model: NGramLM) -> tuple[str, bool]:
    tokenizer = args.tokenizer or model.meta.get("tokenizer", "word")
    if tokenizer not in TOKENIZERS:
        raise RalmError(f"unknown tokenizer {tokenizer!r} in the model header; pass --tokenizer")
    lowercase = args.lowercase if args.lowercase is not None else _meta_bool(model.meta.get("lowercase"))
    return tokenizer, lowercase


NO_ARPA_WHY = {
    "mle": "MLE gives unseen words and n-grams probability 0, which an ARPA file cannot state: its "
    "floor is -99 and it backs off to shorter contexts",
    "laplace": "add-one uses only the full context, so an ARPA file would have to list all |V| words "
    "after every context",
    "lidstone": "add-delta uses only the full context, so an ARPA file would have to list all |V| words "
    "after every context",
    "stupid_backoff": "its scores are not probabilities",
}


def _has_arpa_form(est: str, order: int) -> bool:
    return est in ("katz", "kn", "mkn") or (est in ("laplace", "lidstone") and order == 1)


def _estimator_params(args: argparse.Namespace, est: str) -> dict[str, object]:
    params: dict[str, object] = {}
    if args.delta is not None:
        if est != "lidstone":
            raise RalmError("--delta applies to --estimator lidstone only")
        params["delta"] = args.delta
    if args.katz_k is not None:
        if est != "katz":
            raise RalmError("--katz-k applies to --estimator katz only")
        params["k"] = args.katz_k
    return params


def cmd_train(args: argparse.Namespace) -> int:
    """Fit a model on TEXT and write it as ARPA."""
    est = canonical_estimator(args.estimator)
    if not _has_arpa_form(est, args.order):
        raise RalmError(
            f"estimator {est!r} at order {args.order} has no ARPA form ({NO_ARPA_WHY[est]}); fit and score it "
            f"in memory instead: ralm ngram score --train {args.text} --order {args.order} --estimator {est} "
            "HELD_OUT.txt (or train katz, kn or mkn)"
        )
    if os.path.exists(args.out) and not args.overwrite:
        raise RalmError(f"{args.out} exists; pass --overwrite to replace it")
    lowercase = bool(args.lowercase)
    params = _estimator_params(args, est)
    sentences = read_sentences(args.text, args.tokenizer or "word", lowercase)
    model = NGramLM.fit(sentences, order=args.order, estimator=est, **params)
    del sentences
    model.meta.update({"tokenizer": args.tokenizer or "word", "lowercase": str(lowercase).lower()})
    model.to_arpa(args.out)
    print(
        f"wrote {args.out}: order {model.order} {model.estimator}, "
        f"{model.n_train_sentences} sentences, {model.n_train_tokens} tokens, "
        f"n-grams per order {model.sizes}"
    )
    if model.discount_fallback_orders:
        print(f"note: fallback discounts used for orders {model.discount_fallback_orders} (small corpus)")
    return 0


def cmd_score(args: argparse.Namespace) -> int:
    """Print the perplexity of TEXT under MODEL, or under a model fitted on --train in memory
    (optionally each sentence's log10 score)."""
    if args.train is None:
        if (
            args.order is not None
            or args.estimator is not None
            or args.delta is not None
            or args.katz_k is not None
        ):
            raise RalmError(
                "--order, --estimator, --delta and --katz-k need --train (an ARPA model has its own)"
            )
        if len(args.inputs) != 2:
            raise RalmError("give MODEL.arpa and TEXT (or --train TRAIN_TEXT and TEXT to fit in memory)")
        model_path, text = args.inputs
        model = NGramLM.from_arpa(model_path)
        tokenizer, lowercase = _text_options(args, model)
    else:
        if len(args.inputs) != 1:
            raise RalmError("with --train give only TEXT (the model is fitted in memory, no MODEL.arpa)")
        (text,) = args.inputs
        est = canonical_estimator(args.estimator or "mkn")
        order = args.order if args.order is not None else 3
        tokenizer, lowercase = args.tokenizer or "word", bool(args.lowercase)
        params = _estimator_params(args, est)
        model = NGramLM.fit(
            read_sentences(args.train, tokenizer, lowercase), order=order, estimator=est, **params
        )
        if est == "stupid_backoff":
            print(
                "note: stupid backoff scores are not probabilities; this is not a true perplexity",
                file=sys.stderr,
            )
    sentences = read_sentences(text, tokenizer, lowercase)
    if not sentences:
        raise RalmError(f"{text}: no sentences to score")
    scores = model.score_sentences(sentences)
    if args.per_sentence:
        for s, tokens in zip(scores.tolist(), sentences, strict=True):
            print(f"{s:.4f}\t{' '.join(tokens)}")
    n_tokens = sum(len(s) for s in sentences)
    n_oov = sum(1 for s in sentences for t in s if t not in model.vocab)
    total = float(scores.sum())
    ppl = 10.0 ** (-total / (n_tokens + len(sentences)))
    print(f"perplexity: {ppl:.4f}")
    print(
        f"sentences: {len(sentences)}  tokens: {n_tokens}  OOV: {n_oov}  log10 total: {total:.4f}",
        file=sys.stderr,
    )
    return 0


def cmd_sample(args: argparse.Namespace) -> int:
    """Print N sampled sentences (seeded)."""
    model = NGramLM.from_arpa(args.model)
    tokenizer, lowercase = _text_options(args, model)
    context = TOKENIZERS[tokenizer](args.context or "", lowercase)
    if args.num < 1:
        raise RalmError(f"-n must be >= 1, got {args.num}")
    for i in range(args.num):
        tokens = model.sample(args.seed + i, max_len=args.max_len, context=context)
        print(" ".join([*context, *tokens]))
    return 0


def _order(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if not 1 <= value <= MAX_ORDER:
        raise argparse.ArgumentTypeError(f"order must be from 1 to {MAX_ORDER}, got {value}")
    return value


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add `ralm ngram {train,score,sample}` to the top-level parser."""
    sub = add_command_group(
        subparsers,
        "ngram",
        "n-gram language models: train to ARPA, score, sample",
        dest="ngram_command",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )

    def text_opts(p: argparse.ArgumentParser, training: bool) -> None:
        p.add_argument(
            "--tokenizer",
            choices=sorted(TOKENIZERS),
            default=None,
            help="tokenisation of TEXT (default: " + ("word)" if training else "as recorded in the model)"),
        )
        p.add_argument(
            "--lowercase",
            action=argparse.BooleanOptionalAction,
            default=None,
            help="lower-case TEXT first (default: " + ("no)" if training else "as recorded in the model)"),
        )

    t = sub.add_parser("train", help="fit an n-gram LM on TEXT and write an ARPA file")
    t.add_argument("text", metavar="TEXT", help="UTF-8 text, one sentence per line ('-' = stdin)")
    t.add_argument("--order", type=_order, default=3, help="n-gram order (default 3)")
    t.add_argument(
        "--estimator",
        default="mkn",
        help=f"one of {', '.join(ESTIMATORS)} (default mkn). ARPA output needs katz, kn or mkn (laplace, "
        "lidstone: also order 1); score the others with `ngram score --train`",
    )
    add_out(t, "where to write the model", type=None, metavar="MODEL.arpa")
    t.add_argument("--delta", type=float, default=None, help="lidstone: the added count")
    t.add_argument("--katz-k", type=int, default=None, help="katz: discount counts <= k (default 5)")
    add_overwrite(t, "replace an existing --out file")
    text_opts(t, training=True)
    t.set_defaults(func=cmd_train)

    s = sub.add_parser(
        "score",
        help="print the perplexity of TEXT under an ARPA model, or under any estimator fitted in memory",
        description="ralm ngram score MODEL.arpa TEXT, or ralm ngram score --train TRAIN_TEXT [--order N] "
        "[--estimator E] TEXT: fit in memory (every estimator, also those with no ARPA form: laplace "
        "and lidstone above order 1, mle, stupid_backoff) and score TEXT.",
    )
    s.add_argument(
        "inputs",
        nargs="+",
        metavar="[MODEL.arpa] TEXT",
        help="the model and the UTF-8 text to score, one sentence per line ('-' = stdin); "
        "with --train only the text",
    )
    s.add_argument("--train", default=None, metavar="TRAIN_TEXT", help="fit the model on this text in memory")
    s.add_argument("--order", type=_order, default=None, help="with --train: n-gram order (default 3)")
    s.add_argument(
        "--estimator", default=None, help=f"with --train: one of {', '.join(ESTIMATORS)} (default mkn)"
    )
    s.add_argument("--delta", type=float, default=None, help="with --train, lidstone: the added count")
    s.add_argument("--katz-k", type=int, default=None, help="with --train, katz: discount counts <= k")
    s.add_argument("--per-sentence", action="store_true", help="also print each sentence's log10 score")
    text_opts(s, training=False)
    s.set_defaults(func=cmd_score)

    g = sub.add_parser("sample", help="generate sentences from an ARPA model")
    g.add_argument("model", metavar="MODEL.arpa")
    add_seed(g, "random seed (sentence i uses seed + i)")
    g.add_argument("-n", "--num", type=int, default=1, help="number of sentences (default 1)")
    g.add_argument("--max-len", type=int, default=30, help="at most this many tokens each")
    g.add_argument("--context", default="", help="text to continue (tokenised like the model)")
    text_opts(g, training=False)
    g.set_defaults(func=cmd_sample)
    register_lm(subparsers)


def cmd_ladder(args: argparse.Namespace) -> int:
    """Fit the lecture's ladder of LMs on one split of TEXT_OR_SAMPLE and print one table."""
    from ralm.lm.ladder import (
        LadderConfig,
        format_head,
        format_row,
        planned_models,
        run_ladder,
        table_widths,
        write_json,
    )

    if args.threads is not None:
        import torch

        if args.threads < 1:
            raise RalmError(f"--threads {args.threads}: must be >= 1")
        torch.set_num_threads(args.threads)
    neural = tuple(m for m in (args.models or "ffnn,lstm,transformer").split(",") if m and m != "ngram")
    cfg = dataclass_from_args(
        LadderConfig,
        args,
        ngrams=args.models is None or "ngram" in args.models.split(","),
        neural=neural,
        time_budget_s=args.time_budget,
    )
    if cfg.epochs < 1:
        raise RalmError(f"--epochs {cfg.epochs}: must be >= 1")
    log = None if args.quiet else (lambda m: print(m, file=sys.stderr, flush=True))
    # The table grows on stdout as each model finishes (the neural ones take minutes each).
    widths = table_widths(planned_models(cfg))
    rule: list[str] = []

    def on_data(label: str, data: dict) -> None:
        head = format_head(label, data, widths)
        rule.append(head[1])
        print("\n".join(head), flush=True)

    def on_row(row: dict) -> None:
        print(format_row(row, widths), flush=True)

    result = run_ladder(args.source, cfg, log=log, save_dir=args.save_dir, on_data=on_data, on_row=on_row)
    print(rule[0] if rule else "", flush=True)
    if args.json_out:
        write_json(result, args.json_out)
        print(f"wrote {args.json_out}", file=sys.stderr)
    return 0


def register_lm(subparsers: argparse._SubParsersAction) -> None:
    """Add `ralm lm ladder` to the top-level parser."""
    sub = add_command_group(
        subparsers,
        "lm",
        "neural LMs next to the n-gram ones: the perplexity ladder",
        dest="lm_command",
        description="Neural language models of the lecture (ralm.lm.neural) compared with n-gram models.",
    )
    lad = sub.add_parser(
        "ladder",
        help="one perplexity table: add-one, Katz, KN, modified KN, FFNN, LSTM, transformer",
        description=(
            "Split TEXT_OR_SAMPLE by document into train/valid/test (80/10/10, seeded), build one "
            "vocabulary, fit every model on the same training sentences and print their test "
            "perplexities (every token incl. </s>; <s> never predicted). TEXT_OR_SAMPLE: lee (default "
            "news sample), enwiki, a DocStore directory, or a text file (one document per line) / JSONL."
        ),
    )
    lad.add_argument("source", metavar="TEXT_OR_SAMPLE", nargs="?", default="lee")
    lad.add_argument("--max-tokens", type=int, default=None, help="use only the first N training words")
    lad.add_argument("--epochs", type=int, default=20, help="max epochs per neural model (default 20)")
    lad.add_argument(
        "--time-budget",
        type=float,
        default=None,
        metavar="SECONDS",
        help="max training seconds per neural model",
    )
    lad.add_argument(
        "--models", default=None, help="comma-separated subset of ngram,ffnn,lstm,transformer (default: all)"
    )
    lad.add_argument("--vocab-size", type=int, default=10_000, help="vocabulary cap incl. specials")
    lad.add_argument("--min-count", type=int, default=2, help="rarer training words become <unk> (default 2)")
    lad.add_argument(
        "--lowercase",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="lower-case the text (default: yes)",
    )
    add_seed(lad)
    add_autocast(lad, "bf16 autocast for training (auto: where the CPU/GPU has native bf16)", default="auto")
    add_threads(lad, "torch CPU threads")
    lad.add_argument("--json-out", default=None, metavar="PATH", help="also write the table as JSON")
    lad.add_argument("--save-dir", default=None, metavar="DIR", help="save each neural model to DIR/KIND")
    add_quiet(lad, "no progress lines on stderr")
    lad.set_defaults(func=cmd_ladder)
