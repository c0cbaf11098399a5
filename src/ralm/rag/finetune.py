"""RAG fine-tuning of the generator: (question + retrieved passages -> answer), the loss on the answer.

As RA-DIT's LM fine-tuning and Atlas/RAG's generator training do, the causal LM reads the prompt
that `ralm rag eval` would give it (the same `PromptBuilder`) and learns to produce the gold
answer; cross-entropy counts only the answer turn's tokens (the answer and its end-of-turn
token), averaged over those tokens in the batch. The closed-book control is trained the same
way with no passages. With `gold="mix"`, a training question whose retrieved top-k lacks its gold
passage gets it in place of a random one of them with probability `gold_rate`, so the model also
sees a passage that holds the answer (RA-DIT trains on retrieved passages only: `gold="off"`).

Full fine-tuning suits small models; `lora_r > 0` trains LoRA adapters (peft, all linear layers)
and merges them into the weights at the end, so the output loads like any causal LM. AdamW,
linear warm-up and decay, gradient clipping, bf16 autocast where the device has it. The model is
saved as safetensors with its config and tokenizer (`save_generator`), which `--lm DIR` loads.
"""

from __future__ import annotations

import math
import os
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from ralm.errors import RalmError
from ralm.rag.prompt import PromptBuilder, TrainingExample, passage_text
from ralm.train.loop import fit_steps

__all__ = ["GeneratorTrainConfig", "save_generator", "train_generator", "training_examples"]


@dataclass
class GeneratorTrainConfig:
    """Optimisation of the generator: epochs, learning rate, batch, LoRA rank (0 = full fine-tuning)."""

    epochs: float = 2.0
    lr: float = 5e-5
    batch_size: int = 16
    warmup: float = 0.05
    weight_decay: float = 0.0
    grad_clip: float = 1.0
    lora_r: int = 0
    lora_alpha: int = 32
    lora_dropout: float = 0.05
    seed: int = 0

    def check(self) -> None:
        """RalmError for a value no run can use."""
        if self.epochs <= 0 or self.lr <= 0 or self.batch_size < 1 or self.lora_r < 0:
            raise RalmError("--epochs and --lr must be > 0, --batch-size >= 1, --lora-r >= 0")


def training_examples(
    builder: PromptBuilder,
    questions: Sequence,
    passages: Sequence[Sequence] | None,
    k: int,
    *,
    gold: str = "off",
    gold_rate: float = 0.5,
    seed: int = 0,
) -> list[TrainingExample]:
    """One example per question with a string answer (its first), passages None = closed-book."""
    if gold not in ("off", "mix"):
        raise RalmError(f"--gold-passage {gold}: choose off or mix")
    rng = random.Random(seed)
    out = []
    for i, q in enumerate(questions):
        if q.regex or not q.answers:
            continue
        texts: list[str] = []
        if passages is not None:
            texts = [passage_text(p.title, p.text) for p in passages[i][:k]]
            if gold == "mix" and q.gold and q.gold not in texts and rng.random() < gold_rate:
                if texts:
                    texts[rng.randrange(len(texts))] = q.gold
                else:
                    texts = [q.gold]
        out.append(builder.training_example(q.question, texts, q.answers[0]))
    if not out:
        raise RalmError("no training question has a string answer; RAG fine-tuning needs gold answer strings")
    return out


def _batches(examples: Sequence[TrainingExample], batch_size: int, rng: random.Random) -> list[list[int]]:
    """Shuffled batches of similar lengths: shuffle, sort within windows of 50 batches, shuffle batches."""
    order = list(range(len(examples)))
    rng.shuffle(order)
    window = batch_size * 50
    batches = []
    for s in range(0, len(order), window):
        part = sorted(order[s : s + window], key=lambda i: len(examples[i].input_ids))
        batches += [part[j : j + batch_size] for j in range(0, len(part), batch_size)]
    rng.shuffle(batches)
    return batches


def _collate(examples: Sequence[TrainingExample], pad: int, device) -> tuple[torch.Tensor, ...]:
    width = max(len(e.input_ids) for e in examples)
    x = torch.full((len(examples), width), pad, dtype=torch.long)
    y = torch.full((len(examples), width), -100, dtype=torch.long)
    mask = torch.zeros((len(examples), width), dtype=torch.long)
    for r, e in enumerate(examples):
        n = len(e.input_ids)
        x[r, :n] = torch.as_tensor(e.input_ids)
        y[r, :n] = torch.as_tensor(e.labels)
        mask[r, :n] = 1
    return x.to(device), mask.to(device), y.to(device)


def answer_loss(logits: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, int]:
    """(mean cross-entropy over the labelled positions, their count): logits (B, T, V) predict labels
    (B, T) shifted by one (position t predicts token t + 1); -100 marks positions without loss."""
    target = labels[:, 1:]
    n = int((target != -100).sum())
    loss = torch.nn.functional.cross_entropy(
        logits[:, :-1].reshape(-1, logits.shape[-1]).float(),
        target.reshape(-1),
        ignore_index=-100,
        reduction="sum",
    )
    return loss / max(n, 1), n


