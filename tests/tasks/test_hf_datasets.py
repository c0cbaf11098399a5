"""Hugging Face data in: `save_to_disk` folders, Parquet, Arrow and JSON lines written by the real
`datasets` package, read (with pyarrow only) into the same examples as the classic formats."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ralm.errors import RalmError
from ralm.formats.hf import class_names, read_label_names
from ralm.formats.types import OpenQAExample, QAExample, TaggingExample, TextExample
from ralm.tasks.datasets import detect_format, load_task_data, read_file

datasets = pytest.importorskip("datasets")
datasets.disable_progress_bars()

NER_NAMES = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]
SENTENCES = [
    (["Anne", "Hansen", "bor", "i", "Aarhus", "."], [1, 2, 0, 0, 3, 0]),
    (["Jens", "rejste", "til", "Oslo", "."], [1, 0, 0, 3, 0]),
    (["Det", "regner", "."], [0, 0, 0]),
]


def named(tags: list[int]) -> list[str]:
    return [NER_NAMES[t] for t in tags]


def ner_dataset(rows=SENTENCES):
    features = datasets.Features(
        {
            "id": datasets.Value("string"),
            "tokens": datasets.Sequence(datasets.Value("string")),
            "ner_tags": datasets.Sequence(datasets.ClassLabel(names=NER_NAMES)),
        }
    )
    return datasets.Dataset.from_dict(
        {
            "id": [f"s{i}" for i in range(len(rows))],
            "tokens": [t for t, _ in rows],
            "ner_tags": [g for _, g in rows],
        },
        features=features,
    )


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return path


def test_dane_style_jsonl_with_tag_names_is_read_as_rows(tmp_path):
    """The issue's case: {"tokens": [...], "ner_tags": [...]} JSON lines, once refused as CoNLL."""
    f = write_jsonl(tmp_path / "train.jsonl", [{"tokens": t, "ner_tags": named(g)} for t, g in SENTENCES])
    assert detect_format(f, "ner") == "hf"
    examples, fmt = read_file(f, "ner")
    assert fmt == "hf"
    assert examples == [TaggingExample(str(i), t, named(g)) for i, (t, g) in enumerate(SENTENCES)]


def test_jsonl_of_class_ids_needs_label_names(tmp_path):
    """datasets' to_json writes ClassLabel ids: names come from --labels (a file, in id order)."""
    f = tmp_path / "dane.jsonl"
    ner_dataset().to_json(str(f))
    with pytest.raises(RalmError, match=r'dane.jsonl: "ner_tags" holds class ids \(1\).*pass --labels FILE'):
        read_file(f, "ner")
    labels = tmp_path / "labels.txt"
    labels.write_text("\n".join(NER_NAMES) + "\n", encoding="utf-8")
    examples, _ = read_file(f, "ner", labels=labels)
    assert examples == [TaggingExample(f"s{i}", t, named(g)) for i, (t, g) in enumerate(SENTENCES)]
    with pytest.raises(RalmError, match=r'dane.jsonl:1: "ner_tags" id 2 is not one of the 2 label names'):
        read_file(f, "ner", labels=["O", "B-PER"])


def test_save_to_disk_dataset_dict_gives_splits_and_names(tmp_path):
    """A DatasetDict folder: train/validation/test from its folder names, tag names from the Arrow
    schema's features; dataset_info.json, state.json and dataset_dict.json are not read as data."""
    ds = ner_dataset()
    datasets.DatasetDict(train=ds, validation=ds.select([1]), test=ds.select([2])).save_to_disk(
        str(tmp_path / "dane")
    )
    data = load_task_data(tmp_path / "dane", "ner")
    assert data.format == "hf" and data.notes == []
    assert sorted(data.splits) == ["dev", "test", "train"]
    assert [ex.labels for ex in data.splits["train"]] == [named(g) for _, g in SENTENCES]
    assert data.splits["dev"] == [TaggingExample("s1", SENTENCES[1][0], named(SENTENCES[1][1]))]
    assert data.sources["test"] == [str(tmp_path / "dane" / "test" / "data-00000-of-00001.arrow")]
    assert data.labels() == ["B-LOC", "B-PER", "I-PER", "O"]


