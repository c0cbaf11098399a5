"""SUREALM commands: data store, training, evaluation, generation.

ralm surealm datastore --sample chitchat --out ds/chitchat          (or JSONL / text files of sentences)
ralm surealm train ds/chitchat --out runs/surealm                    (--no-retrieval: the baseline)
ralm surealm evaluate runs/surealm runs/baseline --knnlm runs/baseline --split test
ralm surealm generate runs/surealm "i'd like to" --strategy beam --show-retrievals
"""

from __future__ import annotations

import argparse
import json
import sys
import textwrap
from pathlib import Path
from typing import Any

from ralm.atomic import write_json_atomic
from ralm.cli_flags import (
    add_autocast,
    add_command_group,
    add_device,
    add_out,
    add_overwrite,
    add_quiet,
    add_seed,
    dataclass_from_args,
)
from ralm.errors import RalmError
from ralm.surealm.options import DEFAULT_PATHWAY, PATHWAYS
from ralm.surealm.sentences import FILL_SPLITS, SPLITS_HOW

# ralm.retrieval.index.plan.KINDS, without importing FAISS to build the parser
INDEX_KINDS = ("flat", "ivf-flat", "hnsw", "sq8", "ivf-pq", "sq6", "sq4")
SCHEDULES = ("linear", "cosine", "constant")
STRATEGIES = ("greedy", "top-p", "beam")
DEVICE_HELP = "auto, cpu, cuda or cuda:N (default: %(default)s, cuda when there is one)"
# What an empty valid or test split leads to later.
_EMPTY_SPLIT_EFFECT = {
    "valid": "`ralm surealm train` will refuse this data store",
    "test": "`ralm surealm evaluate --split test` will refuse it",
}


def cmd_datastore(args: argparse.Namespace) -> int:
    from ralm.surealm.datastore_build import DatastoreConfig, build_datastore
    from ralm.surealm.sentences import read_sentences

    sources = list(args.inputs) + ([args.sample] if args.sample else [])
    if not sources:
        raise RalmError("give sentence files (JSONL or text) or --sample chitchat")
    sents = read_sentences(
        sources, fractions=(args.valid_frac, args.test_frac), seed=args.seed, limit_groups=args.limit_groups
    )
    cfg = dataclass_from_args(DatastoreConfig, args)
    out = build_datastore(sents, args.out, cfg, overwrite=args.overwrite, progress=not args.quiet)
    print(f"data store: {out}")
    counts = sents.counts()
    for split, effect in _EMPTY_SPLIT_EFFECT.items():
        if not counts[split]:
            print(
                f"ralm: warning: {sents.empty_split(split)}; {effect}; to fill it, {FILL_SPLITS}",
                file=sys.stderr,
            )
    return 0


def cmd_train(args: argparse.Namespace) -> int:
    from ralm.surealm.train import TrainConfig, train

    cfg = dataclass_from_args(TrainConfig, args, retrieval=not args.no_retrieval)
    out = train(cfg, overwrite=args.overwrite, progress=not args.quiet)
    info = json.loads((out / "train.json").read_text(encoding="utf-8"))
    v = info.get("valid", {})
    print(
        f"model: {out} (best at step {info.get('best_step')}: valid token ppl {v.get('token_ppl', float('nan')):.2f}, "
        f"word ppl {v.get('word_ppl', float('nan')):.2f})"
    )
    return 0


def cmd_evaluate(args: argparse.Namespace) -> int:
    from ralm.surealm.evaluation import evaluate_models, format_rows

    rows = evaluate_models(args.models, args.split, args.datastore, args.knnlm, args.device, args.knn_k)
    print(format_rows(rows, args.split))
    if args.json_out:
        p = Path(args.json_out)
        write_json_atomic(p, {"split": args.split, "rows": rows})
        print(f"written: {p}")
    return 0


def cmd_generate(args: argparse.Namespace) -> int:
    from ralm.surealm.generate import describe_retrievals, generate
    from ralm.surealm.train import load_trained

    if not args.prompt.strip():
        raise RalmError("the prompt is empty; give the start of a sentence")
    model, tok, store, _ = load_trained(args.model, args.datastore, args.device)
    res = generate(model, tok, store, args.prompt, **decoding_options(args))
    for t in res.texts:
        print(f"{args.prompt} {t}".strip())
    if args.show_retrievals:
        if not model.config.retrieval:
            print("(no retrieval: a baseline model)")
        else:
            print("\nretrievals (every delta tokens):")
            print("\n".join(describe_retrievals(res.retriever, tok, args.show_entries)))
    return 0