def model_answer_loss(
    model: torch.nn.Module, x: torch.Tensor, mask: torch.Tensor, labels: torch.Tensor
) -> tuple[torch.Tensor, int]:
    """`answer_loss` of `model` on (x, mask), with the output layer run on the labelled positions
    only (`ralm.models.position_logits`): a 262k-token vocabulary (Gemma-3) makes full logits
    (B, T, V) cost gigabytes (8 rows of 550 tokens: 4.6 GB in float32) while the answers are a few
    tokens a row."""
    from ralm.models.position_logits import position_logits

    target = labels[:, 1:]
    rows, cols = (target != -100).nonzero(as_tuple=True)  # position t predicts token t + 1
    logits = position_logits(model, x, mask, rows, cols)
    n = int(rows.numel())
    loss = torch.nn.functional.cross_entropy(logits, target[rows, cols], reduction="sum")
    return loss / max(n, 1), n


def train_generator(
    model: torch.nn.Module,
    tokenizer,
    examples: Sequence[TrainingExample],
    cfg: GeneratorTrainConfig,
    *,
    device: torch.device,
    autocast: torch.dtype | None,
    log: Callable[[str], None] = print,
    progress: bool = False,
    run: str | os.PathLike | None = None,
    save_every: int = 0,
) -> tuple[torch.nn.Module, dict]:
    """Fine-tune `model` (in place; LoRA merged at the end) on `examples`; returns (model, stats).

    With `run` (a folder) the loop runs on ralm.train's backbone: one metrics.jsonl row a step,
    a checkpoint (weights, optimiser, schedule, RNG) every `save_every` steps, and a run stopped
    any way (kill -9 included) resumes from its newest intact checkpoint when called again with
    the same settings and examples, to the weights an uninterrupted run gives."""
    from ralm.models.precision import autocast_context
    from ralm.progress import tqdm

    cfg.check()
    torch.manual_seed(cfg.seed)
    rng = random.Random(cfg.seed)
    if cfg.lora_r:
        try:
            from peft import LoraConfig, get_peft_model
        except ImportError:
            raise RalmError("--lora-r needs peft: pip install peft (in ralm's [rag] extra)") from None
        lcfg = LoraConfig(
            r=cfg.lora_r,
            lora_alpha=cfg.lora_alpha,
            lora_dropout=cfg.lora_dropout,
            target_modules="all-linear",
            task_type="CAUSAL_LM",
        )
        model = get_peft_model(model, lcfg)
    model.to(device).train()
    for p in model.parameters():
        if not cfg.lora_r:
            p.requires_grad_(True)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay)
    per_epoch = math.ceil(len(examples) / cfg.batch_size)
    total = max(1, int(round(per_epoch * cfg.epochs)))
    warm = int(cfg.warmup * total)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: (s + 1) / max(warm, 1) if s < warm else max(0.0, (total - s) / max(total - warm, 1))
    )
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else (tokenizer.eos_token_id or 0)
    step, seen_tokens, losses, before = 0, 0, [], 0.0
    state = None
    if run is not None:
        from ralm.rag.train_run import open_run

        state = open_run(
            Path(run),
            cfg,
            examples,
            model,
            opt,
            sched,
            device,
            log,
            save_every=save_every,
            batch_size=cfg.batch_size,
        )
        step, seen_tokens, losses, before = state.step, state.tokens, state.losses, state.seconds
    t0 = time.perf_counter()

    def loss_of(batch):
        x, mask, y = _collate([examples[i] for i in batch], pad, device)
        with autocast_context(device, autocast):
            return model_answer_loss(model, x, mask, y)[0], int(mask.sum())

    with tqdm(total=total, initial=step, disable=not progress, unit="step", desc="rag train") as bar:

        def on_step(step: int, loss: float, tokens: int, _norm: float) -> None:
            nonlocal seen_tokens
            seen_tokens += tokens
            losses.append(loss)
            bar.update(1)
            if state is not None:
                state.after_step(
                    step,
                    total,
                    loss=loss,
                    tokens=seen_tokens,
                    seconds=round(before + time.perf_counter() - t0, 3),
                )
            if step % 50 == 0 or step == total:
                log(f"step {step}/{total}: answer loss {sum(losses[-50:]) / len(losses[-50:]):.4f}")

        step = fit_steps(
            total=total,
            start=step,
            epoch_batches=lambda: _batches(examples, cfg.batch_size, rng),
            loss_of=loss_of,
            opt=opt,
            sched=sched,
            params=params,
            grad_clip=cfg.grad_clip,
            on_step=on_step,
        )
    if state is not None:
        state.close()
    if cfg.lora_r:
        model = model.merge_and_unload()
    model.eval()
    seconds = before + time.perf_counter() - t0
    tail = losses[-max(1, len(losses) // 10) :]  # the last tenth of the steps
    stats = {
        "steps": step,
        "examples": len(examples),
        "seconds": seconds,
        "tokens": seen_tokens,
        "first_loss": losses[0] if losses else None,
        "final_loss": sum(tail) / max(len(tail), 1),
    }
    return model, stats


def save_generator(
    model: torch.nn.Module, tokenizer, out: str | os.PathLike, card: str | None = None
) -> Path:
    """OUT/ with config.json, model.safetensors (tied weights once) and the tokenizer, atomically;
    `AutoModelForCausalLM.from_pretrained(OUT)` and `ralm rag eval --lm OUT` load it; `card` is
    written as its README.md model card."""
    from ralm.models.save import save_causal_lm

    return save_causal_lm(model, tokenizer, out, card)
