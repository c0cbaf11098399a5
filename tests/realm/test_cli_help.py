"""Every flag of the REALM commands says what it does, its default and its choices."""

from __future__ import annotations

import argparse
from dataclasses import fields

import pytest


def _sub(name):
    from ralm.cli import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices[name]


@pytest.mark.parametrize("command", ["pretrain", "evaluate-mlm", "fill", "export-reader", "plot"])
def test_every_option_has_help(command):
    p = _sub(command)
    for a in p._actions:
        assert a.help and a.help != argparse.SUPPRESS and a.help.strip(), (command, a.dest)
    p.format_help()  # every %-placeholder in a help string resolves


def test_pretrain_flags_give_defaults_and_choices():
    from ralm.realm.cli import FLAGS
    from ralm.realm.config import CHOICES, HELP, PretrainConfig

    assert set(HELP) == {f.name for f in fields(PretrainConfig)}  # every setting documented
    defaults = PretrainConfig()
    p = _sub("pretrain")
    by_dest = {a.dest: a for a in p._actions}
    for name in FLAGS:
        a = by_dest[name]
        default = getattr(defaults, name)
        assert a.default is None  # the config file, then PretrainConfig, supply the default
        if default not in (None, ""):
            assert a.help.endswith(f"(default: {default})"), (name, a.help)
        if name in CHOICES:
            assert list(a.choices) == list(CHOICES[name]), name
    assert by_dest["mode"].choices == ["realm", "mlm"]
    assert list(by_dest["null_doc"].choices) == ["empty", "zeros", "logit", "none"]
    assert list(by_dest["schedule"].choices) == ["cosine", "linear", "constant"]
    assert list(by_dest["autocast"].choices) == ["auto", "bf16", "off"]
    assert list(by_dest["candidates"].choices) == ["dense", "hybrid"]
    assert by_dest["steps"].help == "optimiser steps (default: 300)"
    text = p.format_help()
    assert "--refresh-mode {sync,async}" in text and "--index-kind" in text  # more settings have flags
    assert "masking.salient_rate" in by_dest["set"].help


def test_bad_choice_is_argparse_one_line(capsys):
    from ralm.cli import main

    with pytest.raises(SystemExit) as exc:
        main(["pretrain", "--mode", "bert"])
    assert exc.value.code == 2
    assert "argument --mode: invalid choice: 'bert' (choose from" in capsys.readouterr().err


def test_trainer_is_the_loop_alone():
    """The trainer is the loop; what it used to hold lives in build, run and data (no re-exports)."""
    import ralm.realm.training.trainer as trainer

    assert trainer.__all__ == ["pretrain", "step_metrics", "train_step"]
    assert not hasattr(trainer, "LoadedRun") and not hasattr(trainer, "load_run")
