"""Speed: a REALM training step's wall time vs its bare model passes, measured in one run.

Full step: `ralm.realm.training.trainer.train_step` as `ralm pretrain` runs it: masking and batching, query
tower, MIPS search with the source chunk excluded, doc tower on the k-1 retrieved chunks (plus the
null document's pass), reader inputs, reader, marginal loss, backward, clipping, AdamW, schedule.

Bare passes, on the very same tensors prepared beforehand (outside the timer): the query tower
on the masked queries, the doc tower on the k-1 retrieved chunks, the reader on the k joined
sequences, forward and backward of a loss touching all three. Two variants of the reader pass:
"head at masked positions" (what ralm's reader does: the vocabulary projection only where
labels are) and "HF full logits" (``mlm(**inputs).logits`` at every position, the plain call).
The issue's bar (<= 1.15x) is judged against the first: same arithmetic, so the ratio is
ralm's overhead (masking, batching, search, null document, bookkeeping, optimiser).

Full steps and bare passes alternate, so load on the machine hits both alike; medians reported.

Run: python -m benchmarks.realm.realm_step [--steps 12] [--batch-size 4] [--k 4] [--chunk-size 64]
Writes benchmarks/results/realm_step.json.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.common import script_command, write_result
from benchmarks.realm.realm_quality import ensure_store


@dataclass
class StepRig:
    """A REALM model and all its training step needs, set up as the trainer sets them up (seed 0,
    on the CPU, the index refreshed once): to time the step against bare passes of its models over
    the same tensors (this benchmark and realm_causal's speed cell)."""

    cfg: Any  # the PretrainConfig
    store: Any  # its DocStore
    model: Any
    col: Any  # the collator
    train_ids: Any
    opt: Any
    sched: Any
    ref: Any  # the SyncRefresher, refreshed
    dev: Any  # torch.device("cpu")
    ac: Any  # the autocast dtype
    refresh_seconds: float

    @classmethod
    def build(cls, cfg: Any, collator: Callable[[Any, Any, Any], Any]) -> StepRig:
        """The rig of `cfg`; `collator(store, tokenizer, model)` makes the trainer's collator."""
        import torch

        from ralm.corpus.docstore import DocStore
        from ralm.models.precision import autocast_dtype
        from ralm.realm.data import split_ids
        from ralm.realm.refresh.sync import SyncRefresher
        from ralm.realm.training.build import build_model, optimizer_for
        from ralm.train.optim import warmup_schedule

        store = DocStore(cfg.docstore)
        torch.manual_seed(0)
        model, tok = build_model(cfg, store)
        dev = torch.device("cpu")
        ac = autocast_dtype(dev, cfg.autocast, torch.float32)
        train_ids, _ = split_ids(cfg, store)
        col = collator(store, tok, model)
        opt = optimizer_for(model, cfg)
        sched = warmup_schedule(opt, cfg.schedule, 0, cfg.steps)
        ref = SyncRefresher(model.docs, every=0, autocast=cfg.autocast)
        t_refresh = ref.refresh(model.encoder, 0)
        return cls(cfg, store, model, col, train_ids, opt, sched, ref, dev, ac, t_refresh)

    def retrieved(self, step: int) -> tuple[Any, Any]:
        """Step `step` as the trainer starts it (outside any timer): its micro-batch collated, the
        queries embedded, the documents retrieved; (batch, doc_ids)."""
        import torch

        from ralm.realm.data import example_rngs, micro_batch_ids

        ids = micro_batch_ids(self.train_ids, self.cfg, step, 0)
        batch = self.col(ids, rngs=example_rngs(self.cfg.seed, step, 0, range(len(ids))))
        with torch.no_grad():
            q = self.model.embed_queries(batch)
        return batch, self.ref.search(q.numpy(), batch["source_ids"].numpy(), self.model.n_retrieved)

    def full_step(self, step: int) -> float:
        """Seconds of the trainer's step `step` (`train_step`, as `ralm pretrain` runs it)."""
        from ralm.realm.training.trainer import train_step

        m = self
        t0 = time.perf_counter()
        train_step(m.model, m.opt, m.sched, m.col, m.train_ids, m.cfg, step, m.ref.search, m.dev, m.ac)
        return time.perf_counter() - t0


def time_steps(
    rig: StepRig,
    inputs: Callable[[int], tuple],
    bare: Callable[..., float],
    steps: int,
    warmup: int,
    say: Callable[[int, float, float, float, tuple], None],
) -> tuple[float, float, float]:
    """Full steps and bare passes alternated (so load on the machine hits both alike), `warmup` steps
    then `steps` measured: the medians of the full step, of `bare(*inputs(step), head_only=True)`
    and of the same with head_only=False. `say(step, full, bare, bare_full_logits, inputs)` after
    every step."""
    full_t, bare_t, hf_t = [], [], []
    for step in range(1, warmup + steps + 1):
        x = inputs(step)
        tf = rig.full_step(step)
        tb = bare(*x, head_only=True)
        th = bare(*x, head_only=False)
        if step > warmup:
            full_t.append(tf)
            bare_t.append(tb)
            hf_t.append(th)
        say(step, tf, tb, th, x)
    return statistics.median(full_t), statistics.median(bare_t), statistics.median(hf_t)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=4)
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--chunk-size", type=int, default=64)
    ap.add_argument("--autocast", default="auto")
    ap.add_argument("--work", default="/tmp/ralm-bench-realm")
    args = ap.parse_args()

    from ralm.models.precision import autocast_context
    from ralm.realm.config import PretrainConfig
    from ralm.realm.masking.mlm import MaskingCollator
    from ralm.realm.readers.mlm import build_reader_inputs

    store_dir = ensure_store(Path(args.work) / f"enwiki-{args.chunk_size}", args.chunk_size)
    cfg = PretrainConfig(
        docstore=str(store_dir),
        out="-",
        batch_size=args.batch_size,
        k=args.k,
        steps=1000,
        encoder_max_length=args.chunk_size,
        reader_max_length=2 * args.chunk_size + 32,
        autocast=args.autocast,
        warmup_steps=0,
    )
    rig = StepRig.build(
        cfg, lambda store, tok, model: MaskingCollator(store, tok, cfg.masking, return_tensors="pt")
    )
    model = rig.model

    def bare_inputs(step: int):
        """The step's tensors, built exactly as the trainer builds them (outside any timer)."""
        batch, doc_ids = rig.retrieved(step)
        docs = [[model.docs.reader_doc(i) for i in row] + [([], [])] for row in doc_ids]
        rin = build_reader_inputs(
            batch["input_ids"], batch["labels"], docs, model.sep_id, model.pad_id, cfg.reader_max_length
        )
        return batch, model.docs.tower_batch(doc_ids.ravel()), rin

    def bare(batch, dbatch, rin, head_only: bool) -> float:
        model.zero_grad(set_to_none=True)
        t0 = time.perf_counter()
        with autocast_context(rig.dev, rig.ac):
            q = model.encoder.query_tower(batch["input_ids"], batch["attention_mask"])
            d = model.encoder.doc_tower(**dbatch)
            inputs = {k: v for k, v in rin.items() if k != "labels"}
            rows, cols = (rin["labels"] != -100).nonzero(as_tuple=True)
            if head_only:
                logits = model.reader.masked_logits(inputs, rows, cols)
            else:
                logits = model.reader.mlm(**inputs).logits[rows, cols]
            loss = q.float().mean() + d.float().mean() + logits.float().logsumexp(-1).mean()
        loss.backward()
        return time.perf_counter() - t0

    def say(step: int, tf: float, tb: float, th: float, _inputs: tuple) -> None:
        print(f"step {step}: full {tf:.3f}s  bare {tb:.3f}s  bare(HF full logits) {th:.3f}s", flush=True)

    full, b, h = time_steps(rig, bare_inputs, bare, args.steps, args.warmup, say)
    ratio = full / b
    print(f"median full {full:.3f}s, bare {b:.3f}s -> {ratio:.3f}x; vs HF full-logits passes {full / h:.3f}x")
    write_result(
        "realm_step",
        script_command(__file__),
        {
            "step_seconds_median": full,
            "bare_passes_seconds_median": b,
            "step_vs_bare_passes": ratio,
            "bare_passes_hf_full_logits_seconds_median": h,
            "step_vs_bare_hf_full_logits": full / h,
            "refresh_seconds": rig.refresh_seconds,
            "chunks": len(rig.store),
            "batch_size": args.batch_size,
            "k": args.k,
            "autocast": str(rig.ac),
            "steps_measured": args.steps,
        },
        {"step_vs_bare_passes": "<= 1.15"},
    )


if __name__ == "__main__":
    main()
