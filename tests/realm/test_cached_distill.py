"""The query tower trained offline from cached reader scores (`ralm.realm.training.cached_distill`): the loss is
Atlas's distillation over the cached rows as the model scores them, only the query side learns,
rescoring keeps the reader's scores with their chunks, and the result loads as a checkpoint."""

from __future__ import annotations

import numpy as np
import pytest
import torch

pytestmark = pytest.mark.usefixtures("one_thread")


def _state(model) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def _kl(run, records, tau=1.0) -> float:
    """Mean distillation KL over `records`, by the model's own scoring (doc tower run afresh)."""
    from ralm.realm.modeling.marginal import distillation_loss
    from ralm.realm.training.heldout import heldout_batches

    by = {r["chunk"]: r for r in records}
    out = []
    with torch.no_grad():
        for batch in heldout_batches(run, np.array([r["chunk"] for r in records]), 8):
            recs = [by[int(c)] for c in batch["source_ids"].tolist()]
            rows = np.array([r["reader_docs"][:4] for r in recs])
            lpz = run.model.prior_over(run.model.embed_queries(batch), rows)
            out += distillation_loss(lpz, torch.tensor([r["lp_content"] for r in recs]), tau).tolist()
    return float(np.mean(out))


def test_records_of_training_chunks(frozen):
    from ralm.realm.training.run import load_run

    run_dir, records = frozen
    run = load_run(run_dir)
    assert [r["chunk"] for r in records] == run.train_ids[:6].tolist()
    assert all(len(r["reader_docs"]) == 5 and r["reader_docs"][-1] == -1 for r in records)
    assert all(r["chunk"] not in r["reader_docs"] for r in records)  # the source chunk is left out


def test_first_step_loss_is_the_distillation_kl_and_only_the_query_side_learns(frozen):
    from ralm.realm.training.cached_distill import distill_query_tower
    from ralm.realm.training.run import load_run

    run_dir, records = frozen
    run = load_run(run_dir)
    for m in run.model.modules():  # training mode turns the query tower's dropout on
        if isinstance(m, torch.nn.Dropout):
            m.p = 0.0
    before = _state(run.model)
    want = _kl(run, records, tau=0.5)
    _, _, hist = distill_query_tower(run, records, epochs=3, batch_size=6, tau=0.5, log_every=1)
    assert [h["step"] for h in hist] == [1, 2, 3] and [h["epoch"] for h in hist] == [1, 2, 3]
    # one batch of all 6 records: step 1's loss is the KL of the untouched model, cached doc vectors
    # and all, to float precision
    assert hist[0]["kl"] == pytest.approx(want, rel=1e-5)
    after = _state(run.model)
    changed = {k for k in after if not torch.equal(after[k], before[k])}
    assert changed and all(k.startswith(("encoder.query_tower.", "prior.")) for k in changed), changed
    assert any(k.startswith("encoder.query_tower.") for k in changed)
    assert any(k.startswith("prior.") for k in changed)  # the learned score scale


def test_training_lowers_the_kl_on_its_records(frozen):
    from ralm.realm.training.cached_distill import distill_query_tower
    from ralm.realm.training.run import load_run

    run_dir, records = frozen
    run = load_run(run_dir)
    start = _kl(run, records)
    run.cfg.lr_retriever, run.cfg.warmup_steps = 3e-3, 0
    distill_query_tower(run, records, epochs=15, batch_size=3)
    assert _kl(run, records) < 0.8 * start


def test_rescoring_with_the_scoring_model_keeps_pairs_and_the_full_ratio(frozen):
    from ralm.realm.inference.diagnose import summarize
    from ralm.realm.training.cached_distill import rescore_records
    from ralm.realm.training.run import load_run

    run_dir, records = frozen
    run = load_run(run_dir)
    new = rescore_records(run, records, batch_size=4)
    assert [r["chunk"] for r in new] == [r["chunk"] for r in records]
    for old, r in zip(records, new, strict=True):
        # the chunks re-ordered by score, each keeping its own reader scores; the null stays last
        assert r["reader_docs"][-1] == -1 and sorted(r["reader_docs"]) == sorted(old["reader_docs"])
        assert r["log_p_z_r"][:4] == sorted(r["log_p_z_r"][:4], reverse=True)
        pairs = dict(
            zip(old["reader_docs"], zip(old["lp_content"], old["log_p_z_r"], strict=True), strict=True)
        )
        for doc, lp, lpz in zip(r["reader_docs"], r["lp_content"], r["log_p_z_r"], strict=True):
            assert lp == pairs[doc][0] and lpz == pytest.approx(pairs[doc][1], abs=1e-4)  # index vs tower
        # p(z|x) over the top 2 and the null: the same scores renormalised
        top = np.array([*r["log_p_z_r"][:2], r["log_p_z_r"][-1]])
        np.testing.assert_allclose(r["log_p_z_k"], top - np.logaddexp.reduce(top), atol=1e-6)
        assert np.exp(r["log_p_z_k"]).sum() == pytest.approx(1.0)
        hits = dict(zip(old["candidates"]["dense"], old["has_answer"]["dense"], strict=True))
        assert r["candidates"]["dense"][:4] == r["reader_docs"][:4]
        assert [hits[c] for c in r["candidates"]["dense"]] == r["has_answer"]["dense"]
    run.model.train()  # rescoring scores without dropout, and gives the mode back
    assert rescore_records(run, records, batch_size=4) == new and run.model.training
    a, b = summarize(records, k=2), summarize(new, k=2)
    # p(z|x) over all 4 chunks and the null is the same distribution in another order
    for part in ("all", "content"):
        assert b["ratios"][part]["K=5"]["run"]["ratio"] == pytest.approx(
            a["ratios"][part]["K=5"]["run"]["ratio"]
        )
        assert b["ratios"][part]["K=5"]["oracle"] == a["ratios"][part]["K=5"]["oracle"]


