"""ralm.cli_flags: each helper adds one flag with the name, kind, default and help it is given, a
parser built with the helpers parses what the same parser written out by hand parses, a command
group without its subcommand prints its help and exits 2, and dataclass_from_args fills a config's
fields from the arguments named like them."""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

import pytest

from ralm.cli_flags import (
    AUTOCAST,
    add_autocast,
    add_command_group,
    add_device,
    add_no_progress,
    add_out,
    add_overwrite,
    add_quiet,
    add_resume,
    add_seed,
    add_threads,
    dataclass_from_args,
)


def _action(parser: argparse.ArgumentParser, flag: str) -> argparse.Action:
    (action,) = [a for a in parser._actions if flag in a.option_strings]
    return action


def _fields(action: argparse.Action) -> dict:
    """What a flag is to argparse: everything `--help` and parsing read."""
    return {
        "option_strings": action.option_strings,
        "dest": action.dest,
        "type": action.type,
        "default": action.default,
        "required": action.required,
        "choices": action.choices,
        "metavar": action.metavar,
        "help": action.help,
        "nargs": action.nargs,
        "const": action.const,
        "action": type(action).__name__,
    }


def test_add_out_is_a_required_path_by_default():
    p = argparse.ArgumentParser()
    action = add_out(p, "run directory")
    assert action is _action(p, "--out")
    assert _fields(action) == {
        "option_strings": ["--out"],
        "dest": "out",
        "type": Path,
        "default": None,
        "required": True,
        "choices": None,
        "metavar": None,
        "help": "run directory",
        "nargs": None,
        "const": None,
        "action": "_StoreAction",
    }
    assert p.parse_args(["--out", "runs/x"]).out == Path("runs/x")


def test_add_out_optional_string_with_metavar():
    p = argparse.ArgumentParser()
    action = add_out(p, "where to write the model", required=False, type=None, metavar="MODEL.arpa")
    assert (action.type, action.required, action.metavar, action.help, action.default) == (
        None,
        False,
        "MODEL.arpa",
        "where to write the model",
        None,
    )
    assert p.parse_args([]).out is None
    assert p.parse_args(["--out", "m.arpa"]).out == "m.arpa"
    assert "--out MODEL.arpa  where to write the model" in p.format_help()


def test_add_out_without_help_and_missing_out_is_refused(capsys):
    p = argparse.ArgumentParser(prog="ralm x")
    assert add_out(p).help is None
    with pytest.raises(SystemExit) as exc:
        p.parse_args([])
    assert exc.value.code == 2
    assert "ralm x: error: the following arguments are required: --out" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("add", "flag", "dest"),
    [
        (add_overwrite, "--overwrite", "overwrite"),
        (add_resume, "--resume", "resume"),
        (add_quiet, "--quiet", "quiet"),
        (add_no_progress, "--no-progress", "no_progress"),
    ],
)
def test_switches_are_store_true_with_the_given_help(add, flag, dest):
    p = argparse.ArgumentParser()
    action = add(p, "the help")
    assert _fields(action) == {
        "option_strings": [flag],
        "dest": dest,
        "type": None,
        "default": False,
        "required": False,
        "choices": None,
        "metavar": None,
        "help": "the help",
        "nargs": 0,
        "const": True,
        "action": "_StoreTrueAction",
    }
    assert getattr(p.parse_args([]), dest) is False
    assert getattr(p.parse_args([flag]), dest) is True


def test_add_no_progress_help_is_optional():
    p = argparse.ArgumentParser()
    assert add_no_progress(p).help is None


def test_add_device_string_with_its_default():
    p = argparse.ArgumentParser()
    action = add_device(p, "cpu, cuda or auto", default="auto")
    assert (action.dest, action.type, action.default, action.choices, action.help) == (
        "device",
        None,
        "auto",
        None,
        "cpu, cuda or auto",
    )
    assert p.parse_args([]).device == "auto"
    assert p.parse_args(["--device", "cuda:1"]).device == "cuda:1"
    q = argparse.ArgumentParser()
    action = add_device(q)
    assert (action.default, action.help) == (None, None)
    assert q.parse_args([]).device is None


def test_add_autocast_checks_the_choices_unless_told_not_to(capsys):
    assert AUTOCAST == ("auto", "bf16", "off")
    p = argparse.ArgumentParser(prog="ralm x")
    action = add_autocast(p, "mixed precision: %(choices)s (default: %(default)s)", default="auto")
    assert (action.choices, action.default, action.type) == (AUTOCAST, "auto", None)
    assert "mixed precision: auto, bf16, off (default: auto)" in p.format_help()
    assert p.parse_args(["--autocast", "bf16"]).autocast == "bf16"
    with pytest.raises(SystemExit):
        p.parse_args(["--autocast", "fp16"])
    assert "invalid choice: 'fp16'" in capsys.readouterr().err
    free = argparse.ArgumentParser()
    action = add_autocast(free, "bf16 or off", default="auto", choices=None)
    assert (action.choices, action.help) == (None, "bf16 or off")
    assert free.parse_args(["--autocast", "fp16"]).autocast == "fp16"
    bare = argparse.ArgumentParser()
    action = add_autocast(bare)
    assert (action.choices, action.default, action.help) == (AUTOCAST, None, None)


