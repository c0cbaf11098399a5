"""Speed: a LUKE/DaLUKE pre-training step vs the plain MLM step of the same backbone on the same words.

Every model starts from the bundled MiniLM (`ralm.luke.pretrain_run.prepare`, as `ralm luke
pretrain` does) and trains with the library's own `ralm.luke.pretrain.train_step` (masking and
batch building, forward, mlm + mep loss, backward, clipping, fused AdamW, schedule) under the
runs' autocast. Step s of every model reads the same chunks with the same per-example mask
generators, so the word tokens and the masked words are identical; only the entity tokens differ
(mode = "mlm": none). Models:

  luke/<variant>   the four rows of DaLUKE's table (Baseline, +auto, +ent, +auto+ent)
  mlm              mode = "mlm": the same model with no entity tokens (E = 0), the ratio's baseline
  hf-bert          Hugging Face BertForMaskedLM on the mlm batches (labels=...), AdamW, clipping:
                   checks that the mlm baseline is not itself slow

They take turns step by step (the order rotates each round, so load on the shared machine hits
all alike) for --warmup + --repeats rounds; medians of the last --repeats are compared. Target
(issue 15): Baseline step <= 1.3x the mlm step.

`measure(...)` is called by luke_ner.py (its "speed" step); run alone it writes
benchmarks/results/luke_speed.json.

Run: python -m benchmarks.luke.luke_speed CORPUS [--batch-size 16] [--seq 128] [--repeats 10]
"""

from __future__ import annotations

import argparse
import statistics
import time
from dataclasses import fields
from pathlib import Path
from typing import Any

from benchmarks.common import ROOT, pick

CONFIG = ROOT / "configs" / "luke_demo.toml"
# name: (label, auto_annotation, reduced entity width)
VARIANTS: dict[str, tuple[str, bool, bool]] = {
    "baseline": ("Baseline", False, False),
    "auto": ("+auto", True, False),
    "ent": ("+ent", False, True),
    "auto+ent": ("+auto+ent", True, True),
}
# DaLUKE: l = 252 with L = 768 (256 rounded down to a multiple of its 12 heads); MiniLM: L = 384,
# 12 heads, so 128 rounded down to a multiple of 12
ENTITY_WIDTH = 120


def pretrain_argv(corpus: str | Path, run: str | Path, args: Any, seed: object = 42) -> list[str]:
    """`ralm luke pretrain` of CONFIG on `corpus` into `run`, args.pretrain_steps steps of
    args.pretrain_batch chunks, quietly: how every LUKE benchmark's pre-training command begins."""
    return [
        "luke",
        "pretrain",
        str(CONFIG),
        "--docstore",
        str(corpus),
        "--out",
        str(run),
        "--steps",
        str(args.pretrain_steps),
        "--batch-size",
        str(args.pretrain_batch),
        "--seed",
        str(seed),
        "--quiet",
    ]


def pretrain_collator(prep: Any, cfg: Any, with_entities: bool):
    """The LukeCollator over `prep`'s corpus (`ralm.luke.pretrain_run.prepare`) with the masking of the
    LukePretrainConfig `cfg`, as `ralm luke pretrain` builds it."""
    from ralm.luke.data import LukeCollator, MaskSettings

    # every setting but with_entities is the config's field of the same name
    masking = [f.name for f in fields(MaskSettings) if f.name != "with_entities"]
    settings = MaskSettings(**pick(cfg, *masking), with_entities=with_entities)
    return LukeCollator(prep.store, prep.spans, prep.vocab, prep.tok, settings)


def variant_settings(variant: str, entity_width: int = ENTITY_WIDTH) -> dict[str, Any]:
    """The LukePretrainConfig settings that make a row: auto_annotation and entity_hidden_size (l)."""
    _, auto, reduced = VARIANTS[variant]
    return {"auto_annotation": auto, "entity_hidden_size": entity_width if reduced else None}


def make_config(corpus: str | Path, variant: str | None, batch_size: int, seq: int, **kw: Any):
    """configs/luke_demo.toml with the corpus, batch, sequence length and a row's settings
    (variant None: mode = "mlm")."""
    from ralm.luke.pretrain_config import LukePretrainConfig

    width = kw.pop("entity_width", ENTITY_WIDTH)
    rows = variant_settings(variant, width) if variant else {"mode": "mlm"}
    return LukePretrainConfig.from_toml(
        CONFIG, docstore=str(corpus), out="", batch_size=batch_size, max_seq_length=seq, **rows, **kw
    )


