"""The LUKE world (issue 64, part 4): entity-aware NER where only the entity's identity tells its type.

The world (`ralm.worlds.entities`): invented names drawn alike for people, places and organisations;
a pre-training corpus where every entity is linked in sentences that reveal its type; NER sentences
whose contexts are the same for every type, with the test entities disjoint from the NER training
entities but in the entity vocabulary of pre-training. A tagger can find the names; only knowledge
learned in pre-training can type a test entity (one type in three by chance).

What carries the knowledge to NER: `ralm luke ner` follows LUKE, every candidate span a [MASK] entity,
so only what the encoder learned about the name's words reaches the classifier, which the words-only
span classifier of the same encoder shares (an early run: LUKE 30.3 F1, words-only 34.0). With
`--link-entities` (DaLUKE's string-match annotation at NER time) a span that names a vocabulary entity
enters as that entity, so its pre-trained embedding, where the type is stored, reaches the classifier.
The rows "luke" and "luke-reduced" link; "luke-mask" is the paper's [MASK] setting, the ablation that
shows the effect comes from the entity's identity.

Stages, each run with ralm's own commands as a user would and reused from --work when done:
1. world: `generate(EntityWorldConfig(seed))` written to WORK/world (corpus.jsonl, ner/, entities.tsv).
2. corpus: `ralm corpus build WORK/world/corpus.jsonl --chunk-size 64` (links only: no auto-annotation,
   no dates; every mention is linked).
3. pretrain: `ralm luke pretrain configs/luke_demo.toml` on that corpus, masked word + masked entity,
   the two stages of ralm's recipe (entity side first for half the steps at --entity-first-lr, then
   everything at 1e-4, re-warmed), separate softmaxes; at l = L (384, "luke") and l = --entity-width
   ("luke-reduced", DaLUKE's reduced entity dimension). Masked-entity accuracy over pre-training: the
   per-step training accuracy of metrics.jsonl in windows of --curve-window steps, and the accuracy on
   fixed masks of every chunk before the first step and after the last.
4. ner: the same data, seeds and budget for every row: `ralm luke ner --link-entities` for "luke" and
   "luke-reduced", `ralm luke ner` ([MASK] spans) for "luke-mask" on the "luke" run, and for the
   words-only span classifier (the "luke" run's encoder, the same head and budget, no entity
   tokens), and `ralm finetune ner` for the word-only token tagger (the bundled MiniLM, which every
   LUKE run starts from). Optional rows (--rows): "mlm-words-only-span", the words-only span
   classifier on a `--mode mlm` run (the same model and steps on the same words, no entity tokens),
   the strongest words-only reading of the corpus. With --probes, linear probes of where the pre-trained
   model keeps an entity's type (the [MASK] and the linked entity state, the word states, the entity
   table rows), fit on the NER training mentions and scored on the test mentions.
5. report: benchmarks/results/world_luke.json (--name): luke_world_f1_minus_words_only_span (>= 10),
   luke_world_f1_minus_token_tagger (>= 10), luke_world_reduced_dim_f1_cost (<= 2), each row's test
   precision/recall/F1 (mean and std over seeds), the masked-entity accuracy curve, steps and wall time.

Measured (2026-12-02, world_luke.json and its previous_runs). Defaults (100 pre-training steps): linked
LUKE 34.5 F1, [MASK] LUKE 31.3, words-only span 32.1, token tagger 21.7, reduced 34.0; masked-entity
accuracy 0.006 -> 0.45 (l = L), 0.006 -> 0.006 (l = 120). Every gold span is linked, but the entity table
held little type: a linear probe fit on the NER-train entities' rows types the test entities at 0.41
(chance 0.33); the masked-entity objective is solved through the name's visible word pieces, so the rows
learn the name more than the type. With `--facts-per-entity 4 --described-per-entity 4 --pretrain-steps
160 --entity-first-steps 100` (half the documents call the entity by its kind, "The company ...") the
rows do learn the type (table probe 0.93 at l = L, 0.94 at l = 120) but NER hardly moves: linked 36.5,
[MASK] 31.2, words-only 33.9, token 22.3, reduced 39.2 (f1_minus_words_only_span 2.6). Precision =
recall for the span rows (as many spans as names, every gold span linked): what is lost is the type, near
chance (one in three), so the bottleneck is now
the NER fine-tuning (100 steps over 72 training entities) reading the type from the linked entity, not
pre-training; the tiny-model test (tests/worlds/test_luke_world.py) shows the effect when it does
(linked 57.9 vs words-only 12.1).

Run: python -m benchmarks.worlds.luke_world [--work runs/worlds/luke/bench] [--seeds 1,2]
(about 30 minutes on one core of this machine's CPU, with OMP_NUM_THREADS=1).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any

from benchmarks.common import ROOT, logger, pick, ralm_logged, script_command, write_result
from benchmarks.luke.luke_entities import masked_entity_accuracy
from benchmarks.luke.luke_ner import budget as ner_budget
from benchmarks.luke.luke_speed import pretrain_argv

RALM = ROOT / ".venv" / "bin" / "ralm"
ROWS = ("luke", "luke-mask", "luke-reduced", "words-only-span", "token")
OPTIONAL_ROWS = ("mlm-words-only-span",)
log = logger(stdout=True)


def ralm(args: list[str], logf: Path) -> float:
    """Run `.venv/bin/ralm ARGS` (the installed command; `python -m ralm` when there is none), its output
    appended to `logf`; returns its wall time in seconds."""
    return ralm_logged(args, logf, program=[str(RALM)] if RALM.is_file() else None)


def timed(work: Path, stage: str, fn) -> float:
    """Run `fn()` (returns seconds) unless WORK/times.json has `stage`; the stage's seconds."""
    path = work / "times.json"
    times = json.loads(path.read_text()) if path.is_file() else {}
    if stage not in times:
        times[stage] = round(fn(), 1)
        path.write_text(json.dumps(times, indent=2) + "\n", encoding="utf-8")
    return times[stage]


