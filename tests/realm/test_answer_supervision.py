"""Reader-free records of which candidates hold the masked span (`ralm.realm.training.answer_queries`):
the same queries, candidates and `has_answer` as the diagnosis, targets by hand, and the query tower
learns from them with `distill_query_tower`."""

from __future__ import annotations

import numpy as np
import pytest

pytestmark = pytest.mark.usefixtures("one_thread")


def test_records_match_the_diagnosis_of_the_same_chunks(frozen):
    from ralm.realm.training.answer_queries import answer_records
    from ralm.realm.training.run import load_run

    run_dir, diag = frozen  # diagnose(depth=8, reader_depth=4) of the first 6 training chunks
    run = load_run(run_dir)
    recs = answer_records(run, run.train_ids[:6], depth=4, nats=3.0, skip_uniform=False)
    assert [r["chunk"] for r in recs] == [d["chunk"] for d in diag]
    for r, d in zip(recs, diag, strict=True):
        assert r["span"] == d["span"]
        assert r["reader_docs"] == d["candidates"]["dense"][:4] + [-1]
        assert r["candidates"] == {"dense": d["candidates"]["dense"][:4]}
        assert r["has_answer"] == {"dense": d["has_answer"]["dense"][:4]}
        assert r["lp_content"] == [3.0 if h else 0.0 for h in r["has_answer"]["dense"]] + [0.0]
        assert r["lp_all"] == r["lp_content"]


def test_uniform_spans_are_left_out(frozen):
    from ralm.realm.training.answer_queries import answer_records
    from ralm.realm.training.run import load_run

    run_dir, diag = frozen
    run = load_run(run_dir)
    ranked = [d["chunk"] for d in diag if len(set(d["has_answer"]["dense"][:4])) == 2]
    assert 0 < len(ranked) < len(diag)  # the toy corpus has both kinds
    assert [r["chunk"] for r in answer_records(run, run.train_ids[:6], depth=4)] == ranked


def test_the_query_tower_learns_to_rank_the_chunks_that_hold_the_span(frozen):
    from ralm.realm.training.answer_queries import answer_records
    from ralm.realm.training.cached_distill import distill_query_tower, rescore_records
    from ralm.realm.training.run import load_run

    run_dir, _ = frozen
    run = load_run(run_dir)
    recs = answer_records(run, run.train_ids, depth=4)

    def mass_on_answers() -> float:
        out = rescore_records(run, recs)
        return float(
            np.mean([sum(np.exp(r["log_p_z_r"][i]) for i in range(4) if r["lp_content"][i] > 0) for r in out])
        )

    before = mass_on_answers()
    distill_query_tower(run, recs, epochs=20, batch_size=4, seed=0)
    after = mass_on_answers()
    assert after > before + 0.2


def test_refuses_fewer_than_two_candidates(frozen):
    from ralm.errors import RalmError
    from ralm.realm.training.answer_queries import answer_records
    from ralm.realm.training.run import load_run

    run = load_run(frozen[0])
    with pytest.raises(RalmError, match="depth=1"):
        answer_records(run, run.train_ids[:2], depth=1)
