"""Speed: one `ralm finetune` training step vs the bare Hugging Face forward+backward on the same batch.

For each task head (sequence classification, token classification, extractive QA) the batch is
the same examples; "ours" is the adapter's loss (input building from the encoded items, padding,
log-softmax and the marginal over documents, K = 1 without retrieval) plus backward, "bare" is
``model(**padded_batch, labels=...).loss.backward()`` on the identical padded tensors. Both run
under the same autocast on the bundled MiniLM; they alternate for --repeats rounds and the
medians are compared (target <= 1.10x). With retrieval the step also embeds the queries, searches
and reads K rows per input: its cost relative to the plain step is reported, no target.

Data: gensim's 200 labelled sentences (bundled; no shared data needed); tagging labels are
synthetic (the speed does not depend on them).

Run: python -m benchmarks.downstream.finetune_step [--batch-size 16] [--repeats 15]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from benchmarks.common import script_command, write_result


def bare_batch(items, pad_id: int) -> dict[str, torch.Tensor]:
    from ralm.tasks.retrieval import pad_rows

    return pad_rows([(it.ids, it.types) for it in items], pad_id)


def timed(fn, model) -> float:
    t0 = time.perf_counter()
    fn().backward()
    model.zero_grad(set_to_none=True)
    return time.perf_counter() - t0


def measure(ad, items, model, b, repeats: int) -> tuple[list[float], list[float]]:
    """Alternating timings of the adapter's step and the bare HF step (2 warm-up rounds each)."""
    ours, bare = [], []
    for i in range(repeats + 2):
        o = timed(lambda: ad.loss(items, None), model)
        r = timed(lambda: model(**b).loss, model)
        if i >= 2:
            ours.append(o)
            bare.append(r)
    return ours, bare


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--repeats", type=int, default=15)
    args = ap.parse_args()
    torch.manual_seed(0)
    from ralm.formats.types import QAExample, TaggingExample
    from ralm.models.precision import autocast_context, autocast_dtype
    from ralm.samples import sample_path
    from ralm.tasks.adapters import make_adapter
    from ralm.tasks.datasets import read_file
    from ralm.tasks.models import load_task_model

    texts, _ = read_file(sample_path("polarity"), "classify")
    batch = texts[: args.batch_size]
    dev = torch.device("cpu")
    dtype = autocast_dtype(dev, "auto", torch.float32)
    metrics: dict[str, float] = {}
    cases = {
        "classify": (batch, sorted({ex.label for ex in texts})),
        "ner": (
            [
                TaggingExample(
                    ex.id,
                    ex.text.split(),
                    ["B-X" if i % 3 == 0 else "O" for i in range(len(ex.text.split()))],
                )
                for ex in batch
            ],
            ["B-X", "O"],
        ),
        "extractive-qa": (
            [
                QAExample(ex.id, "what is the review about ?", ex.text, [ex.text.split()[0]], [0])
                for ex in batch
            ],
            None,
        ),
    }
    for task, (examples, labels) in cases.items():
        model, tok = load_task_model(task, None, labels)
        model.train()
        ad = make_adapter(task, tok, model, labels, max_length=128)
        items = ad.encode(examples)
        b = bare_batch(items, tok.pad_token_id)
        if task == "classify":
            b["labels"] = torch.tensor([it.target for it in items])
        elif task == "ner":
            y = torch.full(b["input_ids"].shape, -100)
            for i, it in enumerate(items):
                y[i, : len(it.target)] = torch.tensor(it.target)
            b["labels"] = y
        else:
            b["start_positions"] = torch.tensor([it.target[0] for it in items])
            b["end_positions"] = torch.tensor([it.target[1] for it in items])
        with autocast_context(dev, dtype):
            ours, bare = measure(ad, items, model, b, args.repeats)
        o, r = statistics.median(ours), statistics.median(bare)
        metrics[f"{task}_step_seconds"] = round(o, 4)
        metrics[f"{task}_bare_hf_seconds"] = round(r, 4)
        metrics[f"{task}_ratio"] = round(o / r, 3)
        print(f"{task}: ours {o * 1000:.1f} ms, bare HF {r * 1000:.1f} ms, ratio {o / r:.3f}")
    write_result(
        "finetune_step",
        script_command(__file__),
        metrics,
        {f"{t}_ratio": "<= 1.10" for t in cases},
        batch_size=args.batch_size,
        repeats=args.repeats,
        autocast=str(dtype),
    )


if __name__ == "__main__":
    main()
