"""REPLUG LSR: train a dense retriever's query tower toward the passages the frozen LM prefers.

REPLUG (Shi et al. 2023, section 4): for a training question x with gold answer y and its top-n
passages D' from the current retriever,

    P_R(d | x) = softmax_d( s(d, x) / gamma )                 the retrieval likelihood
    Q(d | x, y) = softmax_d( log P_LM(y | d, x) / beta )      the LM's preference
    loss = KL( P_R || Q ), averaged over the batch

and only the retriever is updated; the LM stays frozen. Here s is the encoder's own scaled score
(`DualEncoder.scale_scores` of q . d, so gamma = 1 keeps the temperature it was trained with),
log P_LM(y | d, x) is the summed log-probability of the answer turn after the RAG prompt with
passage d alone (`lm_preferences`, the same `PromptBuilder` as generation), and beta = 1 makes Q
the posterior over D' under a uniform prior. The document tower and the index stay fixed (the
passage vectors are read from the index's embeddings.npy), so the index needs no refresh: the
deviation from REPLUG, which re-embeds its corpus every T steps, is that D' is the starting
retriever's top-n, fixed for the run. `index_with_query_tower` writes a copy of the index
(hard links) whose encoder has the trained query tower, which every ralm command then loads.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import random
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from ralm.atomic import atomic_path, replace_dir, temp_sibling
from ralm.errors import RalmError
from ralm.train.loop import fit_steps

__all__ = [
    "PREFERENCES",
    "LSRConfig",
    "cached_preferences",
    "index_with_query_tower",
    "lm_preferences",
    "lsr_loss",
    "save_preferences",
    "train_lsr",
]

PREFERENCES = "lm_preferences.npz"  # OUT/: the LM's scores, kept so that a stopped run does not redo them


@dataclass
class LSRConfig:
    """LSR training: candidates per question, temperatures, optimisation."""

    n: int = 20
    gamma: float = 1.0
    beta: float = 1.0
    epochs: float = 1.0
    lr: float = 2e-5
    batch_size: int = 32
    seed: int = 0

    def check(self) -> None:
        """RalmError for a value no run can use."""
        if (
            self.n < 2
            or self.gamma <= 0
            or self.beta <= 0
            or self.epochs <= 0
            or self.lr <= 0
            or self.batch_size < 1
        ):
            raise RalmError("LSR needs -n >= 2, --gamma/--beta/--epochs/--lr > 0 and --batch-size >= 1")


def lsr_loss(
    retrieval_scores: torch.Tensor, lm_logp: torch.Tensor, gamma: float = 1.0, beta: float = 1.0
) -> torch.Tensor:
    """Mean over the batch of KL(P_R || Q): retrieval_scores (B, n) s(d, x); lm_logp (B, n) log P_LM(y|d, x).

    Example: scores [[0, 0]] and lm_logp [[0, log 3]] -> P_R = (.5, .5), Q = (.25, .75),
    KL = .5 log(.5/.25) + .5 log(.5/.75) = 0.1438.
    """
    log_p = torch.log_softmax(retrieval_scores.float() / gamma, dim=-1)
    log_q = torch.log_softmax(lm_logp.float() / beta, dim=-1)
    return (log_p.exp() * (log_p - log_q)).sum(-1).mean()


def lm_preferences(
    lm,
    builder,
    questions: Sequence,
    passages: Sequence[Sequence],
    batch_tokens: int = 16384,
    progress: bool = False,
) -> np.ndarray:
    """(Q, n) log P_LM(first answer | prompt with passage d alone), summed over the answer turn."""
    from ralm.frozen.lm import ScoreJob
    from ralm.progress import tqdm
    from ralm.rag.prompt import passage_text

    n = min(len(p) for p in passages)
    jobs = []
    for q, ps in tqdm(list(zip(questions, passages, strict=True)), disable=not progress, desc="lsr prompts"):
        for p in ps[:n]:
            ex = builder.training_example(q.question, [passage_text(p.title, p.text)], q.answers[0])
            ids = np.asarray(ex.input_ids, dtype=np.int64)
            pos = np.flatnonzero(np.asarray(ex.labels[1:]) != -100)
            jobs.append(ScoreJob(ids, pos, ids[pos + 1]))
    scores = lm.score(jobs, batch_tokens=batch_tokens)
    return np.asarray([s.sum() for s in scores], dtype=np.float64).reshape(len(questions), n)


def save_preferences(
    path: Path, questions: Sequence, candidates: np.ndarray, logp: np.ndarray, lm: str
) -> None:
    """Keep the LM's preferences (logp (Q, n) over candidates (Q, n)) of `questions` at `path` (.npz)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(path, ".npz") as tmp:
        np.savez(
            tmp,
            ids=np.asarray([str(q.id) for q in questions]),
            candidates=candidates,
            logp=logp,
            lm=np.asarray(lm),
        )


def cached_preferences(path: Path, questions: Sequence, candidates: np.ndarray, lm: str) -> np.ndarray | None:
    """The preferences `save_preferences` kept, when they are for these questions, candidates and LM."""
    if not path.is_file():
        return None
    try:
        with np.load(path, allow_pickle=False) as z:
            same = (
                z["ids"].tolist() == [str(q.id) for q in questions]
                and np.array_equal(z["candidates"], candidates)
                and str(z["lm"]) == lm
            )
            return np.asarray(z["logp"]) if same else None
    except (OSError, ValueError, KeyError):  # a damaged file: score again
        return None


