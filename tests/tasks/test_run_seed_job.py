"""ralm.tasks.cli.run_seed_job, what `ralm finetune` and `ralm luke ner` run: the config takes the
given arguments named like its fields, then the fixed ones; the results print as a table and paths."""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from ralm.tasks.cli import run_seed_job


@dataclass
class _Config:
    data: str | None
    out: str
    lr: float = 5e-5
    seeds: list[int] | None = None
    progress: bool = True
    save: bool = True


def test_config_from_arguments_then_fixed_and_the_printed_results(capsys):
    args = argparse.Namespace(
        data=None,
        out="runs/x",
        lr=None,  # not given: the config's default
        seeds=[1, 2],
        no_progress=True,
        no_save=False,
        func=print,  # not a field: left out
    )
    seen = []

    def run(cfg):
        seen.append(cfg)
        return {"rows": 2}

    code = run_seed_job(args, _Config, run, lambda results: f"| table of {results['rows']} |\n", data="d")
    assert code == 0
    assert seen == [_Config(data="d", out="runs/x", lr=5e-5, seeds=[1, 2], progress=False, save=True)]
    assert capsys.readouterr().out == "| table of 2 |\nresults: runs/x/results.json, runs/x/results.md\n"


def test_without_fixed_arguments_only_the_given_ones_reach_the_config():
    args = argparse.Namespace(data="d", out="o", lr=0.1, seeds=None, no_progress=False, no_save=True)
    seen = []
    run_seed_job(args, _Config, seen.append, lambda results: "")
    assert seen == [_Config(data="d", out="o", lr=0.1, seeds=None, progress=True, save=False)]
