"""benchmarks/gpu/gpu_pack.py: the stage budget, failure isolation, merging partial runs, transport parts,
and every stage end to end at toy scale (--tiny) on the CPU."""

from __future__ import annotations

import json
import os
from pathlib import Path
from types import SimpleNamespace

import pytest
from benchmarks.gpu import gpu_pack
from benchmarks.gpu.stages import ORDER, transport
from benchmarks.gpu.stages.context import StageContext


class Clock:
    """A clock the stages move forward by the seconds they pretend to take."""

    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def stage(name: str, clock: Clock, takes: float, budget: float = 100, min_s: float = 10, fail: bool = False):
    seen = {}

    def run(ctx: StageContext) -> dict:
        seen["deadline"] = ctx.deadline
        clock.t += takes
        if fail:
            raise ValueError(f"{name} broke")
        return {f"{name}_metric": takes}

    return SimpleNamespace(
        NAME=name, TITLE=name, BUDGET_S=budget, MIN_S=min_s, TARGETS={}, run=run, seen=seen
    )


def ctx_for(st, deadline: float) -> StageContext:
    return StageContext(st.NAME, Path("/nonexistent"), Path("/nonexistent"), False, "cpu", deadline)


def test_budget_skips_short_stages_and_a_failure_does_not_stop_the_rest() -> None:
    clock = Clock()
    a = stage("a", clock, takes=50, budget=100)
    b = stage("b", clock, takes=20, budget=100, fail=True)
    c = stage("c", clock, takes=5, budget=100, min_s=200)  # 130 s left: skipped
    d = stage("d", clock, takes=30, budget=100, min_s=30)  # 130 s left: runs with its 100 s
    e = stage("e", clock, takes=1, budget=100, min_s=101)  # 100 s left: skipped
    saved = []
    recs = gpu_pack.run_stages(
        [a, b, c, d, e], ctx_for, 200, clock=clock, on_record=lambda r: saved.append(len(r))
    )
    assert [r["status"] for r in recs] == ["ok", "failed", "skipped", "ok", "skipped"]
    assert saved == [1, 2, 3, 4, 5]  # the run file is rewritten after every stage
    assert recs[0]["metrics"] == {"a_metric": 50.0} and recs[3]["metrics"] == {"d_metric": 30.0}
    assert recs[1]["reason"] == "ValueError: b broke" and recs[1]["metrics"] == {}
    assert recs[2]["reason"] == "130 s left, the stage needs at least 200 s"
    assert recs[4]["reason"] == "100 s left, the stage needs at least 101 s"
    assert [r["budget_s"] for r in recs if r["status"] != "skipped"] == [100, 100, 100]
    assert a.seen["deadline"] == 1000 + 100 and d.seen["deadline"] == 1070 + 100
    assert "seen" not in c.__dict__ or c.seen == {}


def test_the_last_stage_gets_only_the_time_left() -> None:
    clock = Clock()
    a, b = stage("a", clock, takes=150, budget=150), stage("b", clock, takes=10, budget=100, min_s=20)
    recs = gpu_pack.run_stages([a, b], ctx_for, 180, clock=clock)
    assert [r["status"] for r in recs] == ["ok", "ok"]
    assert recs[1]["budget_s"] == 30 and b.seen["deadline"] == 1150 + 30


def test_a_stage_whose_inputs_did_not_travel_is_skipped(tmp_path: Path) -> None:
    clock = Clock()
    a, b = stage("a", clock, takes=10), stage("b", clock, takes=10)
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "reader.gguf.chunk000-of-002").write_bytes(b"x")
    recs = gpu_pack.run_stages(
        [a, b], ctx_for, 500, clock=clock, missing=lambda st: gpu_pack.inputs_missing(tmp_path / st.NAME)
    )
    assert [r["status"] for r in recs] == ["skipped", "skipped"] and a.seen == {} and b.seen == {}
    assert recs[0]["reason"].startswith(f"its inputs ({tmp_path / 'a'}) are not in the pack")
    assert recs[1]["reason"] == f"reader.gguf of {tmp_path / 'b'} still wait for parts that were not stashed"
    (tmp_path / "b" / "reader.gguf.chunk000-of-002").unlink()
    assert gpu_pack.inputs_missing(tmp_path / "b") is None


def test_tiny_never_skips_for_want_of_time() -> None:
    clock = Clock()
    a = stage("a", clock, takes=1, budget=5, min_s=10_000)
    recs = gpu_pack.run_stages([a], ctx_for, 60, clock=clock, tiny=True)
    assert recs[0]["status"] == "ok" and recs[0]["tiny"] is True and recs[0]["budget_s"] == 60


def rec(stage_name: str, status: str, finished: str, metrics: dict, device: str = "H100", tiny: bool = False):
    return {
        "stage": stage_name,
        "status": status,
        "finished": finished,
        "metrics": metrics,
        "device": device,
        "tiny": tiny,
        "precision": "bf16",
        "seconds": 1.0,
    }