def train_lsr(
    encoder,
    questions: Sequence,
    candidates: np.ndarray,
    doc_vectors: np.ndarray,
    lm_logp: np.ndarray,
    cfg: LSRConfig,
    *,
    device: torch.device,
    log: Callable[[str], None] = print,
    run: str | os.PathLike | None = None,
    save_every: int = 0,
) -> dict:
    """Train `encoder.query_tower` in place: candidates (Q, n) chunk ids, doc_vectors (N, d) the index's
    vectors, lm_logp (Q, n). Returns stats (steps, seconds, first and final loss).

    With `run` (a folder) the loop runs on ralm.train's backbone (ralm.rag.train_run): metrics.jsonl,
    a checkpoint of the query tower every `save_every` steps, and a rerun after any stop resumes."""
    cfg.check()
    torch.manual_seed(cfg.seed)
    rng = random.Random(cfg.seed)
    tower = encoder.query_tower.to(device).train()
    params = [p for p in tower.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=cfg.lr)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)  # a constant lr, kept for the checkpoints
    docs = (
        torch.as_tensor(doc_vectors[candidates.reshape(-1)], dtype=torch.float32)
        .reshape(*candidates.shape, -1)
        .to(device)
    )
    target = torch.as_tensor(lm_logp, dtype=torch.float32, device=device)
    per_epoch = math.ceil(len(questions) / cfg.batch_size)
    total = max(1, int(round(per_epoch * cfg.epochs)))
    losses, step, before = [], 0, 0.0
    state = None
    if run is not None:
        from ralm.rag.train_run import LSR_CONFIG, open_run

        digest = hashlib.sha256(
            np.ascontiguousarray(candidates).tobytes() + np.ascontiguousarray(lm_logp).tobytes()
        )
        state = open_run(
            Path(run),
            cfg,
            questions,
            tower,
            opt,
            sched,
            device,
            log,
            save_every=save_every,
            batch_size=cfg.batch_size,
            digest=digest.hexdigest(),
            command="ralm rag lsr",
            config=LSR_CONFIG,
            mode="rag-lsr",
        )
        step, losses, before = state.step, state.losses, state.seconds
    t0 = time.perf_counter()

    def epoch_batches() -> list[list[int]]:
        order = list(range(len(questions)))
        rng.shuffle(order)
        return [order[s : s + cfg.batch_size] for s in range(0, len(order), cfg.batch_size)]

    def loss_of(rows):
        inputs = encoder.tokenize_queries([questions[i].question for i in rows])
        q = tower(**{k: v.to(device) for k, v in inputs.items()})
        scores = encoder.scale_scores(torch.einsum("bd,bnd->bn", q, docs[rows]))
        return lsr_loss(scores, target[rows], cfg.gamma, cfg.beta), None

    def on_step(step: int, loss: float, _info, _norm: float) -> None:
        losses.append(loss)
        if state is not None:
            state.after_step(step, total, loss=loss, seconds=round(before + time.perf_counter() - t0, 3))
        if step % 20 == 0 or step == total:
            log(f"lsr step {step}/{total}: KL {sum(losses[-20:]) / len(losses[-20:]):.4f}")

    step = fit_steps(
        total=total,
        start=step,
        epoch_batches=epoch_batches,
        loss_of=loss_of,
        opt=opt,
        sched=sched,
        params=params,
        grad_clip=1.0,
        on_step=on_step,
    )
    if state is not None:
        state.close()
    tower.eval()
    return {
        "steps": step,
        "seconds": before + time.perf_counter() - t0,
        "first_loss": losses[0],
        "final_loss": sum(losses[-20:]) / len(losses[-20:]),
    }


def index_with_query_tower(src: str | os.PathLike, encoder, out: str | os.PathLike) -> Path:
    """A copy of index `src` at `out` (files hard-linked where possible) whose encoder is `encoder`.

    The doc tower must be the index's own (same fingerprint): the stored vectors stay valid.
    """
    from ralm.retrieval.index.directory import MANIFEST, index_records, read_index_dir

    src, out = Path(src), Path(out)
    _, manifest = read_index_dir(src)
    if encoder.fingerprint("doc") != manifest["doc_encoder_fingerprint"]:
        raise RalmError(
            f"{src}: the trained encoder's doc tower differs from the index's; LSR keeps it fixed"
        )
    tmp = temp_sibling(out)
    shutil.rmtree(tmp, ignore_errors=True)
    out.parent.mkdir(parents=True, exist_ok=True)

    def link(a: str, b: str) -> None:
        try:
            os.link(a, b)
        except OSError:
            shutil.copy2(a, b)

    try:
        shutil.copytree(
            src,
            tmp,
            copy_function=link,
            ignore=lambda d, names: [n for n in names if (Path(d) == src and n in ("encoder", MANIFEST))],
        )
        encoder.save(tmp / "encoder")
        manifest = {
            **manifest,
            "encoder_fingerprint": encoder.fingerprint("all"),
            **index_records(tmp, manifest["bm25"]),
        }
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
        replace_dir(tmp, out)  # an old OUT is removed only once the new one is in place
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out