# ----------------------------------------------------------------------------- stages 1-3
def make_world(args, work: Path) -> Path:
    from ralm.worlds.entities import EntityWorldConfig, generate, held_out_leaks

    world = work / "world"
    if not (world / "world.json").is_file():
        cfg = EntityWorldConfig(
            **pick(
                args,
                "entities_per_type",
                "facts_per_entity",
                "mentions_per_entity",
                "described_per_entity",
                seed="world_seed",
                ner_train_sentences="ner_train",
                ner_dev_sentences="ner_dev",
                ner_test_sentences="ner_test",
            )
        )
        generate(cfg).write(world)
    leaks = held_out_leaks(world)
    if leaks:
        raise SystemExit(f"{world}: the world leaks held-out entities: {leaks[0]}")
    return world


def build_corpus(work: Path, world: Path, logf: Path) -> tuple[Path, float]:
    corpus = work / "corpus"
    seconds = timed(
        work,
        "corpus",
        lambda: ralm(
            [
                "corpus",
                "build",
                str(world / "corpus.jsonl"),
                "--out",
                str(corpus),
                "--chunk-size",
                "64",
                "--no-auto-annotate",
                "--no-dates",
                "--overwrite",
                "--quiet",
            ],
            logf,
        ),
    )
    return corpus, seconds


def pretrain(args, corpus: Path, work: Path, row: str, logf: Path) -> tuple[Path, float]:
    """`ralm luke pretrain` for row luke (l = L), luke-reduced (l = --entity-width) or mlm (words only)."""
    run = work / "pretrain" / row
    sets = {
        "max_seq_length": 64,
        "checkpoint_every": 0,
        "keep_checkpoints": 1,
        "tensorboard": "false",
        "entity_attention": '"separate"',
        "entity_first_steps": args.pretrain_steps // 2
        if args.entity_first_steps < 0
        else args.entity_first_steps,
        "entity_first_lr": args.entity_first_lr,
        "lr": args.pretrain_lr,
        "mep_prob": args.mep_prob,
    }
    if row == "luke-reduced":
        sets["entity_hidden_size"] = args.entity_width
    flags = [x for k, v in sets.items() for x in ("--set", f"{k}={v}")]
    if row == "mlm":
        flags += ["--mode", "mlm"]
    cmd = [*pretrain_argv(corpus, run, args), "--overwrite", *flags]

    def go() -> float:
        log(f"pretrain {row}: {args.pretrain_steps} steps x {args.pretrain_batch} chunks")
        return ralm(cmd, logf)

    return run, timed(work, f"pretrain-{row}", go)


