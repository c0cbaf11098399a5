"""Progress bars that read well in a terminal and in a log file.

`tqdm(...)` takes tqdm's arguments and returns tqdm's usual bar when its stream is a terminal
(or a Jupyter kernel shows it). When the stream is not a terminal (CI, `nohup`, `| tee`,
`make demo > log`) it returns a bar that prints a whole line at most every
`RALM_PROGRESS_INTERVAL` seconds (default 30) instead of a carriage-return update per step:
one line when it starts, one per interval, and the final state when it closes.
"""

from __future__ import annotations

import os
import re
import sys
from typing import Any, TextIO

from tqdm.auto import tqdm as _auto_tqdm
from tqdm.std import tqdm as _std_tqdm

__all__ = ["log_interval", "tqdm"]

_ESCAPES = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def log_interval() -> float:
    """Seconds between two lines of a bar written to a non-terminal (RALM_PROGRESS_INTERVAL, default 30)."""
    raw = os.environ.get("RALM_PROGRESS_INTERVAL", "30")
    try:
        value = float(raw)
    except ValueError:
        return 30.0
    return value if value >= 0 else 30.0


def _interactive(stream: Any) -> bool:
    if "ipykernel" in sys.modules:  # a notebook: tqdm.auto draws a widget
        return True
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


class _Lines:
    """A stream wrapper that turns tqdm's in-place updates into whole lines: carriage returns,
    cursor moves and blank writes are dropped, and a line equal to the previous one is not repeated."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.last = ""

    def write(self, s: str) -> int:
        text = _ESCAPES.sub("", s).replace("\r", "").strip()
        if text and text != self.last:
            self.stream.write(text + "\n")
            self.last = text
        return len(s)

    def flush(self) -> None:
        self.stream.flush()


class _LogBar(_std_tqdm):
    """tqdm's plain-text bar whose postfix and description changes wait for the next interval's line
    (tqdm redraws on each `set_postfix` by default, which in a log is one line per step)."""

    def set_postfix(self, ordered_dict=None, refresh: bool = True, **kwargs: Any) -> None:
        super().set_postfix(ordered_dict, refresh=False, **kwargs)

    def set_postfix_str(self, s: str = "", refresh: bool = True) -> None:
        super().set_postfix_str(s, refresh=False)

    def set_description(self, desc: str | None = None, refresh: bool = True) -> None:
        super().set_description(desc, refresh=False)


def tqdm(*args: Any, **kwargs: Any) -> Any:
    """A tqdm bar (same arguments) suited to its stream: tqdm.auto's in a terminal or notebook,
    else one that prints a line at most every `log_interval()` seconds."""
    stream = kwargs.get("file") or sys.stderr
    if kwargs.get("disable") or _interactive(stream):
        return _auto_tqdm(*args, **kwargs)
    every = max(float(kwargs.get("mininterval", 0.1)), log_interval())
    kwargs.update(file=_Lines(stream), mininterval=every, maxinterval=max(every, 1.0))
    return _LogBar(*args, **kwargs)  # the plain-text bar, writing whole lines through _Lines


tqdm.write = _auto_tqdm.write  # type: ignore[attr-defined]
