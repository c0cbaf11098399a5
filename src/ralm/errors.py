"""Errors a user can cause.

`RalmError` carries one line that names the offending file or value and says what to do.
The CLI prints it as `ralm: error: ...` and exits with code 2, without a traceback.
Everything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator


class RalmError(Exception):
    """A user-caused error: bad path, malformed input, wrong model directory, ..."""

    exit_code = 2


class CorpusError(RalmError):
    """Malformed or unusable corpus input (dump, JSONL, text, DocStore)."""


def exception_chain(exc: BaseException):
    """`exc`, then its __cause__ (else __context__), and so on, each once (cycles stop)."""
    seen: set[int] = set()
    e: BaseException | None = exc
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        yield e
        e = e.__cause__ or e.__context__


@contextlib.contextmanager
def opening(path: str | os.PathLike, what: str) -> Iterator[None]:
    """Turn the OSError of opening `path` in the block into one RalmError line naming it as `what`
    ("an ARPA file", "a text file"): not found, a directory, or unreadable (the system's reason).

    Example: with opening("x.arpa", "an ARPA file"): open("x.arpa") -> RalmError("ARPA file not found: x.arpa").
    """
    name = os.fspath(path)
    kind = what.split(" ", 1)[1]
    try:
        yield
    except FileNotFoundError:
        raise RalmError(f"{kind} not found: {name}") from None
    except IsADirectoryError:
        raise RalmError(f"{name} is a directory, not {what}") from None
    except OSError as exc:
        raise RalmError(f"cannot read {kind} {name}: {exc.strerror}") from None


def check_json_text(obj: object, raw: str, where: str, error: type[RalmError] = RalmError) -> None:
    """Raise `error` if parsed JSON `obj` holds a lone UTF-16 surrogate (a "\\ud800" escape with no
    pair), which Python's json accepts but no UTF-8 writer or tokenizer can handle.

    raw: the JSON text `obj` was parsed from; only text with a \\uD8xx-\\uDFxx escape is examined.
    Example: check_json_text(json.loads('"\\\\ud800"'), '"\\\\ud800"', "x.jsonl:3") -> RalmError.
    """
    if "\\u" not in raw and "\\U" not in raw:
        return
    import json
    import re

    if not re.search(r"\\[uU][dD][89a-fA-F]", raw):
        return
    try:
        json.dumps(obj, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError as exc:
        bad = exc.object[exc.start : exc.end].encode("unicode_escape").decode("ascii")
        raise error(
            f"{where}: text holds an unpaired surrogate escape ({bad}), which is not a character; "
            "fix or drop it (a character outside the BMP is written as a \\ud83d\\ude00-style pair)"
        ) from None