def test_add_threads_and_add_seed_are_integers():
    p = argparse.ArgumentParser()
    threads = add_threads(p, "torch CPU threads")
    seed = add_seed(p, "random seed")
    assert (threads.type, threads.default, threads.help) == (int, None, "torch CPU threads")
    assert (seed.type, seed.default, seed.help) == (int, 0, "random seed")
    args = p.parse_args(["--threads", "4", "--seed", "7"])
    assert (args.threads, args.seed) == (4, 7)
    assert vars(p.parse_args([])) == {"threads": None, "seed": 0}
    q = argparse.ArgumentParser()
    action = add_seed(q, default=42)
    assert (action.default, action.help) == (42, None)
    assert q.parse_args([]).seed == 42


def _by_hand() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="ralm demo")
    p.add_argument("--out", type=Path, required=True, help="run directory")
    p.add_argument("--seed", type=int, default=0, help="random seed")
    p.add_argument("--device", default="auto", help="cpu, cuda or auto")
    p.add_argument("--autocast", default="auto", choices=("auto", "bf16", "off"), help="mixed precision")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    p.add_argument("--resume", action="store_true", help="continue")
    p.add_argument("--overwrite", action="store_true", help="start over")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument("--no-progress", action="store_true")
    return p


def _with_helpers() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="ralm demo")
    add_out(p, "run directory")
    add_seed(p, "random seed")
    add_device(p, "cpu, cuda or auto", default="auto")
    add_autocast(p, "mixed precision", default="auto")
    add_threads(p, "torch CPU threads")
    add_resume(p, "continue")
    add_overwrite(p, "start over")
    add_quiet(p, "no progress bar")
    add_no_progress(p)
    return p


@pytest.mark.parametrize(
    "argv",
    [
        ["--out", "r"],
        ["--out", "r", "--seed", "3", "--device", "cpu", "--autocast", "off", "--threads", "2"],
        ["--overwrite", "--out", "r", "--resume", "--quiet", "--no-progress"],
    ],
)
def test_a_parser_built_with_the_helpers_parses_as_one_written_by_hand(argv):
    hand, shared = _by_hand(), _with_helpers()
    assert [_fields(a) for a in shared._actions] == [_fields(a) for a in hand._actions]
    assert shared.format_help() == hand.format_help()
    assert vars(shared.parse_args(argv)) == vars(hand.parse_args(argv))


def test_parsed_namespace_exactly():
    args = _with_helpers().parse_args(["--out", "r", "--seed", "3", "--overwrite"])
    assert vars(args) == {
        "out": Path("r"),
        "seed": 3,
        "device": "auto",
        "autocast": "auto",
        "threads": None,
        "resume": False,
        "overwrite": True,
        "quiet": False,
        "no_progress": False,
    }


def test_command_group_dispatches_and_alone_prints_its_help(capsys):
    top = argparse.ArgumentParser(prog="ralm")
    sub = top.add_subparsers(dest="command", metavar="COMMAND")
    groups = add_command_group(
        sub, "corpus", "build and inspect", dest="corpus_command", description="The corpus commands."
    )
    assert isinstance(groups, argparse._SubParsersAction)
    assert (groups.dest, groups.metavar) == ("corpus_command", "SUBCOMMAND")
    info = groups.add_parser("info", help="print a summary")
    info.set_defaults(func=lambda args: 0)
    group = sub.choices["corpus"]
    assert (group.prog, group.description) == ("ralm corpus", "The corpus commands.")
    assert "corpus    build and inspect" in top.format_help()

    args = top.parse_args(["corpus", "info"])
    assert (args.command, args.corpus_command, args.func(args)) == ("corpus", "info", 0)

    args = top.parse_args(["corpus"])
    assert (args.command, args.corpus_command) == ("corpus", None)
    assert args.func(args) == 2
    assert capsys.readouterr().out == group.format_help()


def test_command_group_metavar_and_formatter():
    top = argparse.ArgumentParser(prog="ralm")
    sub = top.add_subparsers(dest="command")
    worlds = add_command_group(
        sub,
        "world",
        "write a world",
        dest="world",
        metavar="WORLD",
        description="line one\n    kept as written",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    worlds.add_parser("records", help="records world")
    text = sub.choices["world"].format_help()
    assert text.startswith("usage: ralm world [-h] WORLD ...\n")
    assert "line one\n    kept as written\n" in text
    assert "  WORLD\n    records   records world\n" in text


@dataclasses.dataclass
class _Config:
    steps: int = 10
    lr: float = 1e-4
    name: str = "run"
    seed: int = 0
    derived: int = dataclasses.field(init=False, default=0)


def test_dataclass_from_args_takes_the_fields_arguments_name():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=None)
    p.add_argument("--lr", type=float, default=3e-4)
    p.add_argument("--run-name", default="x")  # dest run_name: no field of that name
    args = p.parse_args(["--steps", "5"])
    args.func = print  # what set_defaults adds beside the arguments is not a field either
    assert dataclass_from_args(_Config, args) == _Config(steps=5, lr=3e-4)
    assert dataclass_from_args(_Config, args, name=args.run_name, seed=7) == _Config(5, 3e-4, "x", 7)
    # `given` wins over the argument of the same name
    assert dataclass_from_args(_Config, args, steps=2).steps == 2


def test_dataclass_from_args_skip_none_keeps_the_defaults():
    args = argparse.Namespace(steps=None, lr=None, name="a")
    assert dataclass_from_args(_Config, args, skip_none=True) == _Config(name="a")
    # without skip_none a None is passed on as the arguments hold it
    assert dataclass_from_args(_Config, args) == _Config(steps=None, lr=None, name="a")