def test_report_merges_partial_runs_newest_success_per_stage() -> None:
    run1 = [
        rec("brent_en", "ok", "2026-11-01T10:00:00+00:00", {"gpu_ppl_ratio_realm_vs_mlm": 0.6}, "H100"),
        rec("serve", "failed", "2026-11-01T10:05:00+00:00", {}),
    ]
    run2 = [
        rec("brent_en", "ok", "2026-11-02T10:00:00+00:00", {"gpu_ppl_ratio_realm_vs_mlm": 0.45}, "H200"),
        rec("luke", "skipped", "2026-11-02T10:01:00+00:00", {}),
    ]
    run3 = [
        rec("brent_en", "failed", "2026-11-03T10:00:00+00:00", {}),
        rec("serve", "ok", "2026-11-03T10:02:00+00:00", {"gpu_serve_throughput_on_over_off": 3.5}),
        rec("surealm", "ok", "2026-11-04T10:00:00+00:00", {"gpu_surealm_ppl_reduction": 0.5}, tiny=True),
    ]
    stages = gpu_pack.merge_runs(run3 + run1 + run2)
    assert stages["brent_en"]["device"] == "H200" and stages["brent_en"]["finished"].startswith("2026-11-02")
    assert stages["serve"]["status"] == "ok" and stages["luke"]["status"] == "skipped"
    assert "surealm" not in stages  # tiny runs never stand
    rep = gpu_pack.build_report(
        stages,
        {
            "gpu_ppl_ratio_realm_vs_mlm": "<= 0.5",
            "gpu_serve_throughput_on_over_off": ">= 3",
            "gpu_luke_minus_word_f1": "> 0",
        },
    )
    assert rep["metrics"] == {"gpu_ppl_ratio_realm_vs_mlm": 0.45, "gpu_serve_throughput_on_over_off": 3.5}
    assert rep["targets"] == {
        "gpu_ppl_ratio_realm_vs_mlm": "<= 0.5 (met)",
        "gpu_serve_throughput_on_over_off": ">= 3 (met)",
        "gpu_luke_minus_word_f1": "> 0 (not measured)",
    }
    assert rep["devices"] == ["H100", "H200"]
    md = gpu_pack.markdown(rep)
    assert "| luke | skipped | H100 |" in md and "| causal_nb | not run |" in md


def test_stages_without_a_standing_result_run_first(tmp_path: Path) -> None:
    report = tmp_path / "gpu_pack.json"
    assert gpu_pack.standing(report) == set()
    report.write_text(
        json.dumps(
            {
                "stages": {
                    "brent_en": {"status": "ok"},
                    "serve": {"status": "failed"},
                    "surealm": {"status": "ok"},
                }
            }
        )
    )
    assert gpu_pack.standing(report) == {"brent_en", "surealm"}
    assert gpu_pack.pending_first(list(ORDER), gpu_pack.standing(report)) == [
        "causal_en",
        "causal_nb",
        "serve",
        "luke",
        "brent_en",
        "surealm",
    ]


@pytest.mark.parametrize(
    ("value", "bar", "want"),
    [
        (0.5, "<= 0.5", True),
        (0.51, "<= 0.5", False),
        (3, ">= 3", True),
        (0.0, "> 0", False),
        (0.01, "> 0", True),
        (-1, "< -0.5", True),
        (1.0, "one table", None),
    ],
)
def test_meets(value, bar, want) -> None:
    assert gpu_pack.meets(value, bar) is want


