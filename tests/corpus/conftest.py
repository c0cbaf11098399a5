"""Helpers of the corpus tests: run the real CLI in-process; a small DocStore to damage."""

from __future__ import annotations

import json
import shutil

import pytest

from ralm.cli import main


@pytest.fixture
def cli(capsys):
    """cli(*argv) -> (exit code, stdout, stderr lines without progress bars) of `ralm ARGV`."""

    def run(*argv):
        code = main([str(a) for a in argv])
        cap = capsys.readouterr()
        err = [line for line in cap.err.strip().splitlines() if not line.startswith(("pass ", "\r"))]
        return code, cap.out, err

    return run


def _leftovers(out):
    return sorted(
        p.name
        for p in out.parent.iterdir()
        if p.name.startswith(f".{out.name}.") and p.name != f".{out.name}.lock"
    )


@pytest.fixture
def leftovers():
    """leftovers(out) -> hidden siblings of `out` a build could leave (temp, old dirs), not its lock."""
    return _leftovers


LINKED_DOCS = [
    {
        "id": f"d{i}",
        "title": f"Doc {i}",
        "text": f"Oslo is a city in Norway. Doc {i} was written on 12 April {1800 + i}. "
        + "The river runs past the old mountain and the king's house. " * (i % 4 + 1),
        "links": [{"start": 0, "end": 4, "target": "Oslo"}, {"start": 18, "end": 24, "target": "Norway"}],
    }
    for i in range(12)
]


def write_linked_jsonl(path):
    path.write_text("".join(json.dumps(x) + "\n" for x in LINKED_DOCS), encoding="utf-8")
    return path


@pytest.fixture
def linked_jsonl(tmp_path):
    """docs.jsonl: 12 short documents with links and dates."""
    return write_linked_jsonl(tmp_path / "docs.jsonl")


@pytest.fixture(scope="module")
def built_store(tmp_path_factory):
    """A DocStore of 12 linked JSONL documents in several shards (built once per module)."""
    from ralm.corpus.build import BuildConfig, build_docstore

    d = tmp_path_factory.mktemp("built")
    src = write_linked_jsonl(d / "docs.jsonl")
    cfg = BuildConfig(chunk_size=24, rows_per_shard=8, row_group_size=4)
    store = build_docstore([src], d / "store", cfg, progress=False, log=lambda m: None)
    assert len(store.shard_paths) >= 2
    return store.root


@pytest.fixture
def store_copy(built_store, tmp_path):
    """A fresh copy of `built_store` that a test may damage."""
    dst = tmp_path / "store"
    shutil.copytree(built_store, dst)
    return dst
