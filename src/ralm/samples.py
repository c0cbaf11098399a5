"""Find the sample data that installed registry packages ship; no text is copied into ralm.

Samples (install with `pip install 'ralm[samples]'`):
    enwiki   gensim: shortened English Wikipedia dump (.bz2, ~107 full articles, ~480k words)
    bgwiki   gensim: shortened Bulgarian Wikipedia dump (3 pages)
    lee      gensim: lee_background.cor, 300 news articles, one per line
    chitchat chitchat-dataset: 7,168 English conversations (JSON)
    trivia   chatterbot-corpus: 261 trivia question / short answer pairs (YAML)
Wikipedia text is CC BY-SA; see each package for its licence.
"""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Iterator
from pathlib import Path

from ralm.errors import RalmError

_GENSIM_DATA = "test/test_data"
SAMPLES: dict[str, tuple[str, str, str]] = {
    # name: (package, path inside the package, format for `ralm corpus build`)
    "enwiki": (
        "gensim",
        f"{_GENSIM_DATA}/enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2",
        "wiki",
    ),
    "bgwiki": ("gensim", f"{_GENSIM_DATA}/bgwiki-latest-pages-articles-shortened.xml.bz2", "wiki"),
    "lee": ("gensim", f"{_GENSIM_DATA}/lee_background.cor", "text-lines"),
    "chitchat": ("chitchat_dataset", "dataset.json", "json"),
    "trivia": ("chatterbot_corpus", "data/english/trivia.yml", "yaml"),
}


def _package_dir(package: str) -> Path:
    spec = importlib.util.find_spec(package)  # locate without importing (gensim is slow to import)
    if spec is None or spec.origin is None:
        raise RalmError(f"sample data needs the package {package!r}; `pip install 'ralm[samples]'`")
    return Path(spec.origin).parent


def sample_path(name: str) -> Path:
    """Path of a named sample file (see the module docstring for the names)."""
    if name not in SAMPLES:
        raise RalmError(f"unknown sample {name!r}; choose one of {', '.join(SAMPLES)}")
    package, rel, _ = SAMPLES[name]
    path = _package_dir(package) / rel
    if not path.is_file():
        raise RalmError(f"{path}: sample file missing from package {package!r}; reinstall it")
    return path


def sample_format(name: str) -> str:
    """How `ralm corpus build` reads the sample: "wiki", "text-lines", "json" or "yaml"."""
    if name not in SAMPLES:
        raise RalmError(f"unknown sample {name!r}; choose one of {', '.join(SAMPLES)}")
    return SAMPLES[name][2]


def trivia_qa_pairs() -> list[tuple[str, list[str]]]:
    """The chatterbot trivia pairs as (question, [answer]) with the answer's final full stop removed."""
    import yaml

    data = yaml.safe_load(sample_path("trivia").read_text(encoding="utf-8"))
    pairs = []
    for conv in data["conversations"]:
        if len(conv) >= 2:
            answer = str(conv[1]).strip().rstrip(".")
            pairs.append((str(conv[0]).strip(), [answer]))
    return pairs


def chitchat_messages() -> Iterator[list[str]]:
    """Each chitchat conversation as a list of message strings, in file order."""
    data = json.loads(sample_path("chitchat").read_text(encoding="utf-8"))
    for conv_id in sorted(data):
        messages = []
        for turn in data[conv_id]["messages"]:
            messages.extend(m["text"] for m in turn)
        yield messages
