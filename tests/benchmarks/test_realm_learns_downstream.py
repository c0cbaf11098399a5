"""benchmarks/realm/realm_learns_downstream.py: the 2x2 x seeds of `ralm rag eval` results read back
into means and standard deviations, the issue's F1 difference, and the split of the runs between
processes."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from benchmarks.realm import realm_learns_downstream as down


def _result(work: Path, cell: str, seed: int, em: float, f1: float) -> None:
    reader, towers = cell.split("-")
    d = down.run_folder(work, work, "arm", reader, towers, seed)
    p = down.results_file(d)
    assert p == d / "eval" / "rag-k3" / "results.json"
    p.parent.mkdir(parents=True)
    p.write_text(json.dumps({"metrics": {"em": em, "f1": f1, "questions": 472}}))
    (d.parent / "budget.json").write_text(json.dumps({"rag_limit": 200, "rag_epochs": 1.0, "k": 3}))


def test_record_means_stds_and_the_difference(tmp_path: Path) -> None:
    f1s = {
        "plain-start": (30.0, 32.0, 34.0),
        "realm-realm": (33.0, 36.0, 39.0),
        "plain-realm": (20.0, 20.0, 26.0),
    }
    for cell, values in f1s.items():
        for seed, f1 in enumerate(values):
            _result(tmp_path, cell, seed, em=f1 / 2, f1=f1)
    _result(tmp_path, "realm-start", 0, em=10.0, f1=25.0)  # one seed finished
    rec = down.downstream_record(tmp_path, tmp_path, "arm")
    assert set(rec["cells"]) == {"plain-start", "realm-realm", "plain-realm", "realm-start"}
    ps, rr = rec["cells"]["plain-start"], rec["cells"]["realm-realm"]
    assert (ps["seeds"], ps["questions"], ps["f1_mean"], ps["f1_std"]) == (3, 472, 32.0, 2.0)
    assert (rr["f1_mean"], rr["f1_std"], rr["em_mean"], rr["em_std"]) == (36.0, 3.0, 18.0, 1.5)
    pr = rec["cells"]["plain-realm"]  # sample std of 20, 20, 26: sqrt(12)
    assert pr["f1_mean"] == 22.0 and math.isclose(pr["f1_std"], math.sqrt(12.0))
    one = rec["cells"]["realm-start"]
    assert one["seeds"] == 1 and one["f1_mean"] == 25.0 and "f1_std" not in one
    assert rec["f1_realm_minus_plain"] == 4.0
    md = "\n".join(down.downstream_lines(rec, "arm"))
    assert "| plain | 16.0 +- 1.0 / 32.0 +- 2.0 (3 seeds) | 11.0 +- 1.7 / 22.0 +- 3.5 (3 seeds) |" in md
    assert "| realm | 10.0 / 25.0 (1 seed) | 18.0 +- 1.5 / 36.0 +- 3.0 (3 seeds) |" in md
    assert "+4.00" in md


def test_no_difference_until_both_cells_have_every_seed(tmp_path: Path) -> None:
    assert down.downstream_record(tmp_path, tmp_path, "arm") is None
    for seed in range(3):
        _result(tmp_path, "plain-start", seed, em=1.0, f1=2.0)
    _result(tmp_path, "realm-realm", 0, em=1.0, f1=9.0)
    rec = down.downstream_record(tmp_path, tmp_path, "arm")
    assert "f1_realm_minus_plain" not in rec and rec["cells"]["realm-realm"]["seeds"] == 1


def test_the_baseline_cell_is_shared_by_every_arm(tmp_path: Path) -> None:
    base = {down.run_folder(tmp_path, tmp_path / f"w{a}", a, "plain", "start", 1) for a in ("x", "y")}
    assert base == {tmp_path / "nb-downstream" / "plain-start-seed1"}
    assert down.run_folder(tmp_path, tmp_path / "w", "x", "realm", "start", 2) == (
        tmp_path / "w" / "nb-x-downstream" / "realm-start-seed2"
    )


def test_cells_at_different_budgets_are_refused(tmp_path: Path) -> None:
    _result(tmp_path, "plain-start", 0, em=1.0, f1=2.0)
    _result(tmp_path, "realm-realm", 0, em=1.0, f1=2.0)
    budget = down.run_folder(tmp_path, tmp_path, "arm", "realm", "realm", 0).parent / "budget.json"
    budget.write_text(json.dumps({"rag_limit": 100, "rag_epochs": 1.0, "k": 3}))
    with pytest.raises(SystemExit, match="different budgets"):
        down.downstream_record(tmp_path, tmp_path, "arm")


def test_parts_split_the_twelve_runs_once_each_seeds_outermost() -> None:
    jobs = down._jobs()
    assert len(jobs) == 12 and len(set(jobs)) == 12
    assert [j[2] for j in jobs] == [0] * 4 + [1] * 4 + [2] * 4
    halves = [[j for n, j in enumerate(jobs) if n % 2 == i] for i in (0, 1)]
    assert sorted(halves[0] + halves[1]) == sorted(jobs) and not set(halves[0]) & set(halves[1])


def test_cells_limit_the_runs_and_parts_split_them_by_cell() -> None:
    jobs = down._jobs(down.cells_of("plain-start, realm-realm"))
    assert jobs == [(r, t, s) for s in (0, 1, 2) for r, t in (("plain", "start"), ("realm", "realm"))]
    halves = [[j for n, j in enumerate(jobs) if n % 2 == i] for i in (0, 1)]
    assert halves[0] == [("plain", "start", s) for s in (0, 1, 2)]
    assert halves[1] == [("realm", "realm", s) for s in (0, 1, 2)]
    for bad in ("plain-plain", "", "realm-start,start"):
        with pytest.raises(SystemExit, match="--cells"):
            down.cells_of(bad)


def test_reading_split_against_a_hand_count(tmp_path: Path) -> None:
    preds = [
        {"f1": 1.0, "answer_in_passages": [False, True, False]},
        {"f1": 0.5, "answer_in_passages": [True, False, False]},
        {"f1": 0.0, "answer_in_passages": [True, True, True]},
        {"f1": 0.25, "answer_in_passages": [False, False, False]},
    ]
    for cell in ("plain-start", "realm-realm"):
        for seed in range(3):
            _result(tmp_path, cell, seed, em=1.0, f1=2.0)
    d = down.run_folder(tmp_path, tmp_path, "arm", "plain", "start", 0)
    p = down.results_file(d).parent / "predictions.jsonl"
    p.write_text("".join(json.dumps(r) + "\n" for r in preds))
    assert down.reading_split(p) == {"in_top": 75.0, "f1_in_top": 50.0, "f1_not_in_top": 25.0}
    rec = down.downstream_record(tmp_path, tmp_path, "arm")
    assert "f1_in_top_mean" not in rec["cells"]["plain-start"]  # 1 of 3 seeds has predictions: no mean
    for seed in (1, 2):
        q = down.results_file(down.run_folder(tmp_path, tmp_path, "arm", "plain", "start", seed)).parent
        (q / "predictions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in preds[1:]))
    ps = down.downstream_record(tmp_path, tmp_path, "arm")["cells"]["plain-start"]
    # seeds 1 and 2 hold the last three rows: 2 of 3 with an answer (F1 0.5 and 0), one without (0.25)
    assert ps["in_top_mean"] == pytest.approx((75.0 + 2 * 200.0 / 3) / 3)
    assert ps["f1_in_top_mean"] == pytest.approx((50.0 + 25.0 + 25.0) / 3)
    assert ps["f1_not_in_top_mean"] == pytest.approx(25.0)
    md = "\n".join(down.downstream_lines(down.downstream_record(tmp_path, tmp_path, "arm"), "arm"))
    assert "| plain-start | 69.4% | 33.3 | 25.0 |" in md and "realm-realm |" not in md.split("Reading")[1]