def test_parquet_names_from_schema_metadata_and_arrow_single_dataset(tmp_path):
    ds = ner_dataset()
    ds.to_parquet(str(tmp_path / "train.parquet"))
    examples, fmt = read_file(tmp_path / "train.parquet", "ner")
    assert fmt == "hf" and [ex.labels for ex in examples] == [named(g) for _, g in SENTENCES]
    ds.save_to_disk(str(tmp_path / "one"))  # a single Dataset: its shard is train, dev carved out
    data = load_task_data(tmp_path / "one", "ner", dev_fraction=0.34)
    assert len(data.splits["train"]) == 2 and len(data.splits["dev"]) == 1


def test_pos_upos_class_labels(tmp_path):
    upos = ["NOUN", "PUNCT", "VERB"]
    features = datasets.Features(
        {
            "tokens": datasets.Sequence(datasets.Value("string")),
            "upos": datasets.Sequence(datasets.ClassLabel(names=upos)),
        }
    )
    ds = datasets.Dataset.from_dict(
        {"tokens": [["Hunde", "gør", "."]], "upos": [[0, 2, 1]]}, features=features
    )
    ds.to_parquet(str(tmp_path / "ud.parquet"))
    assert read_file(tmp_path / "ud.parquet", "pos")[0] == [
        TaggingExample("0", ["Hunde", "gør", "."], ["NOUN", "VERB", "PUNCT"])
    ]


def test_squad_layout_parquet_equals_the_squad_json_reader(tmp_path):
    """datasets' SQuAD rows read as the SQuAD v1.1 reader reads the same questions (offsets repaired alike)."""
    ctx = "Rygge ligger i Østfold. Moss ligger ved Oslofjorden."
    rows = [
        {
            "id": "q1",
            "title": "Rygge",
            "question": "Hvor ligger Rygge?",
            "context": ctx,
            "answers": {"text": ["Østfold"], "answer_start": [16]},
        },  # off by one: 15 is right
        {
            "id": "q2",
            "title": "Moss",
            "question": "Hvor ligger Moss?",
            "context": ctx,
            "answers": {"text": ["Oslofjorden", "ved Oslofjorden"], "answer_start": [40, 36]},
        },
    ]
    datasets.Dataset.from_list(rows).to_parquet(str(tmp_path / "train.parquet"))
    squad = {
        "data": [
            {
                "title": r["title"],
                "paragraphs": [
                    {
                        "context": ctx,
                        "qas": [
                            {
                                "id": r["id"],
                                "question": r["question"],
                                "answers": [
                                    {"text": t, "answer_start": s}
                                    for t, s in zip(
                                        r["answers"]["text"], r["answers"]["answer_start"], strict=True
                                    )
                                ],
                            }
                        ],
                    }
                ],
            }
            for r in rows
        ]
    }
    (tmp_path / "squad.json").write_text(json.dumps(squad), encoding="utf-8")
    notes_hf, notes_squad = [], []
    got, fmt = read_file(tmp_path / "train.parquet", "extractive-qa", notes=notes_hf)
    want, _ = read_file(tmp_path / "squad.json", "extractive-qa", notes=notes_squad)
    assert fmt == "hf" and got == want
    assert got[0] == QAExample("q1", "Hvor ligger Rygge?", ctx, ["Østfold"], [15], "Rygge")
    assert len(notes_hf) == 1 and notes_hf[0].startswith("1 answer offsets repaired")
    write_jsonl(tmp_path / "squad.jsonl", rows)  # the same rows as JSON lines
    assert read_file(tmp_path / "squad.jsonl", "extractive-qa") == (want, "hf")


def test_classify_label_names_and_open_qa_rows(tmp_path):
    features = datasets.Features(
        {"text": datasets.Value("string"), "label": datasets.ClassLabel(names=["neg", "pos"])}
    )
    ds = datasets.Dataset.from_dict({"text": ["bad film", "fine film"], "label": [0, 1]}, features=features)
    ds.to_parquet(str(tmp_path / "sst.parquet"))
    assert read_file(tmp_path / "sst.parquet", "classify")[0] == [
        TextExample("0", "bad film", "neg"),
        TextExample("1", "fine film", "pos"),
    ]
    ds.to_json(str(tmp_path / "sst.jsonl"))  # ids: the text reader, named by --labels
    assert read_file(tmp_path / "sst.jsonl", "classify", labels=["neg", "pos"]) == (
        [TextExample("0", "bad film", "neg"), TextExample("1", "fine film", "pos")],
        "text",
    )
    nq = datasets.Dataset.from_dict(
        {"question": ["who wrote hamlet"], "answer": [["Shakespeare", "W. Shakespeare"]]}
    )
    nq.to_parquet(str(tmp_path / "nq.parquet"))
    assert read_file(tmp_path / "nq.parquet", "open-qa")[0] == [
        OpenQAExample("0", "who wrote hamlet", ["Shakespeare", "W. Shakespeare"])
    ]
    write_jsonl(tmp_path / "sq.jsonl", [{"question": "q?", "answers": {"text": ["a"], "answer_start": [0]}}])
    assert read_file(tmp_path / "sq.jsonl", "open-qa")[0] == [OpenQAExample("0", "q?", ["a"])]