def mep_record(run: Path, window: int, max_chunks: int = 0) -> dict[str, Any]:
    """The masked-entity accuracy of a run: on fixed masks before the first step and after the last, and
    the per-step training accuracy (metrics.jsonl) averaged over windows of `window` steps."""
    path = run / "mep.json"
    if path.is_file():
        return json.loads(path.read_text())
    import torch

    from ralm.luke.io import load_model
    from ralm.luke.pretrain_run import prepare, read_run_config

    torch.set_num_threads(1)
    cfg = read_run_config(run)
    # fixed masks (generator [7, chunk id]) of the first `max_chunks` non-empty chunks (0 = all)
    n = max_chunks or None
    start = masked_entity_accuracy(prepare(cfg).model, Path(cfg.docstore), cfg, n)
    end = masked_entity_accuracy(load_model(run / "model"), Path(cfg.docstore), cfg, n)
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines() if x.strip()]
    steps = [r for r in rows if "mep_acc" in r]
    curve = []
    for lo in range(0, len(steps), window):
        part = steps[lo : lo + window]
        masked = sum(r["masked_entities"] for r in part)
        acc = sum(r["mep_acc"] * r["masked_entities"] for r in part) / max(masked, 1)
        loss = sum(r["mep_loss"] * r["masked_entities"] for r in part) / max(masked, 1)
        curve.append({"step": part[-1]["step"], "mep_acc": round(acc, 4), "mep_loss": round(loss, 4)})
    rec = {
        "fixed_mask_acc_start": start,
        "fixed_mask_acc_end": end,
        "fixed_mask_chunks": max_chunks or "all",
        "entity_vocab": next((r["entity_vocab"] for r in rows if "entity_vocab" in r), 0),
        "train_seconds": round(steps[-1]["elapsed_seconds"], 1) if steps else 0.0,
        "curve": curve,
    }
    path.write_text(json.dumps(rec, indent=2) + "\n", encoding="utf-8")
    return rec


# ----------------------------------------------------------------------------- probes
def mention_features(run: Path, world: Path, split: str) -> dict[str, Any]:
    """Every tagged mention of NER split `split` read by the pre-trained model of `run` as `ralm luke ner`
    reads it (a [MASK] entity over the name's word tokens) and, for comparison, with the entity's own
    vocabulary id in its place (what an entity linker would give). Per mention: the [MASK] entity state
    (l,), the linked entity state (l,), the first and last word states (2L,), whether the masked-entity
    head's argmax is the entity, the entity head's probability mass per type (3,), and the gold type."""
    import numpy as np
    import torch

    from ralm.luke.io import load_model
    from ralm.luke.ner_model import load_backbone
    from ralm.luke.vocab import MASK_ID, EntityVocabulary
    from ralm.worlds.entities import TYPES, read_conll, read_entities

    model = load_model(run / "model").eval()
    tok = load_backbone(str(run)).tokenizer
    vocab = EntityVocabulary.load(run / "entity_vocab.tsv")
    types = {e.name: e.type for e in read_entities(world)}
    by_type = [torch.tensor([vocab.id(n) for n, t in types.items() if t == typ]) for typ in TYPES]
    table = model.luke.entity_embeddings.entity_embeddings.weight
    M = model.config.max_mention_length
    out: dict[str, list] = {k: [] for k in ("mask", "linked", "words", "identified", "type_mass", "type")}
    for sent in read_conll(world / "ner" / f"{split}.conll"):
        words = [w for w, _ in sent]
        enc = tok(words, is_split_into_words=True, return_tensors="pt")
        word_ids = enc.word_ids(0)
        starts = [i for i, (_, t) in enumerate(sent) if t.startswith("B-")]
        for s in starts:
            e = s + 1
            while e < len(sent) and sent[e][1].startswith("I-"):
                e += 1
            name = " ".join(words[s:e])
            toks = [i for i, w in enumerate(word_ids) if w is not None and s <= w < e][:M]
            pos = torch.full((1, 1, M), -1)
            pos[0, 0, : len(toks)] = torch.tensor(toks)
            with torch.no_grad():
                w_states, masked = model.luke(
                    enc["input_ids"], enc["attention_mask"], torch.tensor([[MASK_ID]]), None, pos
                )
                _, linked = model.luke(
                    enc["input_ids"], enc["attention_mask"], torch.tensor([[vocab.id(name)]]), None, pos
                )
                probs = model.entity_predictions(masked, table)[0, 0].float().softmax(-1)
            out["mask"].append(masked[0, 0].numpy())
            out["linked"].append(linked[0, 0].numpy())
            out["words"].append(torch.cat([w_states[0, toks[0]], w_states[0, toks[-1]]]).numpy())
            out["identified"].append(int(probs.argmax()) == vocab.id(name))
            out["type_mass"].append([float(probs[ids].sum()) for ids in by_type])
            out["type"].append(TYPES.index(types[name]))
    return {k: np.asarray(v) for k, v in out.items()}


