"""Fixtures for the downstream-task tests: a tiny fact corpus with a real FAISS index, and small
datasets in the real file formats, written by the tests themselves."""

from __future__ import annotations

import json

import pytest

from testkit import quiet_store

CITIES = [
    ("Oslo", "Norway", "1040"),
    ("Bergen", "Norway", "1070"),
    ("Copenhagen", "Denmark", "1167"),
    ("Stockholm", "Sweden", "1252"),
    ("Helsinki", "Finland", "1550"),
    ("Reykjavik", "Iceland", "874"),
    ("Aarhus", "Denmark", "770"),
    ("Trondheim", "Norway", "997"),
]


@pytest.fixture(scope="session")
def fact_store(tmp_path_factory, tiny_dir):
    """A DocStore of one short article per city (tiny-model tokenizer) and its dense + BM25 index."""
    from ralm.corpus.docstore import DocStore
    from ralm.retrieval.encoders import EncoderConfig
    from ralm.retrieval.index.build import build_index_dir

    tmp = tmp_path_factory.mktemp("fact-corpus")
    rows = [
        {"title": c, "text": f"{c} is a city in {n}. {c} was founded in {y}. Many people live in {c}."}
        for c, n, y in CITIES
    ]
    (tmp / "facts.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n", encoding="utf-8")
    quiet_store([tmp / "facts.jsonl"], tmp / "store", 24, tiny_dir)
    build_index_dir(
        DocStore(tmp / "store"),
        tmp / "index",
        encoder=str(tiny_dir),
        encoder_config=EncoderConfig(max_length=32),
        bm25=True,
        progress=False,
        log=lambda m: None,
    )
    return tmp


def _write(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


@pytest.fixture(scope="session")
def task_data(tmp_path_factory):
    """One small dataset per task in its real format, split into train/dev/test files."""
    root = tmp_path_factory.mktemp("task-data")
    good = ["a fine and moving film", "warm , funny and wise", "a joy to watch", "bright and clever"]
    bad = ["dull and tedious", "a silly , empty mess", "boring from start to end", "flat and lifeless"]
    for split in ("train", "dev", "test"):
        lines = [f"1 {t}" for t in good] + [f"0 {t}" for t in bad]
        _write(root / "classify" / f"stsa.binary.{split}", "\n".join(lines) + "\n")
    ner = []
    for c, n, _ in CITIES:
        ner.append(f"{c}\tB-LOC\nis\tO\nin\tO\n{n}\tB-LOC\n.\tO\n")
        ner.append(f"Ola\tB-PER\nNordmann\tI-PER\nvisited\tO\n{c}\tB-LOC\n")
    for split in ("train", "dev", "test"):
        _write(root / "ner" / f"{split}.conll", "\n".join(ner))
    conllu = []
    for i, (c, n, _) in enumerate(CITIES):
        conllu.append(
            f"# sent_id = s{i}\n# text = {c} is in {n}.\n"
            f"1\t{c}\t{c}\tPROPN\t_\t_\t3\tnsubj\t_\t_\n2\tis\tbe\tAUX\t_\t_\t3\tcop\t_\t_\n"
            f"3\tin\tin\tADP\t_\t_\t0\troot\t_\t_\n4\t{n}\t{n}\tPROPN\t_\t_\t3\tobl\t_\tSpaceAfter=No\n"
            "5\t.\t.\tPUNCT\t_\t_\t3\tpunct\t_\t_\n"
        )
    for split in ("train", "dev", "test"):
        _write(root / "pos" / f"x-ud-{split}.conllu", "\n".join(conllu) + "\n")
    paragraphs = []
    for c, n, y in CITIES:
        ctx = f"{c} is a city in {n}. It was founded in {y} and is known for its harbour."
        paragraphs.append(
            {
                "context": ctx,
                "qas": [
                    {
                        "id": f"{c}-when",
                        "question": f"When was {c} founded?",
                        "answers": [{"text": y, "answer_start": ctx.index(y)}],
                    },
                    {
                        "id": f"{c}-where",
                        "question": f"Where is {c}?",
                        "answers": [{"text": n, "answer_start": ctx.index(n)}],
                    },
                ],
            }
        )
    squad = {"version": "1.1", "data": [{"title": "cities", "paragraphs": paragraphs}]}
    for split in ("train", "dev", "test"):
        _write(root / "qa" / f"{split}.json", json.dumps(squad))
    oqa = "\n".join(json.dumps({"question": f"which country is {c} in", "answer": [n]}) for c, n, _ in CITIES)
    for split in ("train", "dev", "test"):
        _write(root / "openqa" / f"{split}.jsonl", oqa + "\n")
    return root
