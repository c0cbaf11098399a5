"""The flags many `ralm` commands share, declared once: `--out`, `--overwrite`, `--resume`,
`--device`, `--autocast`, `--threads`, `--seed`, `--quiet` and `--no-progress`; and the command
group (`ralm corpus`, `ralm index`, ...) that prints its help when no subcommand is given; and
`dataclass_from_args`, which builds a command's config dataclass from the parsed arguments by the
names of its fields.

Each verb's parser calls a helper where the flag belongs (the help lists options in the order they
are added) and passes its own help text, since what `--out` names differs from verb to verb (a
DocStore, a run directory, a PNG file). A helper adds one argparse action and returns it; the flag's
name, destination and kind are fixed here, so `--overwrite` is a switch and `--seed` an integer in
every command. What differs between commands (the help, a default, whether `--out` is required, a
Path or the string as given) is an argument of the helper.

Free of imports beyond the standard library: the parser of every command is built on every `ralm`
command. A shared module at the top of the package: any package's CLI may import it.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

__all__ = [
    "AUTOCAST",
    "add_autocast",
    "add_command_group",
    "add_device",
    "add_no_progress",
    "add_out",
    "add_overwrite",
    "add_quiet",
    "add_resume",
    "add_seed",
    "add_threads",
    "dataclass_from_args",
]

AUTOCAST = ("auto", "bf16", "off")  # the mixed-precision settings a trainer understands

T = TypeVar("T")


def add_out(
    parser: argparse.ArgumentParser,
    help: str | None = None,
    *,
    required: bool = True,
    type: Callable[[str], Any] | None = Path,
    metavar: str | None = None,
) -> argparse.Action:
    """Add `--out`, where the command writes: a file or a directory, as `help` says.

    required: False for a command that writes only when asked (`ralm table --out`); type: Path
    (the default) or None for the string as given; metavar: the name in the usage line (default
    OUT).
    """
    return parser.add_argument("--out", type=type, required=required, metavar=metavar, help=help)


def add_overwrite(parser: argparse.ArgumentParser, help: str) -> argparse.Action:
    """Add the switch `--overwrite`: replace what `--out` already holds (`help` says how)."""
    return parser.add_argument("--overwrite", action="store_true", help=help)


def add_resume(parser: argparse.ArgumentParser, help: str) -> argparse.Action:
    """Add the switch `--resume`: continue a run from its newest intact checkpoint."""
    return parser.add_argument("--resume", action="store_true", help=help)


def add_device(
    parser: argparse.ArgumentParser, help: str | None = None, *, default: str | None = None
) -> argparse.Action:
    """Add `--device` (auto, cpu, cuda, cuda:N), a string; default None: the command decides (a run's
    own setting, or the library's default)."""
    return parser.add_argument("--device", default=default, help=help)


def add_autocast(
    parser: argparse.ArgumentParser,
    help: str | None = None,
    *,
    default: str | None = None,
    choices: Sequence[str] | None = AUTOCAST,
) -> argparse.Action:
    """Add `--autocast`, the mixed-precision setting; choices: AUTOCAST (auto, bf16, off), or None
    for a command that leaves the check to the code it calls."""
    return parser.add_argument("--autocast", default=default, choices=choices, help=help)


def add_threads(parser: argparse.ArgumentParser, help: str) -> argparse.Action:
    """Add `--threads`, an integer (default None: torch's own number of threads)."""
    return parser.add_argument("--threads", type=int, default=None, help=help)


def add_seed(
    parser: argparse.ArgumentParser, help: str | None = None, *, default: int = 0
) -> argparse.Action:
    """Add `--seed`, an integer (default 0)."""
    return parser.add_argument("--seed", type=int, default=default, help=help)


def add_quiet(parser: argparse.ArgumentParser, help: str) -> argparse.Action:
    """Add the switch `--quiet`: no progress bars (or, for a server, no request log)."""
    return parser.add_argument("--quiet", action="store_true", help=help)


def add_no_progress(parser: argparse.ArgumentParser, help: str | None = None) -> argparse.Action:
    """Add the switch `--no-progress` (dest `no_progress`): no progress bars."""
    return parser.add_argument("--no-progress", action="store_true", help=help)


def add_command_group(
    sub: argparse._SubParsersAction,
    name: str,
    help: str,
    *,
    dest: str,
    metavar: str = "SUBCOMMAND",
    **kwargs: Any,
) -> argparse._SubParsersAction:
    """Add command `name` to `sub` as a group of subcommands and return the action its subcommands
    are added to; `ralm NAME` without a subcommand prints the group's help and exits with code 2.

    dest: the namespace attribute that names the subcommand given; metavar: its name in the help;
    kwargs: more of `add_parser`'s arguments (description, formatter_class).
    """
    group = sub.add_parser(name, help=help, **kwargs)
    subcommands = group.add_subparsers(dest=dest, metavar=metavar)
    group.set_defaults(func=functools.partial(_print_help, group))
    return subcommands


def _print_help(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    """A command group's `func`: its help, exit code 2 (a subcommand is missing)."""
    parser.print_help()
    return 2


def dataclass_from_args(
    config: type[T], args: argparse.Namespace, *, skip_none: bool = False, **given: Any
) -> T:
    """Build the dataclass `config` from parsed arguments: each of its fields that an argument's
    destination names takes that argument's value, then `given` sets the rest (a field the command
    names otherwise, computes or fixes). Fields neither names keep their defaults.

    skip_none: leave out arguments that were not given (None), so the field keeps its default (for
    commands whose flags all default to None, as `ralm finetune`'s).
    """
    names = {f.name for f in dataclasses.fields(config) if f.init}  # type: ignore[arg-type]
    kw = {k: v for k, v in vars(args).items() if k in names and not (skip_none and v is None)}
    kw.update(given)
    return config(**kw)