DECODING = ("strategy", "max_new_tokens", "top_p", "temperature", "num_beams", "seed")


def decoding_options(given: Any) -> dict[str, Any]:
    """The decoding keywords of `ralm.surealm.generate.generate` (DECODING, and the number of
    continuations) from what names them alike: the arguments of `ralm surealm generate` or an
    /api/generate request (ralm.serve.schemas.GenerateRequest)."""
    return {name: getattr(given, name) for name in DECODING} | {"num_return_sequences": given.num_return}


class _HelpFormatter(argparse.HelpFormatter):
    """argparse's formatter, but never breaking a line inside "--valid-frac" or "top-p"."""

    def _split_lines(self, text: str, width: int) -> list[str]:
        return textwrap.wrap(" ".join(text.split()), width, break_on_hyphens=False)

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        return textwrap.fill(
            " ".join(text.split()),
            width,
            initial_indent=indent,
            subsequent_indent=indent,
            break_on_hyphens=False,
        )


def register(sub: argparse._SubParsersAction) -> None:
    ss = add_command_group(
        sub, "surealm", "SUREALM: suffix retrieval-augmented causal LM", dest="surealm_command"
    )
    splits = f"{SPLITS_HOW[0].upper()}{SPLITS_HOW[1:]}."

    p = ss.add_parser(
        "datastore",
        formatter_class=_HelpFormatter,
        help="sentences -> prefix/suffix data store + offline top-K retrieval",
        description="Build the SUREALM data store of a set of sentences: one (prefix, suffix) entry per "
        "token of every training sentence and the offline top-K entries of every prefix of every "
        f"sentence. {splits} An empty valid or test split is warned about; `train` needs valid "
        "sentences and `evaluate --split S` sentences in S.",
    )
    p.add_argument(
        "inputs",
        nargs="*",
        help='sentence files: JSONL, one {"text", "group"?, "split"?} object a line, or text, one sentence '
        "a line with a blank line between groups",
    )
    p.add_argument(
        "--sample",
        choices=("chitchat",),
        help="add a bundled sample: chitchat, the chitchat-dataset conversations (default: none)",
    )
    add_out(p, "data store directory to write (required, no default)", type=None)
    p.add_argument(
        "--lm",
        default="minilm",
        help="LM whose tokenizer splits the sentences into tokens: minilm, smollm2 or a model directory "
        "(default: %(default)s); train with the same LM",
    )
    p.add_argument(
        "--encoder",
        default=None,
        help="sentence-transformer directory that embeds prefixes and suffixes (default: the bundled MiniLM)",
    )
    p.add_argument(
        "--m", type=int, default=10, help="suffix length in LM tokens (default: %(default)s, as in SUREALM)"
    )
    p.add_argument(
        "--suffix",
        choices=("truncate", "whole"),
        default="truncate",
        help="how a suffix is encoded: truncate (the encoder reads its m tokens alone) or whole (it reads the "
        "rest of the sentence and the first m tokens are pooled, as the SUREALM authors' code does) "
        "(default: %(default)s)",
    )
    p.add_argument(
        "--include-current-word",
        action="store_true",
        help="suffixes start at the current word w_i, the paper's section 5 variant (default: off, w_i is in "
        "neither prefix nor suffix)",
    )
    p.add_argument(
        "--k",
        type=int,
        default=8,
        help="neighbours kept per prefix (default: %(default)s, as in SUREALM); train --k may be at most this",
    )
    p.add_argument(
        "--max-tokens",
        type=int,
        default=64,
        help="LM tokens kept per sentence; longer sentences are cut (default: %(default)s)",
    )
    p.add_argument(
        "--limit-groups",
        type=int,
        default=None,
        help="keep only the first N groups (conversations, blank-line blocks) in input order (default: all)",
    )
    p.add_argument(
        "--valid-frac",
        type=float,
        default=0.05,
        help="fraction of the groups drawn for the valid split (default: %(default)s); groups as said above",
    )
    p.add_argument(
        "--test-frac",
        type=float,
        default=0.05,
        help="fraction of the groups drawn for the test split (default: %(default)s); groups as said above",
    )
    add_seed(p, "seed of the draw of groups into splits (default: %(default)s)")
    p.add_argument(
        "--index-kind",
        default="flat",
        choices=INDEX_KINDS,
        help="FAISS index over the prefix embeddings: %(choices)s (default: %(default)s, exact search)",
    )
    add_device(
        p, "device that embeds the sentences: cpu, cuda or cuda:N (default: %(default)s)", default="cpu"
    )
    add_overwrite(p, "replace a data store at --out (default: off, refuse)")
    add_quiet(p, "no progress bars (default: off)")
    p.set_defaults(func=cmd_datastore)

    p = ss.add_parser(
        "train",
        formatter_class=_HelpFormatter,
        help="train SUREALM (or --no-retrieval, the baseline) on a data store",
        description="Train SUREALM, or with --no-retrieval the same LM without retrieval, on the training "
        "split of a data store, keeping the model of lowest validation perplexity; a data store "
        f"without valid sentences is refused. {splits}",
    )
    p.add_argument("datastore", help="data store directory from `ralm surealm datastore`")
    add_out(p, "run directory to write (required, no default)", type=None)
    p.add_argument(
        "--lm",
        default="minilm",
        help="backbone: minilm, smollm2 or a model directory, the LM the data store was built with "
        "(default: %(default)s)",
    )
    p.add_argument(
        "--no-retrieval",
        action="store_true",
        help="the same LM without retrieval, the baseline (default: off, SUREALM with retrieval)",
    )
    p.add_argument(
        "--init-from",
        default=None,
        help="a trained run (e.g. the --no-retrieval baseline) whose LM weights start this run "
        "(default: none, the pretrained backbone)",
    )
    p.add_argument(
        "--k",
        type=int,
        default=8,
        help="retrieved entries per retrieval, at most the data store's --k (default: %(default)s, as in SUREALM)",
    )
    p.add_argument(
        "--delta",
        type=int,
        default=1,
        help="retrieve every delta tokens (default: %(default)s, as in SUREALM)",
    )
    p.add_argument("--steps", type=int, default=1000, help="optimizer steps (default: %(default)s)")
    p.add_argument("--batch-size", type=int, default=32, help="sentences per step (default: %(default)s)")
    p.add_argument(
        "--lr", type=float, default=1e-4, help="peak learning rate of the LM (default: %(default)s)"
    )
    p.add_argument(
        "--lr-memory",
        type=float,
        default=None,
        help="peak learning rate of the memory projections (default: 10 x --lr; they start from scratch)",
    )
    p.add_argument(
        "--memory-dropout",
        type=float,
        default=0.0,
        help="training only: probability that a memory slot is nulled, drawn anew at every read, so the "
        "fixed offline neighbours are no code to memorise a sentence by (default: %(default)s)",
    )
    p.add_argument(
        "--memory-init",
        choices=["zero", "identity"],
        default="zero",
        help="zero: memory starts inert; identity: embeddings enter each layer as they are (paper eqs. 4-5) "
        "(default: %(default)s)",
    )
    p.add_argument(
        "--memory-gain",
        type=float,
        default=None,
        help="starting gain of the memory LayerNorms (default: 0 with zero, 1 with identity)",
    )
    p.add_argument(
        "--memory-window",
        type=int,
        default=None,
        help="each position sees only the latest W retrievals (default: all of them, as in eq. 6)",
    )
    p.add_argument(
        "--pathway",
        choices=PATHWAYS,
        default=DEFAULT_PATHWAY,
        help="where the memory enters: cross (a gated cross-attention block after every layer, its gates "
        "from 0, so the model starts as the backbone) or self (the slots in every layer's self-attention) "
        "(default: %(default)s)",
    )
    p.add_argument(
        "--memory-bias",
        type=float,
        default=None,
        help="self pathway: a learned offset on every memory slot's attention logit, starting here, e.g. -30 "
        "keeps the slots out of the softmax at step 0 (default: none)",
    )
    p.add_argument(
        "--neighbours",
        choices=("retrieved", "random", "null"),
        default="retrieved",
        help="what fills the memory: retrieved (the top K), random (K random training entries, never the "
        "sentence's own: the control for retrieval) or null (zero embeddings: the control for extra slots) "
        "(default: %(default)s)",
    )
    p.add_argument(
        "--warmup-steps",
        type=int,
        default=100,
        help="steps of linear learning-rate warm-up (default: %(default)s)",
    )
    p.add_argument(
        "--schedule",
        default="linear",
        choices=SCHEDULES,
        help="learning-rate decay after warm-up: %(choices)s (default: %(default)s, as in SUREALM)",
    )
    p.add_argument(
        "--eval-every",
        type=int,
        default=250,
        help="validation perplexity every N steps and at the last; the best model is kept (default: %(default)s)",
    )
    add_seed(p, "seed of initialisation and batch order (default: %(default)s)")
    add_device(p, DEVICE_HELP, default="auto")
    add_autocast(
        p,
        "mixed precision: %(choices)s (default: %(default)s, bf16 where the hardware has it)",
        default="auto",
    )
    add_overwrite(p, "replace a run at --out (default: off, refuse)")
    add_quiet(p, "no progress bar (default: off)")
    p.set_defaults(func=cmd_train)

    p = ss.add_parser(
        "evaluate",
        formatter_class=_HelpFormatter,
        help="token- and word-level perplexity of models (and kNN-LM) on a split",
        description="Token- and word-level perplexity of trained runs, and of a kNN-LM, on one split of a "
        f"data store; an empty split is refused, never reported as a perplexity over 0 tokens. {splits}",
    )
    p.add_argument("models", nargs="+", help="trained run directories (SUREALM or --no-retrieval)")
    p.add_argument(
        "--split",
        default="test",
        choices=("train", "valid", "test"),
        help="split to measure: %(choices)s (default: %(default)s)",
    )
    p.add_argument(
        "--datastore",
        default=None,
        help="data store to evaluate on (default: the one each model was trained with)",
    )
    p.add_argument(
        "--knnlm",
        default=None,
        help="a (baseline) run to add as kNN-LM over the training split, tuned on the valid split (default: none)",
    )
    p.add_argument("--knn-k", type=int, default=64, help="neighbours of the kNN-LM (default: %(default)s)")
    add_device(p, DEVICE_HELP, default="auto")
    p.add_argument("--json-out", default=None, help="also write the rows to this JSON file (default: none)")
    p.set_defaults(func=cmd_evaluate)

    p = ss.add_parser(
        "generate",
        help="continue a prompt, retrieving suffixes every delta tokens",
        formatter_class=_HelpFormatter,
    )
    p.add_argument("model", help="trained run directory")
    p.add_argument("prompt", help="the start of the sentence to continue")
    p.add_argument(
        "--strategy",
        default="greedy",
        choices=STRATEGIES,
        help="decoding: %(choices)s (default: %(default)s)",
    )
    p.add_argument(
        "--max-new-tokens", type=int, default=20, help="tokens to add at most (default: %(default)s)"
    )
    p.add_argument(
        "--top-p",
        type=float,
        default=0.9,
        help="probability mass kept by --strategy top-p (default: %(default)s)",
    )
    p.add_argument(
        "--temperature",
        type=float,
        default=1.0,
        help="softmax temperature of --strategy top-p (default: %(default)s)",
    )
    p.add_argument(
        "--beams",
        dest="num_beams",
        metavar="BEAMS",
        type=int,
        default=4,
        help="beams of --strategy beam (default: %(default)s)",
    )
    p.add_argument(
        "--num-return",
        type=int,
        default=1,
        help="continuations printed; at most --beams with --strategy beam (default: %(default)s)",
    )
    add_seed(p, "seed of --strategy top-p (default: %(default)s)")
    p.add_argument(
        "--show-retrievals", action="store_true", help="print what was retrieved at each step (default: off)"
    )
    p.add_argument(
        "--show-entries",
        type=int,
        default=3,
        help="entries shown per retrieval with --show-retrievals (default: %(default)s)",
    )
    p.add_argument(
        "--datastore",
        default=None,
        help="data store to retrieve from (default: the one the model was trained with)",
    )
    add_device(p, DEVICE_HELP, default="auto")
    p.set_defaults(func=cmd_generate)
