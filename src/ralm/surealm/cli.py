"""SUREALM commands: data store, training, evaluation, generation.

ralm surealm datastore --sample chitchat --out ds/chitchat          (or JSONL / text files of sentences)
ralm surealm train ds/chitchat --out runs/surealm                    (--no-retrieval: the baseline)
ralm surealm evaluate runs/surealm runs/baseline --knnlm runs/baseline --split test
ralm surealm generate runs/surealm "i'd like to" --strategy beam --show-retrievals
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from ralm.errors import RalmError


def cmd_datastore(args: argparse.Namespace) -> int:
    from ralm.surealm.datastore import DatastoreConfig, build_datastore
    from ralm.surealm.sentences import read_sentences

    sources = list(args.inputs) + ([args.sample] if args.sample else [])
    if not sources:
        raise RalmError("give sentence files (JSONL or text) or --sample chitchat")
    if args.sample and args.sample != "chitchat":
        raise RalmError(f"--sample {args.sample}: the SUREALM sample is chitchat")
    sents = read_sentences(
        sources, fractions=(args.valid_frac, args.test_frac), seed=args.seed, limit_groups=args.limit_groups
    )
    cfg = DatastoreConfig(
        lm=args.lm,
        encoder=args.encoder,
        m=args.m,
        include_current_word=args.include_current_word,
        k=args.k,
        max_tokens=args.max_tokens,
        index_kind=args.index_kind,
        device=args.device,
    )
    out = build_datastore(sents, args.out, cfg, overwrite=args.overwrite, progress=not args.quiet)
    print(f"data store: {out}")
    return 0


def cmd_train(args: argparse.Namespace) -> int:
    from ralm.surealm.train import TrainConfig, train

    cfg = TrainConfig(
        datastore=args.datastore,
        out=args.out,
        lm=args.lm,
        retrieval=not args.no_retrieval,
        k=args.k,
        delta=args.delta,
        steps=args.steps,
        batch_size=args.batch_size,
        lr=args.lr,
        lr_memory=args.lr_memory,
        memory_init=args.memory_init,
        memory_gain=args.memory_gain,
        memory_window=args.memory_window,
        init_from=args.init_from,
        warmup_steps=args.warmup_steps,
        schedule=args.schedule,
        eval_every=args.eval_every,
        seed=args.seed,
        device=args.device,
        autocast=args.autocast,
    )
    out = train(cfg, overwrite=args.overwrite, progress=not args.quiet)
    info = json.loads((out / "train.json").read_text(encoding="utf-8"))
    v = info.get("valid", {})
    print(
        f"model: {out} (best at step {info.get('best_step')}: valid token ppl {v.get('token_ppl', float('nan')):.2f}, "
        f"word ppl {v.get('word_ppl', float('nan')):.2f})"
    )
    return 0


def evaluate_models(
    models: list[str], split: str, datastore: str | None, knnlm: str | None, device: str, knn_k: int = 64
) -> list[dict]:
    """One row per model (and a kNN-LM row on top of `knnlm`) on `split`."""
    from ralm.surealm.knnlm import KnnLM
    from ralm.surealm.train import evaluate, load_trained

    rows = []
    for path in models:
        model, _tok, store, batcher = load_trained(path, datastore, device)
        c = evaluate(model, batcher, store.split_ids(split))
        kind = "surealm" if model.config.retrieval else "no retrieval"
        rows.append({"model": path, "kind": kind, **c.as_dict()})
    if knnlm:
        model, _tok, store, batcher = load_trained(knnlm, datastore, device)
        knn = KnnLM(model, batcher, k=knn_k)
        size = knn.build(store.split_ids("train"))
        lam, temp, _ = KnnLM.tune(knn.scores(store.split_ids("valid")))
        c = knn.scores(store.split_ids(split)).perplexity(lam, temp)
        rows.append(
            {
                "model": knnlm,
                "kind": f"kNN-LM (k={knn_k}, lambda={lam}, T={temp}, {size:,} contexts)",
                **c.as_dict(),
            }
        )
    return rows


def format_rows(rows: list[dict], split: str) -> str:
    head = f"{'model':<40} {'kind':<48} {'token ppl':>10} {'word ppl':>10} {'tokens':>8} {'words':>8}"
    lines = [f"{split} perplexity", head, "-" * len(head)]
    for r in rows:
        lines.append(
            f"{r['model'][-40:]:<40} {r['kind'][:48]:<48} {r['token_ppl']:>10.3f} {r['word_ppl']:>10.3f} "
            f"{r['tokens']:>8} {r['words']:>8}"
        )
    return "\n".join(lines)


def cmd_evaluate(args: argparse.Namespace) -> int:
    rows = evaluate_models(args.models, args.split, args.datastore, args.knnlm, args.device, args.knn_k)
    print(format_rows(rows, args.split))
    if args.json_out:
        p = Path(args.json_out)
        tmp = p.with_name(p.name + ".tmp")
        tmp.write_text(json.dumps({"split": args.split, "rows": rows}, indent=2) + "\n", encoding="utf-8")
        tmp.replace(p)
        print(f"written: {p}")
    return 0


def cmd_generate(args: argparse.Namespace) -> int:
    from ralm.surealm.generate import describe_retrievals, generate
    from ralm.surealm.train import load_trained

    if not args.prompt.strip():
        raise RalmError("the prompt is empty; give the start of a sentence")
    model, tok, store, _ = load_trained(args.model, args.datastore, args.device)
    res = generate(
        model,
        tok,
        store,
        args.prompt,
        strategy=args.strategy,
        max_new_tokens=args.max_new_tokens,
        top_p=args.top_p,
        temperature=args.temperature,
        num_beams=args.beams,
        num_return_sequences=args.num_return,
        seed=args.seed,
    )
    for t in res.texts:
        print(f"{args.prompt} {t}".strip())
    if args.show_retrievals:
        if not model.config.retrieval:
            print("(no retrieval: a baseline model)")
        else:
            print("\nretrievals (every delta tokens):")
            print("\n".join(describe_retrievals(res.retriever, tok, args.show_entries)))
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    top = sub.add_parser("surealm", help="SUREALM: suffix retrieval-augmented causal LM")
    ss = top.add_subparsers(dest="surealm_command", metavar="SUBCOMMAND")
    top.set_defaults(func=lambda a: (top.print_help(), 2)[1])

    p = ss.add_parser("datastore", help="sentences -> prefix/suffix data store + offline top-K retrieval")
    p.add_argument(
        "inputs", nargs="*", help="JSONL ({text, group?, split?}) or text files (one sentence a line)"
    )
    p.add_argument("--sample", help="chitchat: the chitchat-dataset conversations")
    p.add_argument("--out", required=True)
    p.add_argument("--lm", default="minilm", help="LM whose tokens are split: minilm | smollm2 | DIR")
    p.add_argument("--encoder", default=None, help="sentence transformer directory (default: bundled MiniLM)")
    p.add_argument("--m", type=int, default=10, help="suffix truncation in tokens (SUREALM: 10)")
    p.add_argument(
        "--include-current-word", action="store_true",
        help="suffixes start at the current word w_i (the paper's section 5 variant; default: w_i excluded)",
    )  # fmt: skip
    p.add_argument("--k", type=int, default=8, help="neighbours kept per prefix (SUREALM: 8)")
    p.add_argument("--max-tokens", type=int, default=64, help="LM tokens kept per sentence")
    p.add_argument("--limit-groups", type=int, default=None, help="only the first N conversations/groups")
    p.add_argument("--valid-frac", type=float, default=0.05)
    p.add_argument("--test-frac", type=float, default=0.05)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--index-kind", default="flat")
    p.add_argument("--device", default="cpu")
    p.add_argument("--overwrite", action="store_true")
    p.add_argument("--quiet", action="store_true")
    p.set_defaults(func=cmd_datastore)

    p = ss.add_parser("train", help="train SUREALM (or --no-retrieval, the baseline) on a data store")
    p.add_argument("datastore")
    p.add_argument("--out", required=True)
    p.add_argument(
        "--lm", default="minilm", help="backbone: minilm | smollm2 | DIR (the data store's tokenizer)"
    )
    p.add_argument("--no-retrieval", action="store_true", help="the same LM without retrieval (baseline)")
    p.add_argument(
        "--init-from", default=None,
        help="a trained run (e.g. the --no-retrieval baseline) whose LM weights start this run",
    )  # fmt: skip
    p.add_argument("--k", type=int, default=8)
    p.add_argument("--delta", type=int, default=1)
    p.add_argument("--steps", type=int, default=1000)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--lr", type=float, default=1e-4)
    p.add_argument("--lr-memory", type=float, default=None)
    p.add_argument(
        "--memory-init", choices=["zero", "identity"], default="zero",
        help="zero: memory starts inert (default); identity: embeddings enter each layer as they are (paper eqs. 4-5)",
    )  # fmt: skip
    p.add_argument(
        "--memory-gain", type=float, default=None,
        help="starting gain of the memory LayerNorms (default: 0 with zero, 1 with identity)",
    )  # fmt: skip
    p.add_argument(
        "--memory-window", type=int, default=None,
        help="each position sees only the latest W retrievals (default: all of them, as in eq. 6)",
    )  # fmt: skip
    p.add_argument("--warmup-steps", type=int, default=100)
    p.add_argument("--schedule", default="linear")
    p.add_argument("--eval-every", type=int, default=250)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default="auto")
    p.add_argument("--autocast", default="auto")
    p.add_argument("--overwrite", action="store_true")
    p.add_argument("--quiet", action="store_true")
    p.set_defaults(func=cmd_train)

    p = ss.add_parser("evaluate", help="token- and word-level perplexity of models (and kNN-LM) on a split")
    p.add_argument("models", nargs="+")
    p.add_argument("--split", default="test", choices=("train", "valid", "test"))
    p.add_argument("--datastore", default=None, help="default: the one each model was trained with")
    p.add_argument(
        "--knnlm", default=None, help="a (baseline) model to run as kNN-LM over the training split"
    )
    p.add_argument("--knn-k", type=int, default=64)
    p.add_argument("--device", default="auto")
    p.add_argument("--json-out", default=None)
    p.set_defaults(func=cmd_evaluate)

    p = ss.add_parser("generate", help="continue a prompt, retrieving suffixes every delta tokens")
    p.add_argument("model")
    p.add_argument("prompt")
    p.add_argument("--strategy", default="greedy", choices=("greedy", "top-p", "beam"))
    p.add_argument("--max-new-tokens", type=int, default=20)
    p.add_argument("--top-p", type=float, default=0.9)
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--beams", type=int, default=4)
    p.add_argument("--num-return", type=int, default=1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--show-retrievals", action="store_true", help="print what was retrieved at each step")
    p.add_argument("--show-entries", type=int, default=3, help="entries shown per retrieval")
    p.add_argument("--datastore", default=None)
    p.add_argument("--device", default="auto")
    p.set_defaults(func=cmd_generate)
