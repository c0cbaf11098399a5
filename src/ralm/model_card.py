"""Model cards: the README.md with a Hub YAML header that exported models carry.

`model_card(...)` renders one: a YAML block between `---` lines with the Hugging Face Hub's
metadata keys (library_name, pipeline_tag, tags, base_model, license, language), then Markdown
saying what the model is, how it was made and how to load it. Values are written as JSON
strings, which YAML reads as they are, so no YAML library is needed.

Deliberately left out: uploading (`huggingface_hub.upload_folder` does that) and evaluation
results in the Hub's model-index format.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

__all__ = ["model_card", "write_model_card"]

CARD_FILE = "README.md"


def _yaml_value(value: str | list[str]) -> str:
    """`"x"` for a string, a block list for a list: `_yaml_value(["a"]) == '\\n- "a"'`."""
    if isinstance(value, list):
        return "".join(f"\n- {json.dumps(v, ensure_ascii=False)}" for v in value)
    return " " + json.dumps(value, ensure_ascii=False)


def model_card(
    title: str,
    summary: str,
    *,
    library_name: str,
    pipeline_tag: str,
    tags: list[str],
    usage: str,
    details: dict[str, str] | None = None,
    base_model: str | None = None,
    license: str | None = None,
    language: list[str] | None = None,
) -> str:
    """The text of a README.md model card: Hub YAML header, summary, details table, usage code.

    Example: `model_card("r", "A reader.", library_name="transformers", pipeline_tag="fill-mask",
    tags=["ralm"], usage="...")` starts with `---\\nlibrary_name: "transformers"\\n`.
    base_model must be a Hub id (a local path is not one) and is left out when None.
    """
    meta: dict[str, str | list[str]] = {
        "library_name": library_name,
        "pipeline_tag": pipeline_tag,
        "tags": tags,
    }
    if base_model:
        meta["base_model"] = base_model
    if license:
        meta["license"] = license
    if language:
        meta["language"] = language
    lines = [
        "---",
        *(f"{k}:{_yaml_value(v)}" for k, v in meta.items()),
        "---",
        "",
        f"# {title}",
        "",
        summary,
        "",
    ]
    if details:
        lines += ["| | |", "| --- | --- |", *(f"| {k} | {v} |" for k, v in details.items()), ""]
    lines += ["## Usage", "", "```python", usage.strip(), "```", ""]
    return "\n".join(lines)


def write_model_card(directory: str | os.PathLike, text: str) -> Path:
    """Write `text` as `directory/README.md`; returns the path."""
    path = Path(directory) / CARD_FILE
    path.write_text(text, encoding="utf-8")
    return path
