"""The query tower trained offline from a frozen reader's cached candidate scores.

REALM and Atlas score a query's candidates with the reader at every step, and the retriever sees each
query once. With the reader frozen (`reader_train = "freeze"`) and the document tower frozen
(`retriever_train = "query"`), neither the candidates' vectors nor the reader's log p(y|x,z) of them
ever change, so both can be computed once: `ralm.realm.inference.diagnose.diagnose(run, ids=...)` scores the
top `reader_depth` dense candidates and the null document of any chunks' masked queries (its
records; the candidates' vectors are the index's), and `distill_query_tower` trains the query tower (and the learned score scale and null
logit, when the run has them) on those records for several passes with Atlas's perplexity
distillation (`ralm.realm.modeling.marginal.distillation_loss`), the target softmax(log p(y|x,z) / tau) over the
same candidates and the null document. One reader pass then buys as many retriever updates as the
passes: how much reader signal the retriever needs before its scores track what the reader can use
is the question this answers, at a fraction of online REALM's cost.

`rescore_records` applies a trained tower to cached records (held-out ones, say) without the reader:
the new log p(z|x) over the same candidates, and the candidates re-ordered by it, so that
`ralm.realm.inference.diagnose.summarize` reports the ratio, entropy and score/utility agreement of the
re-ranked top k. `save_distilled` writes the result as a checkpoint of the run, which `ralm
evaluate-mlm --diagnose` reads like any other (there with a fresh search of the whole index).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ralm.errors import RalmError
from ralm.realm.modeling.candidates import in_batch_rows
from ralm.realm.modeling.marginal import distillation_loss
from ralm.realm.training.heldout import heldout_batches
from ralm.realm.training.run import LoadedRun
from ralm.train.loop import fit_steps

__all__ = ["NEGATIVES", "distill_query_tower", "rescore_records", "save_distilled"]

NEGATIVES = ("none", "in_batch")


def _check(run: LoadedRun, records: Sequence[dict[str, Any]]) -> int:
    """The candidates a record holds (the null document excluded), after checking that the run's
    reader and doc tower are frozen and its null document is the last of every record's rows."""
    model = run.model
    if not model.retrieval or not model.causal:
        raise RalmError(f"{run.cfg.out}: cached distillation needs a REALM run with a causal reader")
    if model.reader_train != "freeze" or model.retriever_train != "query":
        raise RalmError(
            f'{run.cfg.out}: cached scores stay true only with reader_train = "freeze" and '
            f'retriever_train = "query" (got {model.reader_train!r}, {model.retriever_train!r})'
        )
    if not records:
        raise RalmError("no cached records to learn from")
    has_null = model.null_doc != "none"
    R = len(records[0]["reader_docs"]) - int(has_null)
    for r in records:
        docs = r["reader_docs"]
        if len(docs) != R + int(has_null) or (has_null and docs[-1] != -1) or min(docs[:R]) < 0:
            raise RalmError(
                f"chunk {r['chunk']}: its record's rows {docs} are not {R} chunks"
                + (" and the null document (-1) last" if has_null else "")
            )
    return R


def _by_chunk(records: Sequence[dict[str, Any]]) -> dict[int, dict[str, Any]]:
    out = {int(r["chunk"]): r for r in records}
    if len(out) != len(records):
        raise RalmError("cached records: a chunk id occurs twice")
    return out


def _doc_vectors(run: LoadedRun, rows: np.ndarray) -> torch.Tensor:
    """(B, R, d) vectors of the candidate chunks `rows` (B, R): the run's index holds them (the frozen
    doc tower's, exact for a flat index), so no doc tower runs."""
    from ralm.retrieval.index.dense import stored_vectors

    B, R = rows.shape
    if run.refresher is None or run.refresher.index is None:
        raise RalmError(f"{run.cfg.out}: no index to read the candidates' vectors from")
    d = torch.from_numpy(stored_vectors(run.refresher.index, rows))
    return d.reshape(B, R, -1).to(run.device)