def linear_probe(x_train, y_train, x_test, y_test, steps: int = 300) -> float:
    """Test accuracy of a softmax regression (standardised inputs, Adam, weight decay 1e-3, seed 0) fit
    on (x_train (N, D), y_train (N,)) and scored on (x_test, y_test)."""
    import torch

    g = torch.Generator().manual_seed(0)
    xtr, xte = torch.tensor(x_train, dtype=torch.float32), torch.tensor(x_test, dtype=torch.float32)
    mu, sd = xtr.mean(0), xtr.std(0) + 1e-6
    xtr, xte = (xtr - mu) / sd, (xte - mu) / sd
    ytr, yte = torch.tensor(y_train), torch.tensor(y_test)
    lin = torch.nn.Linear(xtr.shape[1], int(max(ytr.max(), yte.max())) + 1)
    with torch.no_grad():
        lin.weight.copy_(torch.randn(lin.weight.shape, generator=g) * 0.01)
        lin.bias.zero_()
    opt = torch.optim.Adam(lin.parameters(), lr=1e-2, weight_decay=1e-3)
    for _ in range(steps):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(lin(xtr), ytr).backward()
        opt.step()
    return float((lin(xte).argmax(1) == yte).float().mean())


def probes(run: Path, world: Path) -> dict[str, float]:
    """Where the pre-trained model keeps an entity's type (see the module docstring), on the NER test
    mentions; the linear probes are fit on the NER training mentions (entities disjoint from test)."""
    path = run / "probes.json"
    if path.is_file():
        return json.loads(path.read_text())
    import numpy as np
    import torch

    from ralm.luke.io import load_model
    from ralm.luke.vocab import EntityVocabulary
    from ralm.worlds.entities import TYPES, read_entities

    torch.set_num_threads(1)
    tr, te = mention_features(run, world, "train"), mention_features(run, world, "test")
    ents = read_entities(world)
    vocab = EntityVocabulary.load(run / "entity_vocab.tsv")
    table = load_model(run / "model").luke.entity_embeddings.entity_embeddings.weight.detach().numpy()
    rows = {s: [e for e in ents if e.split == s] for s in ("train", "test")}
    res = {
        "test_identity_acc": float(te["identified"].mean()),
        "test_type_acc_via_entity_head": float((te["type_mass"].argmax(1) == te["type"]).mean()),
        "test_type_probe_mask_state": linear_probe(tr["mask"], tr["type"], te["mask"], te["type"]),
        "test_type_probe_linked_state": linear_probe(tr["linked"], tr["type"], te["linked"], te["type"]),
        "test_type_probe_word_states": linear_probe(tr["words"], tr["type"], te["words"], te["type"]),
        "test_type_probe_entity_table": linear_probe(
            table[[vocab.id(e.name) for e in rows["train"]]],
            np.array([TYPES.index(e.type) for e in rows["train"]]),
            table[[vocab.id(e.name) for e in rows["test"]]],
            np.array([TYPES.index(e.type) for e in rows["test"]]),
        ),
        "test_mentions": int(len(te["type"])),
    }
    path.write_text(json.dumps(res, indent=2) + "\n", encoding="utf-8")
    return res


# ----------------------------------------------------------------------------- stage 4
def budget(args) -> list[str]:
    """luke_ner's NER flags (`ralm luke ner` and `ralm finetune ner` both take them) at this world's
    fixed schedule, warmup ratio, weight decay and length, on every dev and test sentence of its data."""
    fixed = {"schedule": "linear", "warmup_ratio": 0.06, "weight_decay": 0.01, "max_length": 64}
    return ner_budget(argparse.Namespace(**vars(args), **fixed, max_eval=None), dataset="luke-world")