class _Stepper:
    """One model, its optimiser and its batches; `step(s)` runs optimiser step s and returns seconds."""

    def __init__(self, cfg, hf: bool = False) -> None:
        import numpy as np
        import torch

        from ralm.luke.pretrain_run import prepare
        from ralm.models.precision import autocast_dtype
        from ralm.train.optim import adamw, param_groups, warmup_schedule

        self.cfg, self.dev = cfg, torch.device("cpu")
        self.ac = autocast_dtype(self.dev, cfg.autocast, torch.float32)
        prep = prepare(cfg)
        self.collator = pretrain_collator(prep, cfg, with_entities=cfg.mode == "luke")
        self.train_ids = np.flatnonzero(prep.store.lengths() > 0).astype(np.int64)
        self.model = prep.model
        if hf:
            from ralm.models.encoder import load_auto

            # quietly: the MLM head of a sentence-transformers checkpoint is new
            self.model = load_auto("BertForMaskedLM", prep.backbone)
        self.hf = hf
        self.model.train()
        self.params = sum(p.numel() for p in self.model.parameters())
        self.opt = adamw(param_groups(self.model, cfg.lr, cfg.weight_decay, name="speed"))
        self.sched = warmup_schedule(self.opt, "constant", 0, 10**6)
        self.entities = 0  # entity tokens seen (luke models)

    def step(self, s: int) -> float:
        import torch

        from ralm.luke.pretrain import train_step
        from ralm.models.precision import autocast_context
        from ralm.realm.data import batch_positions, example_rngs

        t0 = time.perf_counter()
        if not self.hf:
            train_step(
                self.model,
                self.opt,
                self.sched,
                self.collator,
                self.train_ids,
                self.cfg,
                s,
                self.dev,
                self.ac,
            )
        else:  # the same chunks and generators as train_step's micro-batch 0
            B = self.cfg.batch_size
            ids = batch_positions(self.train_ids, self.cfg.seed, (s - 1) * B, B)
            batch = self.collator(ids, example_rngs(self.cfg.seed, s, 0, range(B)))
            self.opt.zero_grad(set_to_none=True)
            with autocast_context(self.dev, self.ac):
                out = self.model(
                    input_ids=batch["input_ids"],
                    attention_mask=batch["attention_mask"],
                    labels=batch["mlm_labels"],
                )
            out.loss.backward()
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.cfg.max_grad_norm)
            self.opt.step()
            self.sched.step()
        return time.perf_counter() - t0


def measure(
    corpus: str | Path,
    *,
    variants: list[str] | None = None,
    batch_size: int = 16,
    seq: int = 128,
    repeats: int = 10,
    warmup: int = 2,
    entity_width: int = ENTITY_WIDTH,
    hf_reference: bool = True,
    log=print,
) -> dict[str, Any]:
    """Median step seconds per model and each LUKE variant's ratio to the mlm step (see the docstring)."""
    import torch

    variants = list(VARIANTS) if variants is None else variants
    steppers: dict[str, _Stepper] = {"mlm": _Stepper(make_config(corpus, None, batch_size, seq))}
    for v in variants:
        cfg = make_config(corpus, v, batch_size, seq, entity_width=entity_width)
        steppers[f"luke/{v}"] = _Stepper(cfg)
    if hf_reference:
        steppers["hf-bert"] = _Stepper(make_config(corpus, None, batch_size, seq), hf=True)
    names = list(steppers)
    times: dict[str, list[float]] = {n: [] for n in names}
    t_all = time.perf_counter()
    for r in range(warmup + repeats):
        order = names[r % len(names) :] + names[: r % len(names)]
        for n in order:
            t = steppers[n].step(r + 1)
            if r >= warmup:
                times[n].append(t)
        if r == 0:
            first = time.perf_counter() - t_all
            log(f"speed: first round {first:.1f} s; about {first * (warmup + repeats):.0f} s for all rounds")
    med = {n: statistics.median(ts) for n, ts in times.items()}
    out: dict[str, Any] = {
        "batch_size": batch_size,
        "seq": seq,
        "repeats": repeats,
        "warmup": warmup,
        "threads": torch.get_num_threads(),
        "autocast": str(steppers["mlm"].ac),
        "step_seconds_median": {n: round(v, 4) for n, v in med.items()},
        "step_seconds_min": {n: round(min(ts), 4) for n, ts in times.items()},
        "ratio_to_mlm": {v: round(med[f"luke/{v}"] / med["mlm"], 3) for v in variants},
        "parameters": {n: s.params for n, s in steppers.items()},
    }
    if hf_reference:
        out["mlm_to_hf_bert"] = round(med["mlm"] / med["hf-bert"], 3)
    for n in names:
        log(f"speed: {n:16s} median {med[n]:.3f} s/step")
    log(
        "speed: ratio to mlm: "
        + ", ".join(f"{VARIANTS[v][0]} {x:.2f}x" for v, x in out["ratio_to_mlm"].items())
    )
    return out


def main() -> None:
    from benchmarks.common import script_command, write_result

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("corpus", help="DocStore with link and auto spans (ralm corpus build --sample enwiki)")
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--seq", type=int, default=128, help="max_seq_length ([CLS] + words + [SEP])")
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--entity-width", type=int, default=ENTITY_WIDTH, help="l of the +ent rows")
    ap.add_argument("--name", default="luke_speed")
    args = ap.parse_args()
    res = measure(
        args.corpus,
        batch_size=args.batch_size,
        seq=args.seq,
        repeats=args.repeats,
        warmup=args.warmup,
        entity_width=args.entity_width,
    )
    metrics = {
        "step_ratio": res["ratio_to_mlm"]["baseline"],
        **{f"step_ratio_{v}": x for v, x in res["ratio_to_mlm"].items()},
        **{f"step_seconds_{n}": x for n, x in res["step_seconds_median"].items()},
        "mlm_to_hf_bert": res.get("mlm_to_hf_bert"),
    }
    write_result(
        args.name,
        script_command(__file__),
        metrics,
        {"step_ratio": "<= 1.3 (Baseline LUKE step / plain MLM step, same words; issue 15)"},
        speed=res,
    )


if __name__ == "__main__":
    main()
