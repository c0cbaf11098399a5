"""SUREALM in the dialogue world (issue 64): is the memory used when it holds the answer?

The world (`ralm.worlds.dialogues`): invented keepers, each keeping one everyday object in one of a
few invented places, talked about in two-turn conversations (a question, a reply that names the
keeper, the object and the place); every fact in --conversations training conversations, each in
a wording of its own, and the valid and test facts once more in a held-out wording. A held-out
reply's object and place are in the data store (the keeper's other sentences) and not in the turn.

Models. The LM is a small BERT run as a causal LM (`write_world_lm`: --layers layers of hidden
--hidden, random weights) over the world's own WordPiece vocabulary (`world_vocabulary`, about 1,300
pieces); the data store's encoder is the bundled all-MiniLM-L6-v2, as in every SUREALM run of ralm.
Why not MiniLM as the LM, the backbone of benchmarks/surealm: on this machine one step of 32
sentences costs it about 2.4 s, most of it in its 30,522-way output layer and softmax, so four runs
would get about 150 steps each in the half hour; the world LM takes about 0.1 s (0.3 s with
memory) and has nothing pre-trained to lose, every word of the world being invented or a template's.

Runs, all `ralm surealm train` on one data store with the same steps, batches, learning rate and
seed (their model of lowest validation perplexity is scored on test with `ralm surealm evaluate`):
  surealm        the memory through the gated cross-attention pathway (gates from 0)
  no_retrieval   --no-retrieval: the same LM without memory
  random         --neighbours random: K random training entries a retrieval (the control for retrieval)
  null           --neighbours null: the slots there, their embeddings zero (the control for slots)
All four read the memory through --memory-window 1 (each position sees the latest retrieval only):
the BERT backbone has no relative positions, so without a window the block fetched at the place's
position is one of up to 14 blocks the cross-attention cannot tell apart except by content.

Also measured: the step-0 ratio (a fresh SUREALM model against its own backbone on the test split:
the memory must be inert), the gates' opening (mean |tanh g| at every evaluation of the surealm run,
and per layer at the end), and each run's NLL on the test replies' object and place pieces against
the other tokens (where the memory can help and where it cannot).

Writes benchmarks/results/world_surealm.json (--name). Run:
  python -m benchmarks.worlds.surealm_world [--facts 400] [--steps 1000] [--work runs/worlds/surealm/bench]
A finished stage (world, LM, data store, each run) is kept under --work and not redone.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from benchmarks.common import log, offline, pick, ralm, script_command, write_result

offline()

# run name -> its `ralm surealm train` options beside the shared ones
RUNS: dict[str, list[str]] = {
    "surealm": [],
    "no_retrieval": ["--no-retrieval"],
    "random": ["--neighbours", "random"],
    "null": ["--neighbours", "null"],
}


def answer_nll(run: Path, facts: list[dict], split: str = "test") -> dict[str, float]:
    """Mean NLL (nats) of the trained `run` on the test replies' pieces, by kind: "object" (the object
    word), "place" (every piece of the place), "other" (every other prediction of the replies,
    end of sentence included)."""
    from ralm.surealm.evaluation import sentence_nll
    from ralm.surealm.train import load_trained

    _, tok, store, _ = load_trained(run, device="cpu")
    by_keeper = {f["keeper"].lower(): f for f in facts}
    texts = store.sentences().column("text").to_pylist()
    replies = []
    for sid in store.split_ids(split):
        words = texts[sid].lower().split()
        fact = next((by_keeper[w] for w in words if w in by_keeper), None)
        if fact is not None and fact["place"].lower() in words:
            replies.append((int(sid), fact))
    sums = {"object": [0.0, 0], "place": [0.0, 0], "other": [0.0, 0]}
    scored = sentence_nll(str(run), [s for s, _ in replies])
    for (_, fact), (toks, nll) in zip(replies, scored, strict=True):
        kind = ["other"] * len(nll)
        for name in ("object", "place"):
            piece = tok(fact[name], add_special_tokens=False)["input_ids"]
            at = max(i for i in range(len(toks)) if toks[i : i + len(piece)] == piece)
            kind[at : at + len(piece)] = [name] * len(piece)
        for value, kd in zip(nll, kind, strict=True):
            sums[kd][0] += value
            sums[kd][1] += 1
    return {k: s / max(n, 1) for k, (s, n) in sums.items()}


def place_in_memory(datastore: Path, lm: Path, facts: list[dict], split: str = "test") -> dict[str, float]:
    """At each held-out reply's place, what the data store hands the model: the share of replies whose
    top-K neighbours (of the prefix that ends just before the place) include a sentence of the same
    keeper, and whose neighbours' stored suffixes hold the place's first piece (anywhere / first)."""
    from ralm.models.tokenizers import load_lm_tokenizer
    from ralm.surealm.datastore import Datastore

    ds = Datastore(datastore)
    tok, _ = load_lm_tokenizer(str(lm))
    texts = ds.sentences().column("text").to_pylist()
    by_keeper = {f["keeper"].lower(): f for f in facts if f["held_out"] == split}
    counts = {"replies": 0, "keeper_sentence": 0, "place_in_suffix": 0, "suffix_starts_with_place": 0}
    for sid in ds.split_ids(split):
        words = texts[sid].lower().split()
        fact = next((by_keeper[w] for w in words if w in by_keeper), None)
        if fact is None or fact["place"].lower() not in words:
            continue
        toks = ds.tokens(sid).tolist()
        piece = tok(fact["place"], add_special_tokens=False)["input_ids"]
        at = max(i for i in range(len(toks)) if toks[i : i + len(piece)] == piece)
        entries = [int(e) for e in ds.sentence_neighbors(sid)[at - 1] if e >= 0]
        suffixes = [ds.entry_tokens(e)[1].tolist() for e in entries]
        counts["replies"] += 1
        counts["keeper_sentence"] += any(
            fact["keeper"].lower() in texts[ds.entry(e)[0]].lower() for e in entries
        )
        counts["place_in_suffix"] += any(piece[0] in x for x in suffixes)
        counts["suffix_starts_with_place"] += any(x[:1] == piece[:1] for x in suffixes)
    n = max(counts.pop("replies"), 1)
    return {f"memory_at_place_{k}": v / n for k, v in counts.items()}


def gate_curve(run: Path) -> list[list[float]]:
    """[step, mean |tanh g|] at every evaluation of a cross-pathway run (from its metrics.jsonl)."""
    from ralm.train.logging import METRICS_FILE, read_metric_rows

    return [
        [r["step"], r["gate_mean_abs"]] for r in read_metric_rows(run / METRICS_FILE) if "gate_mean_abs" in r
    ]


def valid_curve(run: Path) -> list[list[float]]:
    from ralm.train.logging import METRICS_FILE, read_metric_rows

    return [
        [r["step"], r["valid_token_ppl"]]
        for r in read_metric_rows(run / METRICS_FILE)
        if "valid_token_ppl" in r
    ]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--facts", type=int, default=400, help="facts (keepers) of the world")
    ap.add_argument("--places", type=int, default=40, help="invented places the facts' places are drawn from")
    ap.add_argument("--conversations", type=int, default=2, help="training conversations a fact")
    ap.add_argument("--valid-facts", type=int, default=50)
    ap.add_argument("--test-facts", type=int, default=100)
    ap.add_argument("--world-seed", type=int, default=0)
    ap.add_argument("--hidden", type=int, default=128, help="the world LM's hidden size")
    ap.add_argument("--layers", type=int, default=2, help="the world LM's layers")
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--k", type=int, default=8)
    ap.add_argument("--memory-window", type=int, default=1, help="0: every block (eq. 6)")
    ap.add_argument("--eval-every", type=int, default=100)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--runs", default=",".join(RUNS))
    ap.add_argument("--work", default="runs/worlds/surealm/bench")
    ap.add_argument("--name", default="world_surealm")
    args = ap.parse_args()
    t_start = time.perf_counter()

    from ralm.surealm.evaluation import step0_ratio
    from ralm.worlds.dialogues import (
        DialogueWorldConfig,
        make_world,
        verbatim_leaks,
        world_vocabulary,
        write_world,
    )
    from ralm.worlds.world_lm import write_world_lm

    work = Path(args.work)
    world_cfg = DialogueWorldConfig(
        **pick(
            args,
            "facts",
            "places",
            "valid_facts",
            "test_facts",
            train_conversations="conversations",
            seed="world_seed",
        )
    )
    world = make_world(world_cfg)
    leaks = verbatim_leaks(world.rows)
    if leaks:
        raise SystemExit(f"held-out sentences in training: {leaks[:3]}")
    data = write_world(world, work / "world")
    lm = write_world_lm(work / "lm", world_vocabulary(), args.hidden, args.layers, seed=args.seed)
    ds = work / "datastore"
    seconds: dict[str, float] = {}
    if not (ds / "manifest.json").is_file():
        t = time.perf_counter()
        ralm("surealm", "datastore", data, "--lm", lm, "--k", args.k, "--out", ds, "--overwrite", "--quiet")
        seconds["datastore"] = time.perf_counter() - t
    window = args.memory_window or None
    s0 = step0_ratio(str(ds), str(lm), args.k, window)
    log(f"step 0: {s0}")
    names = [n for n in args.runs.split(",") if n]
    shared = [
        "--lm",
        lm,
        "--k",
        args.k,
        "--steps",
        args.steps,
        "--batch-size",
        args.batch_size,
        "--lr",
        args.lr,
    ]
    shared += ["--eval-every", args.eval_every, "--seed", args.seed, "--device", "cpu", "--autocast", "off"]
    for name in names:
        out = work / name
        if (out / "train.json").is_file() and (out / "done").is_file():
            continue
        t = time.perf_counter()
        # the memory window is a setting of the memory: the LM without it takes none
        opts = [
            *shared,
            *(["--memory-window", args.memory_window] if window and name != "no_retrieval" else []),
        ]
        ralm("surealm", "train", ds, "--out", out, *opts, *RUNS[name], "--overwrite", "--quiet")
        seconds[f"train_{name}"] = time.perf_counter() - t
        (out / "done").write_text(f"{seconds[f'train_{name}']}\n")
    ralm(
        "surealm",
        "evaluate",
        *[work / n for n in names],
        "--split",
        "test",
        "--device",
        "cpu",
        "--json-out",
        work / "test.json",
    )
    rows = json.loads((work / "test.json").read_text())["rows"]
    ppl = {n: r["token_ppl"] for n, r in zip(names, rows, strict=True)}
    nll = {n: answer_nll(work / n, [f.__dict__ for f in world.facts]) for n in names}
    for n in names:
        log(f"{n}: test ppl {ppl[n]:.3f}, NLL object/place/other {nll[n]}")

    from ralm.surealm.model import SurealmLM

    m: dict[str, float] = {"surealm_world_step0_ppl_ratio": s0["ratio"]}
    m.update(place_in_memory(ds, lm, [f.__dict__ for f in world.facts]))
    if "no_retrieval" in ppl and "surealm" in ppl:
        m["surealm_world_ppl_over_no_retrieval"] = ppl["surealm"] / ppl["no_retrieval"]
    if "random" in ppl and "surealm" in ppl:
        m["surealm_world_ppl_over_random"] = ppl["surealm"] / ppl["random"]
    for n in names:
        m[f"test_token_ppl_{n}"] = ppl[n]
        for kind, v in nll[n].items():
            m[f"test_reply_{kind}_nll_{n}"] = v
        m[f"best_step_{n}"] = json.loads((work / n / "train.json").read_text())["best_step"]
    extra: dict = {"curves": {n: valid_curve(work / n) for n in names}, "step0": s0, "settings": vars(args)}
    if "surealm" in names:
        extra["gates"] = gate_curve(work / "surealm")
        gates_end = SurealmLM.load(work / "surealm")[0].gates()
        extra["gates_end_per_layer"] = gates_end
        m["gate_mean_abs_end"] = sum(abs(g) for g in gates_end) / len(gates_end)
    man = json.loads((ds / "manifest.json").read_text())
    m["steps"] = args.steps
    m["train_sentences"] = man["split_sentences"]["train"]
    m["test_sentences"] = man["split_sentences"]["test"]
    m["datastore_entries"] = man["entries"]
    m["datastore_seconds"] = man["seconds"]["total"]
    m["wall_seconds"] = time.perf_counter() - t_start
    extra["stage_seconds"] = seconds
    targets = {
        "surealm_world_step0_ppl_ratio": "between 0.9999 and 1.0001",
        "surealm_world_ppl_over_no_retrieval": "<= 0.7",
        "surealm_world_ppl_over_random": "<= 0.8",
    }
    write_result(args.name, script_command(__file__), m, targets, **extra)
    for k, v in m.items():
        log(f"{k} = {v:.4f}" if isinstance(v, float) else f"{k} = {v}")


if __name__ == "__main__":
    main()