def test_label_files_and_class_names(tmp_path):
    ds = ner_dataset()
    ds.save_to_disk(str(tmp_path / "d"))
    assert read_label_names(tmp_path / "d" / "dataset_info.json") == NER_NAMES
    (tmp_path / "l.json").write_text(json.dumps(NER_NAMES), encoding="utf-8")
    assert read_label_names(tmp_path / "l.json") == NER_NAMES
    old_style = {"feature": {"names": ["O", "B-X"], "_type": "ClassLabel"}, "_type": "Sequence"}
    assert class_names(old_style) == ["O", "B-X"] and class_names([old_style["feature"]]) == ["O", "B-X"]
    (tmp_path / "empty.txt").write_text("\n", encoding="utf-8")
    with pytest.raises(RalmError, match="empty.txt: the labels file is empty"):
        read_label_names(tmp_path / "empty.txt")


def test_files_no_format_fits_and_bad_rows(tmp_path):
    one = tmp_path / "words.txt"
    one.write_text("Anne\nHansen\n", encoding="utf-8")
    with pytest.raises(
        RalmError,
        match=r"words.txt: cannot read it as ner data \(its first line has one column\); "
        r"tried CoNLL-U .*; CoNLL .*; Hugging Face rows",
    ):
        detect_format(one, "ner")
    with pytest.raises(
        RalmError, match=r"cannot read it as extractive-qa data \(it is not JSON\); tried SQuAD JSON"
    ):
        detect_format(one, "extractive-qa")
    f = write_jsonl(tmp_path / "x.jsonl", [{"words": ["a"], "labels": ["O"]}])
    with pytest.raises(
        RalmError,
        match=r"x.jsonl: read as Hugging Face rows for ner, which need a tag list column "
        r"\('ner_tags' or 'tags' or 'ner'\); the rows have 'words', 'labels'",
    ):
        read_file(f, "ner")
    f = write_jsonl(tmp_path / "y.jsonl", [{"tokens": ["a", "b"], "ner_tags": ["O"]}])
    with pytest.raises(RalmError, match=r"y.jsonl:1: 2 tokens but 1 tags"):
        read_file(f, "ner")
    (tmp_path / "bad.parquet").write_bytes(b"PAR1 not really")
    with pytest.raises(RalmError, match=r"bad.parquet: not a readable Parquet or Arrow table"):
        read_file(tmp_path / "bad.parquet", "ner")


def test_conll_starting_with_a_bracket_token_stays_conll(tmp_path):
    f = tmp_path / "t.conll"
    f.write_text("[\tO\nAnne\tB-PER\n]\tO\n", encoding="utf-8")
    assert read_file(f, "ner") == ([TaggingExample("0", ["[", "Anne", "]"], ["O", "B-PER", "O"])], "conll")


def test_finetune_ner_on_a_save_to_disk_folder(tiny_dir, tmp_path):
    """The bar: `ralm finetune ner DIR` on a save_to_disk DatasetDict, no conversion."""
    from ralm.cli import main

    ds = ner_dataset(SENTENCES * 4)
    datasets.DatasetDict(train=ds, validation=ds.select([0, 1]), test=ds.select([1, 2])).save_to_disk(
        str(tmp_path / "dane")
    )
    args = [
        "finetune",
        "ner",
        str(tmp_path / "dane"),
        "--model",
        str(tiny_dir),
        "--out",
        str(tmp_path / "out"),
    ]
    args += [
        "--max-steps",
        "2",
        "--batch-size",
        "4",
        "--max-length",
        "32",
        "--device",
        "cpu",
        "--no-progress",
    ]
    assert main(args) == 0
    res = json.loads((tmp_path / "out" / "results.json").read_text())
    assert res["format"] == "hf" and res["labels"] == ["B-LOC", "B-PER", "I-PER", "O"]
    assert 0.0 <= res["summary"]["test"]["f1"]["mean"] <= 100.0