def ner(args, row: str, world: Path, work: Path, logf: Path) -> tuple[dict, float]:
    out = work / "ner" / row
    data = str(world / "ner")
    if row == "token":
        cmd = ["finetune", "ner", data, "--out", str(out), "--name", row, *budget(args)]
    else:
        run = {"luke": "luke", "luke-mask": "luke", "luke-reduced": "luke-reduced", "words-only-span": "luke"}
        run = run.get(row, "mlm")
        cmd = [
            "luke",
            "ner",
            data,
            "--model",
            str(work / "pretrain" / run),
            "--out",
            str(out),
            "--name",
            row,
            "--max-span-length",
            str(args.max_span_length),
            "--decode",
            args.decode,
            *(["--words-only"] if row.endswith("words-only-span") else []),
            *(["--link-entities"] if row in ("luke", "luke-reduced") else []),
            *budget(args),
        ]

    def go() -> float:
        log(f"ner {row}: seeds {args.seeds}")
        return ralm(cmd, logf)

    seconds = timed(work, f"ner-{row}", go)
    return json.loads((out / "results.json").read_text()), seconds


def summary(res: dict) -> dict[str, float]:
    """Mean and std over seeds of test precision, recall and F1 (results.json of `ralm finetune`/`luke ner`)."""
    seeds = res.get("seeds") or res.get("runs") or []
    out: dict[str, float] = {}
    for key in ("precision", "recall", "f1"):
        vals = [float(s["test"][key]) for s in seeds if key in s.get("test", {})]
        if vals:
            out[key] = statistics.mean(vals)
            out[f"{key}_std"] = statistics.stdev(vals) if len(vals) > 1 else 0.0
    out["seeds"] = float(len(seeds))
    out["steps"] = float(statistics.mean(s.get("steps", 0) for s in seeds)) if seeds else 0.0
    return out


