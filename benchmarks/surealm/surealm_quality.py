"""Quality (SUREALM's headline): held-out perplexity of SUREALM vs the same backbone without retrieval.

Data: the chitchat-dataset conversations (`--groups` of them), every turn a sentence, duplicates
removed, train/valid/test split by conversation. Data store: MiniLM tokens, all-MiniLM-L6-v2
prefix/suffix embeddings, m=10, K=8 (SUREALM §4.2), exact inner-product index.
Models: MiniLM run as a causal LM with a fresh LM head, trained the same number of steps with
the same batches, learning rate and seed, with retrieval (K=8, delta=1) and without; the checkpoint
with the lowest validation perplexity is kept for each (as the paper does). kNN-LM on top of the
baseline (k nearest training contexts; lambda and temperature tuned on validation) in the same table.

Also recorded: data store build throughput (entries/s) and bytes per entry.

Run: python -m benchmarks.surealm.surealm_quality [--groups 800] [--steps 3000]
Writes benchmarks/results/surealm_quality.json. On a GPU (gpu/stages/surealm.py): --sentences (the
same conversations written out, splits fixed), --device cuda (the data store's encoder) and
--parallel (the two runs train at once: one small LM leaves the GPU mostly idle).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import time
from dataclasses import asdict
from pathlib import Path

from benchmarks.common import pick, script_command, write_result

# the TrainConfig settings given by flags of the same names (add_shared_flags), surealm_retrieves' too
TRAINING = ("k", "steps", "batch_size", "lr", "eval_every")


def add_shared_flags(ap: argparse.ArgumentParser, *, groups: int, steps: int) -> None:
    """The flags of the SUREALM benchmarks that build their data store and train their runs
    themselves (this one and surealm_retrieves): the data (--groups, --sentences, --device),
    --parallel, the TRAINING settings and the kNN-LM's --knn-k."""
    ap.add_argument("--groups", type=int, default=groups, help="chitchat conversations used")
    ap.add_argument("--sentences", default=None, help="JSONL of sentences instead of the chitchat sample")
    ap.add_argument("--device", default="cpu", help="device of the data store's sentence encoder")
    ap.add_argument("--parallel", action="store_true", help="train the runs at once, one process each")
    ap.add_argument("--steps", type=int, default=steps)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--lr", type=float, default=1e-4)
    ap.add_argument("--k", type=int, default=8)
    ap.add_argument("--eval-every", type=int, default=500)
    ap.add_argument("--knn-k", type=int, default=64)


