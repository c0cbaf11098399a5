"""Errors a user can cause.

`RalmError` carries one line that names the offending file or value and says what to do.
The CLI prints it as `ralm: error: ...` and exits with code 2, without a traceback.
Everything else is a bug and keeps its traceback.
"""


class RalmError(Exception):
    """A user-caused error: bad path, malformed input, wrong model directory, ..."""

    exit_code = 2


class CorpusError(RalmError):
    """Malformed or unusable corpus input (dump, JSONL, text, DocStore)."""