def previous_runs(name: str) -> list[dict]:
    """The runs benchmarks/results/NAME.json recorded before this one (its command, date, metrics and
    world config, then its own previous_runs), so that a rerun keeps the earlier figures on record."""
    path = ROOT / "benchmarks" / "results" / f"{name}.json"
    if not path.is_file():
        return []
    old = json.loads(path.read_text())
    keep = {k: old[k] for k in ("command", "date", "metrics", "note") if k in old}
    if "world" in old:
        keep["world_config"] = old["world"].get("config")
    return [keep, *old.get("previous_runs", [])]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", default=str(ROOT / "runs" / "worlds" / "luke" / "bench"))
    ap.add_argument("--rows", default=",".join(ROWS), help=f"of {', '.join(ROWS + OPTIONAL_ROWS)}")
    ap.add_argument("--world-seed", type=int, default=0)
    ap.add_argument("--entities-per-type", type=int, default=50)
    ap.add_argument("--ner-train", type=int, default=400)
    ap.add_argument("--ner-dev", type=int, default=100)
    ap.add_argument("--ner-test", type=int, default=200)
    ap.add_argument("--facts-per-entity", type=int, default=6, help="type-revealing documents naming it")
    ap.add_argument("--mentions-per-entity", type=int, default=0, help="neutral documents naming it")
    ap.add_argument(
        "--described-per-entity",
        type=int,
        default=0,
        help="type-revealing documents calling it by its kind ('The company ...'), linked to it",
    )
    ap.add_argument("--pretrain-steps", type=int, default=100)
    ap.add_argument("--pretrain-batch", type=int, default=32)
    ap.add_argument("--pretrain-lr", type=float, default=1e-4)
    ap.add_argument("--entity-first-lr", type=float, default=1e-3)
    ap.add_argument(
        "--entity-first-steps", type=int, default=-1, help="entity-side-only steps (-1: half the steps)"
    )
    ap.add_argument("--mep-prob", type=float, default=0.5, help="entity masking rate (DaLUKE: 0.15)")
    ap.add_argument("--entity-width", type=int, default=120)
    ap.add_argument("--curve-window", type=int, default=10)
    ap.add_argument("--mep-chunks", type=int, default=256, help="chunks scored on fixed masks (0 = all)")
    ap.add_argument("--probes", action="store_true", help="also fit the linear probes (a few minutes)")
    ap.add_argument("--seeds", default="1,2")
    ap.add_argument("--epochs", type=float, default=2)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--lr", type=float, default=1e-4)
    ap.add_argument("--lr-head", type=float, default=1e-3)
    ap.add_argument("--max-span-length", type=int, default=2, help="names have at most 2 words")
    ap.add_argument("--decode", default="argmax", choices=("argmax", "threshold"))
    ap.add_argument("--name", default="world_luke")
    args = ap.parse_args()
    work = Path(args.work).resolve()
    work.mkdir(parents=True, exist_ok=True)
    logf = work / "log.txt"
    rows = args.rows.split(",")
    t0 = time.perf_counter()
    world = make_world(args, work)
    corpus, corpus_seconds = build_corpus(work, world, logf)
    seconds: dict[str, float] = {"corpus": corpus_seconds}
    extra: dict[str, Any] = {
        "settings": {k: str(v) for k, v in vars(args).items()},
        "world": json.loads((world / "world.json").read_text()),
    }
    metrics: dict[str, float] = {}
    runs = {
        "luke": "luke",
        "luke-mask": "luke",
        "luke-reduced": "luke-reduced",
        "words-only-span": "luke",
        "mlm-words-only-span": "mlm",
    }
    for run_row in dict.fromkeys(runs[r] for r in rows if r in runs):
        run, seconds[f"pretrain_{run_row}"] = pretrain(args, corpus, work, run_row, logf)
        if run_row == "mlm":
            continue
        m = mep_record(run, args.curve_window, args.mep_chunks)
        extra[f"masked_entity_{run_row}"] = m
        tag = "" if run_row == "luke" else "_reduced"
        metrics[f"luke_world_masked_entity_acc_start{tag}"] = m["fixed_mask_acc_start"]
        metrics[f"luke_world_masked_entity_acc_end{tag}"] = m["fixed_mask_acc_end"]
        if args.probes:
            pr = probes(run, world)
            extra[f"probes_{run_row}"] = pr
            for k, v in pr.items():
                metrics[f"luke_world_{k}{tag}"] = v
    for row in rows:
        res, seconds[f"ner_{row}"] = ner(args, row, world, work, logf)
        s = summary(res)
        extra[f"ner_{row}"] = s
        key = row.replace("-", "_")
        for k in ("f1", "f1_std", "precision", "recall", "steps"):
            if k in s:
                metrics[f"luke_world_{key}_{k}"] = s[k]
    f1 = {r: metrics.get(f"luke_world_{r.replace('-', '_')}_f1") for r in rows}
    if f1.get("luke") is not None and f1.get("words-only-span") is not None:
        metrics["luke_world_f1_minus_words_only_span"] = f1["luke"] - f1["words-only-span"]
    if f1.get("luke") is not None and f1.get("token") is not None:
        metrics["luke_world_f1_minus_token_tagger"] = f1["luke"] - f1["token"]
    if f1.get("luke") is not None and f1.get("luke-reduced") is not None:
        metrics["luke_world_reduced_dim_f1_cost"] = f1["luke"] - f1["luke-reduced"]
    if f1.get("luke") is not None and f1.get("luke-mask") is not None:
        metrics["luke_world_f1_linked_minus_mask"] = f1["luke"] - f1["luke-mask"]
    if f1.get("luke-mask") is not None and f1.get("words-only-span") is not None:
        metrics["luke_world_mask_f1_minus_words_only_span"] = f1["luke-mask"] - f1["words-only-span"]
    metrics["luke_world_pretrain_steps"] = float(args.pretrain_steps)
    metrics["luke_world_wall_seconds"] = round(time.perf_counter() - t0, 1)
    metrics["luke_world_stage_seconds_total"] = round(sum(seconds.values()), 1)
    extra["seconds"] = seconds
    targets = {
        "luke_world_f1_minus_words_only_span": ">= 10",
        "luke_world_f1_minus_token_tagger": ">= 10",
        "luke_world_reduced_dim_f1_cost": "<= 2",
    }
    extra["previous_runs"] = previous_runs(args.name)
    write_result(args.name, script_command(__file__), metrics, targets, **extra)
    for k, v in metrics.items():
        log(f"{k} = {v:.4f}")


if __name__ == "__main__":
    main()