def training(args: argparse.Namespace) -> dict:
    """The TrainConfig settings of the TRAINING flags, TensorBoard off."""
    return {**pick(args, *TRAINING), "tensorboard": False}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_shared_flags(ap, groups=800, steps=3000)
    ap.add_argument("--delta", type=int, default=1)
    ap.add_argument("--work", default="/tmp/ralm-bench-surealm")
    ap.add_argument("--rebuild", action="store_true")
    ap.add_argument("--memory-init", default="zero", choices=["zero", "identity"])
    ap.add_argument("--memory-gain", type=float, default=None, help="starting gain of the memory LayerNorms")
    ap.add_argument("--memory-window", type=int, default=None, help="latest retrievals each position sees")
    ap.add_argument("--lr-memory", type=float, default=None, help="lr of the memory maps (default 10 x --lr)")
    ap.add_argument(
        "--include-current-word",
        action="store_true",
        help="SUREALM's data store keeps the current word in the suffix (the paper's section 5 variant)",
    )
    ap.add_argument(
        "--init-from",
        default=None,
        help="a finished run under --work (e.g. baseline): both runs start from its LM weights (two-stage)",
    )
    ap.add_argument("--name", default="surealm_quality", help="results/NAME.json")
    ap.add_argument(
        "--reuse",
        action="store_true",
        help="keep a run under --work that finished with the same settings (its time is not remeasured)",
    )
    args = ap.parse_args()

    from ralm.surealm.datastore import Datastore
    from ralm.surealm.datastore_build import DatastoreConfig, build_datastore
    from ralm.surealm.evaluation import evaluate_models, format_rows
    from ralm.surealm.sentences import read_sentences
    from ralm.surealm.train import TrainConfig

    work = Path(args.work)
    ds = work / (Path(args.sentences).stem if args.sentences else f"chitchat-{args.groups}")

    def ensure_store(path: Path, cfg: DatastoreConfig) -> None:
        if args.rebuild or not (path / "manifest.json").is_file():
            sents = read_sentences([args.sentences or "chitchat"], limit_groups=args.groups)
            build_datastore(sents, path, cfg, overwrite=True, progress=False)

    ensure_store(ds, DatastoreConfig(k=args.k, device=args.device))
    sds = ds  # the retrieval run's data store; the baseline needs only the sentences and tokens of `ds`
    if args.include_current_word:
        sds = ds.with_name(ds.name + "-cw")
        ensure_store(sds, DatastoreConfig(k=args.k, include_current_word=True, device=args.device))
    store = Datastore(sds)
    seconds = {}
    sname = "surealm" + ("" if args.memory_init == "zero" else f"-{args.memory_init}")
    sname += f"-lrm{args.lr_memory:g}" if args.lr_memory is not None else ""
    sname += f"-gain{args.memory_gain:g}" if args.memory_gain is not None else ""
    sname += f"-win{args.memory_window}" if args.memory_window is not None else ""
    sname += "-cw" if args.include_current_word else ""
    bname = "baseline"
    init = None
    if args.init_from:
        init = str(work / args.init_from)
        sname, bname = f"{sname}-from-{args.init_from}", f"baseline-from-{args.init_from}"
    runs = {sname: True, bname: False}
    todo = {}
    for name, retrieval in runs.items():
        cfg = TrainConfig(
            datastore=str(sds if retrieval else ds),
            out=str(work / name),
            retrieval=retrieval,
            delta=args.delta,
            init_from=init,
            **training(args),
            **(
                dict(
                    memory_init=args.memory_init,
                    memory_gain=args.memory_gain,
                    memory_window=args.memory_window,
                    lr_memory=args.lr_memory,
                )
                if retrieval
                else {}
            ),
        )
        done = work / name / "train.json"
        if args.reuse and done.is_file():
            # a saved config lacks the fields added after it was written: those had their defaults;
            # `lm` is resolved from the data store at train time, so it is left out
            old = {**asdict(TrainConfig()), **json.loads(done.read_text())["config"], "lm": None}
            if old == {**asdict(cfg), "lm": None}:
                print(f"reusing {work / name}")
                seconds[name] = None
                continue
        todo[name] = cfg
    if args.parallel and len(todo) > 1:
        import multiprocessing as mp
        from concurrent.futures import ProcessPoolExecutor

        with ProcessPoolExecutor(
            len(todo), mp_context=mp.get_context("spawn"), initializer=die_with_parent
        ) as pool:
            jobs = {name: pool.submit(timed_train, cfg) for name, cfg in todo.items()}
            seconds.update({name: job.result() for name, job in jobs.items()})
    else:
        seconds.update({name: timed_train(cfg) for name, cfg in todo.items()})
    rows = evaluate_models(
        [str(work / n) for n in runs],
        "test",
        None,
        str(work / bname),
        "auto",
        args.knn_k,
    )
    print(format_rows(rows, "test"))
    sure, base, knn = rows
    if sure["tokens"] != base["tokens"]:
        raise SystemExit(
            f"the two runs were scored on different test tokens ({sure['tokens']} vs {base['tokens']})"
        )
    valid = {
        n: json.loads((work / m / "train.json").read_text())["valid"]
        for n, m in (("surealm", sname), ("baseline", bname))
    }
    m = store.manifest
    write_result(
        args.name,
        script_command(__file__),
        {
            "test_token_ppl_surealm": sure["token_ppl"],
            "test_token_ppl_baseline": base["token_ppl"],
            "test_token_ppl_knnlm": knn["token_ppl"],
            "test_word_ppl_surealm": sure["word_ppl"],
            "test_word_ppl_baseline": base["word_ppl"],
            "test_word_ppl_knnlm": knn["word_ppl"],
            "test_ppl_reduction_surealm_vs_baseline": 1.0 - sure["token_ppl"] / base["token_ppl"],
            "test_ppl_reduction_knnlm_vs_baseline": 1.0 - knn["token_ppl"] / base["token_ppl"],
            "valid_token_ppl_surealm": valid["surealm"]["token_ppl"],
            "valid_token_ppl_baseline": valid["baseline"]["token_ppl"],
            "test_tokens": sure["tokens"],
            "test_words": sure["words"],
            "test_sentences": sure["sentences"],
            "train_sentences": m["split_sentences"]["train"],
            "datastore_entries": m["entries"],
            "datastore_entries_per_second": m["entries_per_second"],
            "datastore_build_seconds": m["seconds"]["total"],
            "datastore_bytes_per_entry": m["bytes_per_entry"],
            "train_seconds_surealm": seconds[sname],
            "train_seconds_baseline": seconds[bname],
        },
        {"test_ppl_reduction_surealm_vs_baseline": ">= 0.07"},
        settings=vars(args),
        knnlm=knn["kind"],
    )


def die_with_parent() -> None:
    """--parallel's process initializer: end when the script ends (a time limit that stops the script
    would otherwise leave both runs training)."""
    import ctypes
    import signal

    with contextlib.suppress(OSError, AttributeError):  # Linux only: PR_SET_PDEATHSIG
        ctypes.CDLL(None).prctl(1, signal.SIGKILL)


def timed_train(cfg) -> float:
    """Seconds `ralm.surealm.train.train(cfg)` took (a top-level function: --parallel runs it in a process)."""
    from ralm.surealm.train import train

    t = time.perf_counter()
    train(cfg, overwrite=True, progress=False)
    return time.perf_counter() - t


if __name__ == "__main__":
    main()
