"""`ralm.realm.inference.gold_table`: the demo's before/after table from two gold evaluations written by hand."""

from __future__ import annotations

import json

import pytest


def _write(run, name, summary, **extra):
    (run / name).write_text(json.dumps({"summary": summary, **extra}), encoding="utf-8")


def test_figures_and_table_from_the_two_evaluations(tmp_path, capsys):
    from ralm.realm.inference.gold_table import demo_figures, main

    _write(tmp_path, "eval_gold_initial.json", {"queries": 4, "recall@1": 0.5, "p_right": 0.25})
    after = {"queries": 4, "recall@1": 1.0, "p_right": 0.75}
    for row, (em, f1, ppl) in {
        "closed_book": (0.25, 0.5, 9.0),
        "retrieval": (0.75, 0.8, 1.5),
        "oracle": (1.0, 1.0, 1.1),
    }.items():
        after.update({f"em_{row}": em, f"f1_{row}": f1, f"ppl_{row}": ppl})
    ex = {
        "masked_text": "The owner of AB-1 is [1].",
        "answer": "Kor",
        "fill": "Kor",
        "fill_closed_book": "Ann",
        "from_chunk": 3,
        "from_title": "Record AB-1",
        "from_text": "The registered owner of AB-1 is Kor.",
    }
    _write(tmp_path, "eval_gold.json", after, step=12, examples=[ex])
    fig = demo_figures(tmp_path)
    assert fig["em_retrieval"] == 75.0 and fig["f1_closed_book"] == 50.0 and fig["ppl_oracle"] == 1.1
    assert fig["em_retrieval_over_closed_book"] == pytest.approx(3.0)
    assert (fig["recall_at_1_step0"], fig["recall_at_1"], fig["step"]) == (0.5, 1.0, 12)
    assert main([str(tmp_path)]) == 0
    printed = capsys.readouterr().out
    assert "right document first (recall@1)             0.500    1.000" in printed
    assert "with retrieval                             75.0   80.0      1.50" in printed
    assert "exact match with retrieval / closed-book: 3.0x" in printed
    assert "fill [1]: 'Kor'   right answer: 'Kor'   closed-book: 'Ann'" in printed
    assert (tmp_path / "demo_table.txt").read_text() == printed
    assert json.loads((tmp_path / "demo_table.json").read_text())["em_oracle"] == 100.0


def test_a_missing_evaluation_is_one_line_and_exit_2(tmp_path, capsys):
    from ralm.realm.inference.gold_table import main

    assert main([str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "eval_gold_initial.json: missing" in err
    assert not (tmp_path / "demo_table.txt").exists()