def distill_query_tower(
    run: LoadedRun,
    records: Sequence[dict[str, Any]],
    *,
    epochs: int,
    batch_size: int | None = None,
    tau: float | None = None,
    target: str = "content",
    seed: int | None = None,
    log_every: int = 0,
    negatives: str = "none",
) -> tuple[torch.optim.Optimizer, Any, list[dict[str, float]]]:
    """Train `run.model`'s query tower (in place) on cached records for `epochs` passes.

    Each step takes `batch_size` records (default: the run's), rebuilds their masked queries (the
    same seeded mask per chunk as when they were scored), and minimises the mean KL of
    softmax(lp / tau) (lp: the record's `lp_content` or `lp_all`, over its R chunks and the null
    document) from the model's log p(z|x) over the same rows. The learning rates, weight decay,
    warm-up and schedule are the run's (`lr_retriever`, `lr_scale`, ...), over
    epochs x ceil(N / batch_size) steps; tau defaults to the run's `distill_tau`. The records'
    order is shuffled anew each pass (seeded).

    `negatives = "in_batch"`: each query's softmax also holds the other queries' cached chunks of the
    batch, with target probability 0 (a chunk that is also one of its own stays its own). The
    distillation alone sets only the relative scores of a query's own candidates, and nothing holds
    the rest of the index in place; the in-batch chunks are the rest of the index the step sees.

    Returns (optimizer, scheduler, history): history has one row per `log_every` steps (and the
    last) with the mean KL since the previous row.
    """
    from ralm.realm.training.build import optimizer_for
    from ralm.train.optim import warmup_schedule

    if target not in ("content", "all"):
        raise RalmError(f"target={target!r}: choose content or all")
    if negatives not in NEGATIVES:
        raise RalmError(f"negatives={negatives!r}: choose one of {', '.join(NEGATIVES)}")
    if epochs < 1:
        raise RalmError(f"epochs={epochs}: must be >= 1")
    R = _check(run, records)
    cfg, model = run.cfg, run.model
    bs = batch_size or cfg.batch_size
    tau = cfg.distill_tau if tau is None else tau
    by_chunk = _by_chunk(records)
    chunks = np.array(sorted(by_chunk), dtype=np.int64)
    rng = np.random.default_rng(cfg.seed if seed is None else seed)
    steps = epochs * math.ceil(len(chunks) / bs)
    model.train()
    opt = optimizer_for(model, cfg)
    sched = warmup_schedule(opt, cfg.schedule, min(cfg.warmup_steps, steps), steps, cfg.min_lr_ratio)
    history: list[dict[str, float]] = []
    since: list[float] = []

    def batches():
        for epoch in range(epochs):
            order = chunks[rng.permutation(len(chunks))]
            for batch in heldout_batches(run, order, bs):
                yield epoch, batch

    def loss_of(item):
        epoch, batch = item
        ids = batch["source_ids"].tolist()
        recs = [by_chunk[int(c)] for c in ids]
        rows = np.array([r["reader_docs"][:R] for r in recs], dtype=np.int64)
        lp = torch.tensor([r[f"lp_{target}"] for r in recs], dtype=torch.float32)
        batch = {k: v.to(run.device) for k, v in batch.items()}
        q = model.embed_queries(batch).float()
        pad = None
        if negatives == "in_batch":
            rows, lp, pad = _with_in_batch_negatives(rows, lp)
        log_p_z = model.prior_over(q, rows, _doc_vectors(run, rows)).float()
        if pad is not None:  # the softmax over the places kept
            log_p_z = log_p_z.masked_fill(pad.to(log_p_z.device), -math.inf)
            log_p_z = log_p_z - torch.logsumexp(log_p_z, dim=1, keepdim=True)
        return distillation_loss(log_p_z, lp.to(log_p_z.device), tau).mean(), epoch

    def on_step(step: int, loss: float, epoch: int, _norm: float) -> None:
        nonlocal since
        since.append(loss)
        if (log_every and step % log_every == 0) or step == steps:
            history.append({"step": step, "epoch": epoch + 1, "kl": float(np.mean(since))})
            since = []

    walk = batches()  # one pass over the epochs: the held-out masks may leave fewer than `steps` batches
    fit_steps(
        total=steps,
        start=0,
        epoch_batches=lambda: walk,
        loss_of=loss_of,
        opt=opt,
        sched=sched,
        params=[p for g in opt.param_groups for p in g["params"]],
        grad_clip=cfg.max_grad_norm if cfg.max_grad_norm > 0 else None,
        on_step=on_step,
    )
    model.eval()
    return opt, sched, history


def _with_in_batch_negatives(
    rows: np.ndarray, lp: torch.Tensor
) -> tuple[np.ndarray, torch.Tensor, torch.Tensor]:
    """Rows (B, R) and targets (B, R + 1, the null last) -> rows (B, B*R), targets (B, B*R + 1) and a
    mask (B, B*R + 1) of the places to leave out: each query's own R chunks, then the other queries'
    chunks with target log-probability -inf. A chunk already in the row (its own, or another
    query's twice) is left out, its place masked."""
    B, R = rows.shape
    out_rows, kept_out = in_batch_rows(rows)
    pad = torch.zeros(B, B * R + 1, dtype=torch.bool)
    pad[:, : B * R] = torch.from_numpy(kept_out)
    out_lp = torch.full((B, B * R + 1), -math.inf, dtype=lp.dtype)
    out_lp[:, :R] = lp[:, :R]
    out_lp[:, -1] = lp[:, R]  # the null document
    return out_rows, out_lp, pad


