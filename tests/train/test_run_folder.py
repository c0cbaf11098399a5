"""ralm.train.run: the run-folder rules every checkpointed training command shares."""

from __future__ import annotations

import json
from dataclasses import dataclass

import pytest

from ralm.errors import RalmError
from ralm.train.run import (
    check_start,
    out_state,
    refuse_other_settings,
    remove_run,
    resume_point,
    setting_differences,
)


def _run(path, *files):
    path.mkdir(parents=True, exist_ok=True)
    for f in files:
        (path / f).write_text("{}")
    return path


def test_out_state_names_what_out_holds(tmp_path):
    assert out_state(tmp_path / "missing", "cfg.json") == "empty"
    assert out_state(_run(tmp_path / "e"), "cfg.json") == "empty"
    assert out_state(_run(tmp_path / "f", "notes.txt"), "cfg.json") == "foreign"
    assert out_state(_run(tmp_path / "u", "cfg.json"), "cfg.json", "results.json") == "unfinished"
    assert (
        out_state(_run(tmp_path / "d", "cfg.json", "results.json"), "cfg.json", "results.json") == "finished"
    )
    # without a result file name, a finished run is a run like any other
    assert out_state(tmp_path / "d", "cfg.json") == "unfinished"
    (tmp_path / "file").write_text("")
    with pytest.raises(RalmError, match="exists and is not a directory"):
        out_state(tmp_path / "file", "cfg.json")


def test_check_start_continues_only_when_asked(tmp_path):
    run = _run(tmp_path / "u", "cfg.json")
    with pytest.raises(RalmError, match=r"exists; pass --resume to continue it or --overwrite to start over"):
        check_start(run, "cfg.json", "ralm x", resume=False, overwrite=False)
    assert check_start(run, "cfg.json", "ralm x", resume=True, overwrite=False) is True
    assert check_start(run, "cfg.json", "ralm x", resume=False, overwrite=True) is False
    assert check_start(run, "cfg.json", "ralm x", resume=True, overwrite=True) is True
    assert check_start(tmp_path / "new", "cfg.json", "ralm x", resume=True, overwrite=False) is False
    assert (run / "cfg.json").is_file()  # nothing removed
    foreign = _run(tmp_path / "f", "notes.txt")
    with pytest.raises(RalmError) as err:
        check_start(foreign, "cfg.json", "ralm x", resume=False, overwrite=True)
    assert str(err.value) == (
        f"{foreign}: exists and is not a `ralm x` run (no cfg.json); refusing to overwrite it, choose another --out"
    )
    with pytest.raises(RalmError, match="exists; pass --resume"):
        check_start(foreign, "cfg.json", "ralm x", resume=False, overwrite=False)
    # --resume into it starts a new run beside its files
    assert check_start(foreign, "cfg.json", "ralm x", resume=True, overwrite=False) is False
    assert check_start(foreign, "cfg.json", "ralm x", resume=True, overwrite=True) is False
    assert (foreign / "notes.txt").read_text() == "{}"


def test_remove_run_refuses_a_foreign_folder(tmp_path):
    run = _run(tmp_path / "u", "cfg.json", "metrics.jsonl")
    remove_run(run, "cfg.json", "ralm x")
    assert not run.exists()
    remove_run(tmp_path / "missing", "cfg.json", "ralm x")  # nothing there: nothing to do
    foreign = _run(tmp_path / "f", "notes.txt")
    with pytest.raises(RalmError, match="is not a `ralm x` run"):
        remove_run(foreign, "cfg.json", "ralm x")
    assert (foreign / "notes.txt").is_file()


@dataclass
class _Cfg:
    lr: float
    data: str
    seed: int = 0


def test_setting_differences_by_key_attribute_and_path(tmp_path):
    (tmp_path / "store").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "store")
    saved = {"config": {"lr": 1e-4, "data": str(tmp_path / "store")}, "examples": 10, "digest": "a"}
    given = {"config": {"lr": 2e-4, "data": str(tmp_path / "link")}, "examples": 10, "digest": "b"}
    assert setting_differences(saved, given) == ["lr", "digest"]  # the symlink names the same store
    assert setting_differences(saved, saved) == []
    a, b = _Cfg(1e-4, str(tmp_path / "store")), _Cfg(1e-4, str(tmp_path / "link"), seed=1)
    assert setting_differences(a, b) == ["seed"]
    assert setting_differences(a, b, ["lr", "data"]) == []
    assert setting_differences({"config": None}, {"config": {"lr": 1}}) == ["lr"]


def test_refuse_other_settings_names_them(tmp_path):
    run = _run(tmp_path / "u")
    (run / "cfg.json").write_text(json.dumps({"config": {"lr": 1e-4, "layers": [1, 2]}, "digest": "a"}))
    refuse_other_settings(
        run, "cfg.json", {"config": {"lr": 1e-4, "layers": (1, 2)}, "digest": "a"}, "ralm x"
    )
    with pytest.raises(RalmError) as err:
        refuse_other_settings(
            run,
            "cfg.json",
            {"config": {"lr": 2e-4, "layers": (1, 2)}, "digest": "b"},
            "ralm x",
            labels={"digest": "training examples"},
        )
    assert str(err.value) == (
        f"{run}: holds an unfinished `ralm x` run with other settings (lr, training examples); rerun it "
        "with the same ones to resume, or pass --overwrite to start over"
    )


def test_resume_point_without_a_checkpoint_starts_over(tmp_path):
    run = _run(tmp_path / "u", "cfg.json", "metrics.jsonl", "model.tmp-123")
    (run / "checkpoints" / ".step-0000004.tmp-9").mkdir(parents=True)
    assert resume_point(run, "ralm x") is None
    assert sorted(p.name for p in run.iterdir()) == ["cfg.json", "checkpoints"]
    assert list((run / "checkpoints").iterdir()) == []