def test_parts_split_and_stash_back(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(transport, "PART_BYTES", 1000)
    pack = tmp_path / "pack"
    (pack / "wheels").mkdir(parents=True)
    (pack / "inputs" / "a").mkdir(parents=True)
    big = os.urandom(2500)
    files = {
        "wheels/x.whl": os.urandom(300),
        "inputs/a/big.bin": big,
        "inputs/a/small.txt": b"hello",
        "pack.json": b"{}",
    }
    for rel, data in files.items():
        (pack / rel).write_bytes(data)
    parts = transport.split_parts(pack, pack / "parts", ["pack.json", "wheels", "inputs/a"])
    assert all(sum(f.stat().st_size for f in p.rglob("*") if f.is_file()) <= 1000 for p in parts)
    assert len(parts) == 3  # 2 + 300 + 698 of big | 1000 of big | 802 of big + 5: a big file fills parts up
    assert (parts[0] / "pack.json").is_file() and (parts[0] / "wheels" / "x.whl").is_file()
    dest = tmp_path / "device"
    assert transport.stash(parts[0], dest) == [] and transport.stash(parts[1], dest) == []
    assert not (dest / "inputs" / "a" / "big.bin").exists()  # pieces wait for the last one
    assert transport.stash(parts[2], dest) == ["big.bin"]
    for rel, data in files.items():
        assert (dest / rel).read_bytes() == data
    assert sorted(p.name for p in (dest / "inputs" / "a").iterdir()) == ["big.bin", "small.txt"]


def test_context_stops_a_command_at_the_deadline(tmp_path: Path) -> None:
    import time

    from benchmarks.gpu.stages.context import StageTimeout

    ctx = StageContext("x", tmp_path, tmp_path / "w", True, "cpu", time.monotonic() + 1.5)
    script = tmp_path / "sleep.py"  # a command that starts a child of its own, as a server would
    pidfile = tmp_path / "child.pid"
    script.write_text(
        "import subprocess, sys, time\n"
        "c = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        f"open({str(pidfile)!r}, 'w').write(str(c.pid))\n"
        "time.sleep(60)\n"
    )
    with pytest.raises(StageTimeout, match="x: stopped after"):
        ctx.python(script)
    child = int(pidfile.read_text())
    time.sleep(0.2)
    assert not Path(f"/proc/{child}").exists() or "Z" in Path(f"/proc/{child}/stat").read_text().split()[2]
    out = tmp_path / "r.py"
    out.write_text(
        "import os, pathlib\npathlib.Path(os.environ['RALM_RESULTS_DIR'], 'n.json').write_text('{\"a\": 1}')\n"
    )
    ctx2 = StageContext("y", tmp_path, tmp_path / "w2", True, "cpu", time.monotonic() + 60)
    ctx2.python(out)
    assert ctx2.read_result("n") == {"a": 1}


def test_a_stopped_block_says_how_far_each_run_got(tmp_path: Path) -> None:
    from benchmarks.gpu.stages.context import StageTimeout, progress_on_stop

    (tmp_path / "a").mkdir()
    rows = [
        {"step": 1, "step_seconds": 0.5},
        {"step": 2, "step_seconds": 0.25},
        {"step": 2, "valid_ppl": 3.0},
    ]
    (tmp_path / "a" / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(StageTimeout) as got, progress_on_stop(lambda: [tmp_path / "a", tmp_path / "b"]):
        raise StageTimeout("x: stopped after 9 s (its budget)")
    assert (
        str(got.value)
        == "x: stopped after 9 s (its budget) (a: step 2, median 500.0 ms/step; b: not started)"
    )
    with pytest.raises(StageTimeout, match=r"^y \(no run started\)$"), progress_on_stop(list):
        raise StageTimeout("y")
    # other errors pass through untouched
    with pytest.raises(ValueError, match="other"), progress_on_stop(list):
        raise ValueError("other")


def test_device_env_gives_the_carried_packages_a_pythonpath_and_leaves_sys_path(
    tmp_path: Path, monkeypatch
) -> None:
    import sys

    pack, site = tmp_path / "pack", tmp_path / "site"
    (pack / "wheels").mkdir(parents=True)
    (pack / "wheels" / "x-1.0-py3-none-any.whl").write_bytes(b"")
    installs = []
    monkeypatch.setattr(transport.subprocess, "run", lambda cmd, check: installs.append(cmd))
    monkeypatch.setenv("PYTHONPATH", "src")
    before = list(sys.path)
    env = transport.device_env(pack, site, log=lambda msg: None)
    assert env == {"PYTHONPATH": f"{site}{os.pathsep}src"}
    assert sys.path == before  # what imports them runs as a new process under `env`
    assert len(installs) == 1 and installs[0][-3:] == [
        "--target",
        str(site),
        str(pack / "wheels" / "x-1.0-py3-none-any.whl"),
    ]
    assert transport.device_env(tmp_path / "empty", site) == {}  # nothing carried: nothing to add


def test_run_starts_itself_again_with_the_carried_packages(tmp_path: Path, monkeypatch) -> None:
    import sys

    argv = [
        "run",
        "--pack",
        str(tmp_path / "pack"),
        "--out",
        str(tmp_path / "out"),
        "--site",
        str(tmp_path / "s"),
    ]
    installed = []

    def device_env(pack: Path, site: Path, log) -> dict[str, str]:
        installed.append((pack, site))
        return {"PYTHONPATH": f"{site}{os.pathsep}src"}

    class Exec(Exception):
        pass

    def execve(path: str, args: list[str], env: dict[str, str]) -> None:
        raise Exec(path, args, env)

    monkeypatch.delenv(gpu_pack.CARRIED, raising=False)
    monkeypatch.setattr(transport, "device_env", device_env)
    monkeypatch.setattr(gpu_pack.os, "execve", execve)
    with pytest.raises(Exec) as got:
        gpu_pack.main(argv)
    path, args, env = got.value.args
    assert installed == [(tmp_path / "pack", tmp_path / "s")]
    assert path == sys.executable and args == [sys.executable, "-m", "benchmarks.gpu.gpu_pack", *argv]
    assert env == {
        **os.environ,
        "PYTHONPATH": f"{tmp_path / 's'}{os.pathsep}src",
        "RALM_GPUPACK_CARRIED": "1",
    }
    # started again (CARRIED set): no second install, no third start; the stages run (here: skipped,
    # their inputs were not stashed)
    monkeypatch.setenv(gpu_pack.CARRIED, "1")
    assert gpu_pack.main([*argv, "--stages", "surealm"]) == 0
    assert installed == [(tmp_path / "pack", tmp_path / "s")]
    run = json.loads((tmp_path / "out" / gpu_pack.RUN_FILE).read_text())
    assert [(r["stage"], r["status"]) for r in run["stages"]] == [("surealm", "skipped")]