@torch.inference_mode()
def rescore_records(
    run: LoadedRun, records: Sequence[dict[str, Any]], *, batch_size: int = 16
) -> list[dict[str, Any]]:
    """Cached records under `run`'s retriever, the reader's scores unchanged: each record's R chunks
    re-ordered by the run's scores (the null document stays last), `log_p_z_r` the run's log p(z|x)
    over all of them and the null, `log_p_z_k` over the top k - 1 of them and the null, and the
    dense candidates' `has_answer` re-ordered alike (the first R; the deeper ones as they were).
    `ralm.realm.inference.diagnose.summarize` of the result is the diagnosis of the run re-ranking the cached
    top R (not a fresh search of the index)."""
    R = len(records[0]["reader_docs"]) - int(run.model.null_doc != "none")
    _check_rescore(run, records, R)
    model = run.model
    kr = model.n_retrieved
    by_chunk = _by_chunk(records)
    out: list[dict[str, Any]] = []
    was_training = model.training
    model.eval()  # no dropout: the scores the run would search with
    for batch in heldout_batches(run, np.array([int(r["chunk"]) for r in records]), batch_size):
        ids = batch["source_ids"].tolist()
        recs = [by_chunk[int(c)] for c in ids]
        rows = np.array([r["reader_docs"][:R] for r in recs], dtype=np.int64)
        batch = {k: v.to(run.device) for k, v in batch.items()}
        q = model.embed_queries(batch).float()
        lpz = model.prior_over(q, rows, _doc_vectors(run, rows)).float().cpu().numpy()
        for b, rec in enumerate(recs):
            order = np.argsort(-lpz[b, :R], kind="stable")
            perm = [*order.tolist(), *range(R, lpz.shape[1])]  # the null document stays last
            new = dict(rec)
            for key in ("reader_docs", "lp_all", "lp_content"):
                new[key] = [rec[key][i] for i in perm]
            new["log_p_z_r"] = lpz[b, perm].tolist()
            top = [*order[:kr].tolist(), *range(R, lpz.shape[1])]
            sub = lpz[b, top]
            # the prior over the top k - 1 and the null: the same scores, renormalised
            new["log_p_z_k"] = (sub - np.logaddexp.reduce(sub)).tolist()
            new["candidates"], new["has_answer"] = dict(rec["candidates"]), dict(rec["has_answer"])
            for source, cands in rec["candidates"].items():
                if list(cands[:R]) == list(rec["reader_docs"][:R]):  # the source the records read
                    hits = rec["has_answer"][source]
                    new["candidates"][source] = [cands[i] for i in order] + list(cands[R:])
                    new["has_answer"][source] = [hits[i] for i in order] + list(hits[R:])
            out.append(new)
    model.train(was_training)
    return out


def _check_rescore(run: LoadedRun, records: Sequence[dict[str, Any]], R: int) -> None:
    model = run.model
    if not model.retrieval:
        raise RalmError(f"{run.cfg.out}: rescoring needs a REALM run (towers)")
    if model.n_retrieved > R:
        raise RalmError(f"cached records hold {R} chunks; the run retrieves {model.n_retrieved}")
    for r in records:
        if len(r["reader_docs"]) != len(records[0]["reader_docs"]):
            raise RalmError(f"chunk {r['chunk']}: its record holds another number of rows")


def save_distilled(
    run: LoadedRun, out: str | Path, step: int, opt: torch.optim.Optimizer, sched: Any, *, examples_seen: int
) -> Path:
    """The trained towers as checkpoint `step` of the run directory `out` (whose config.toml and
    split.json describe the same run): what `load_run` and `ralm evaluate-mlm` read. `examples_seen`:
    the records read in training, all passes counted."""
    from ralm.train.checkpoint import save_checkpoint

    out = Path(out)
    if run.refresher is None:
        raise RalmError(f"{run.cfg.out}: no index to save with the towers")
    run.refresher.save_under(out / "index")  # the frozen doc tower's index, as the run searched it
    save_checkpoint(
        out,
        step,
        run.model,
        opt,
        sched,
        run.refresher,
        mode=run.cfg.mode,
        examples_seen=examples_seen,
        keep=run.cfg.keep_checkpoints,
        docstore_fingerprint=run.store.fingerprint,
    )
    return out / "checkpoints" / f"step-{step:07d}"
