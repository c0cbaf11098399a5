"""Typed TOML settings shared by the trainers' configs (`ralm pretrain`, `ralm luke pretrain`).

A config is a dataclass; a setting read from TOML or a `--set NAME=VALUE` flag is checked against
the field's annotation with `fit` (converting only where nothing is lost: an int for a float, a
list for a tuple) and reported with `describe`/`show` ("steps = 'ten': expected an integer").
`toml_line` writes a setting back; `parse_value` reads a flag's value as TOML (a bare word is a
string). Nested tables, dates and inline tables are left out: the configs do not use them.
"""

from __future__ import annotations

import functools
import os
import sys
import types
import typing
from dataclasses import fields, is_dataclass
from pathlib import Path
from typing import Any

from ralm.errors import RalmError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

__all__ = [
    "check_known",
    "describe",
    "fit",
    "hints",
    "parse_value",
    "read_toml",
    "show",
    "toml_line",
    "tomllib",
]


@functools.cache
def hints(cls) -> dict[str, Any]:
    """The resolved field annotations of a dataclass (cached)."""
    return typing.get_type_hints(cls)


def fit(tp: Any, v: Any) -> tuple[bool, Any]:
    """(True, v converted) when `v` fits the annotation `tp`, else (False, v)."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        if v is None:
            return type(None) in args, v
        for a in args:
            if a is not type(None):
                ok, out = fit(a, v)
                if ok:
                    return True, out
        return False, v
    if tp is bool:
        return isinstance(v, bool), v
    if tp is int:
        return isinstance(v, int) and not isinstance(v, bool), v
    if tp is float:
        ok = isinstance(v, (int, float)) and not isinstance(v, bool)
        return ok, float(v) if ok else v
    if tp is str:
        return isinstance(v, str), v
    if origin in (list, tuple):
        if not isinstance(v, (list, tuple)):
            return False, v
        if origin is tuple and args and args[-1] is not Ellipsis:
            if len(v) != len(args):
                return False, v
            elem = list(args)
        else:
            elem = [args[0] if args else Any] * len(v)
        fitted = [fit(t, x) for t, x in zip(elem, v, strict=True)]
        if not all(ok for ok, _ in fitted):
            return False, v
        return True, origin(x for _, x in fitted)
    if tp is Any:
        return True, v
    if is_dataclass(tp):
        return isinstance(v, (tp, dict)), v
    return True, v  # an annotation this check does not know: the field's own checks decide


_PLURAL = {int: "integers", float: "numbers", str: "strings", bool: "true/false values"}


def describe(tp: Any) -> str:
    """An annotation in words: "an integer", "a list of 2 numbers", "a string or true or false"."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(describe(a) for a in args if a is not type(None))
    if origin in (list, tuple):
        if origin is tuple and args and args[-1] is not Ellipsis:
            if len(set(args)) == 1:
                return f"a list of {len(args)} {_PLURAL.get(args[0], 'values')}"
            return f"a list of {len(args)} values"
        return f"a list of {_PLURAL.get(args[0], 'values') if args else 'values'}"
    return {int: "an integer", float: "a number", str: "a string", bool: "true or false"}.get(
        tp, getattr(tp, "__name__", str(tp))
    )


def show(v: Any) -> str:
    """A value as the error quotes it: 'ten', 3, true, [1, 'a']."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(show(x) for x in v) + "]"
    if v is None:
        return "none"
    return repr(v)


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, str):
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    raise TypeError(f"cannot write {type(v).__name__} to TOML")


def toml_line(k: str, v: Any) -> str:
    """`k = value` as TOML: toml_line("lr", 0.001) -> 'lr = 0.001'."""
    return f"{k} = {_toml_value(v)}"


def parse_value(text: str) -> Any:
    """A `--set NAME=VALUE` value read as TOML: "3" -> 3, "[1, 2]" -> [1, 2], "abc" -> "abc"."""
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text  # a bare string


def read_toml(path: str | os.PathLike) -> dict[str, Any]:
    """The TOML file at `path` as a dict; RalmError naming the file when it is missing or not TOML."""
    p = Path(path)
    try:
        return tomllib.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise RalmError(f"{p}: no such config file") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise RalmError(f"{p}: not valid TOML ({exc})") from None


def check_known(cls, d: dict[str, Any], source: str = "config") -> None:
    """RalmError listing the keys of `d` that are no field of the dataclass `cls`."""
    names = {f.name for f in fields(cls)}
    unknown = sorted(set(d) - names)
    if unknown:
        raise RalmError(
            f"{source}: unknown setting(s) {', '.join(unknown)}; known: {', '.join(sorted(names))}"
        )
