"""Deprecated: the example types moved to `ralm.formats.types` (one layer down, where corpus,
retrieval and tasks can all import them). This alias stays for one release."""

import warnings

from ralm.formats.types import (
    SPLITS,
    TASKS,
    OpenQAExample,
    QAExample,
    TaggingExample,
    TaskData,
    TextExample,
)

__all__ = ["SPLITS", "TASKS", "OpenQAExample", "QAExample", "TaggingExample", "TaskData", "TextExample"]

warnings.warn(
    "ralm.tasks.types moved to ralm.formats.types; this alias goes in the next release",
    DeprecationWarning,
    stacklevel=2,
)