def test_saved_towers_load_as_a_checkpoint(frozen, tmp_path):
    import shutil

    from ralm.realm.training.cached_distill import distill_query_tower, save_distilled
    from ralm.realm.training.run import load_run

    run_dir, records = frozen
    out = tmp_path / "distilled"
    out.mkdir()
    for name in ("config.toml", "split.json"):
        shutil.copy(run_dir / name, out / name)
    run = load_run(run_dir)
    opt, sched, _ = distill_query_tower(run, records, epochs=1, batch_size=3)
    ck = save_distilled(run, out, 2, opt, sched, examples_seen=6)
    assert ck.name == "step-0000002"
    back = load_run(out)
    assert back.state["step"] == 2 and back.state["examples_seen"] == 6
    want, got = _state(run.model), _state(back.model)
    assert all(torch.equal(want[k], got[k]) for k in want)


def test_refuses_a_run_whose_reader_learns(frozen, causal_cfg, tmp_path):
    from ralm.errors import RalmError
    from ralm.realm.training.cached_distill import distill_query_tower
    from ralm.realm.training.run import load_run
    from ralm.realm.training.trainer import pretrain

    _, records = frozen
    run = load_run(pretrain(causal_cfg(out=str(tmp_path / "t"), steps=1, checkpoint_every=1), progress=False))
    with pytest.raises(RalmError, match='reader_train = "freeze"'):
        distill_query_tower(run, records, epochs=1)
    with pytest.raises(RalmError, match="epochs=0"):
        distill_query_tower(run, records, epochs=0)


def test_in_batch_negatives_rows_by_hand():
    from ralm.realm.training.cached_distill import _with_in_batch_negatives

    rows = np.array([[5, 7], [7, 9]])
    lp = torch.tensor([[-1.0, -2.0, -3.0], [-4.0, -5.0, -6.0]])
    got_rows, got_lp, pad = _with_in_batch_negatives(rows, lp)
    # query 0: its own 5, 7, then query 1's 9 (7 is its own: left out); query 1: 7, 9, then 5
    assert got_rows[0].tolist()[:2] == [5, 7] and got_rows[0, 3] == 9 and pad[0].tolist() == [0, 0, 1, 0, 0]
    assert got_rows[1].tolist() == [7, 9, 5, 7] and pad[1].tolist() == [0, 0, 0, 1, 0]
    inf = float("-inf")
    assert got_lp.tolist() == [[-1.0, -2.0, inf, inf, -3.0], [-4.0, -5.0, inf, inf, -6.0]]


def test_in_batch_negatives_loss_by_hand(frozen):
    from ralm.errors import RalmError
    from ralm.realm.training.cached_distill import distill_query_tower
    from ralm.realm.training.heldout import heldout_batches
    from ralm.realm.training.run import load_run

    run_dir, records = frozen
    run = load_run(run_dir)
    for m in run.model.modules():
        if isinstance(m, torch.nn.Dropout):
            m.p = 0.0
    by = {r["chunk"]: r for r in records}
    want = []
    with torch.no_grad():
        batch = next(heldout_batches(run, np.array([r["chunk"] for r in records]), 6))
        recs = [by[int(c)] for c in batch["source_ids"].tolist()]
        q = run.model.embed_queries(batch)
        for b, r in enumerate(recs):
            own = r["reader_docs"][:4]
            others = []
            for o in recs[:b] + recs[b + 1 :]:
                others += [c for c in o["reader_docs"][:4] if c not in own and c not in others]
            # log p(z|x) over own + others + null, by the model; the target: softmax over own + null
            lpz = run.model.prior_over(q[b : b + 1], np.array([own + others]))[0]
            keep = [*range(4), len(own) + len(others)]
            t = torch.log_softmax(torch.tensor(r["lp_content"]), 0)
            want.append(float((t.exp() * (t - lpz[keep])).sum()))
    _, _, hist = distill_query_tower(run, records, epochs=1, batch_size=6, log_every=1, negatives="in_batch")
    assert hist[0]["kl"] == pytest.approx(float(np.mean(want)), rel=1e-5)
    with pytest.raises(RalmError, match="negatives=.all."):
        distill_query_tower(run, records, epochs=1, negatives="all")
