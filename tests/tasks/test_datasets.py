"""Dataset readers: each format on fixtures written here in the real layouts (quirks included), bad
input as one-line RalmErrors, split naming, and the real gold files when /work/shared/data exists."""

from __future__ import annotations

import importlib.util
import json
from collections import Counter
from pathlib import Path

import pytest

from ralm.errors import RalmError
from ralm.formats.types import OpenQAExample, QAExample, TaggingExample, TaskData, TextExample
from ralm.tasks.datasets import (
    check_label_sets,
    detect_format,
    load_task_data,
    read_file,
    split_of,
)


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def conllu_line(i, form, upos, misc="_"):
    return "\t".join([str(i), form, form.lower(), upos, "_", "_", "0", "dep", "_", misc])


def ndt_line(i, form, tag, name="O"):
    return "\t".join([str(i), form, form.lower(), tag, tag, "_", "0", "FRAG", "_", f"name={name}"])


def squad_file(path: Path, questions: list[tuple], indent=4) -> Path:
    """NorQuAD-style flattened SQuAD: one paragraph per question; questions are (id, q, context, text, start)."""
    paragraphs = [
        {
            "qas": [
                {
                    "question": q,
                    "id": qid,
                    "answers": [{"text": t, "answer_start": s, "answer_id": 1}] if t is not None else [],
                    "is_impossible": t is None,
                }
            ],
            "context": ctx,
            "document_id": 7,
        }
        for qid, q, ctx, t, s in questions
    ]
    return write(path, json.dumps({"data": [{"paragraphs": paragraphs}]}, indent=indent, ensure_ascii=False))


CTX = "Moss lufthavn Rygge har vært stengt siden 2016. Rygge ligger i Østfold."


# ----------------------------------------------------------------------------- squad


def test_squad_repairs_off_by_one_offset_with_one_note(tmp_path):
    f = squad_file(
        tmp_path / "training_dataset_flattened.json",
        [
            (1, "Hvor?", CTX, "Rygge", 14),  # correct
            (1, "Når?", CTX, "2016", 41),  # off by one (the quirk) and a duplicate id
            (2, "Hva?", CTX, "Østfold", 60),  # off by more
        ],
    )
    notes: list[str] = []
    examples, fmt = read_file(f, "extractive-qa", notes=notes)
    assert fmt == "squad"
    assert [ex.id for ex in examples] == ["0", "1", "2"]  # ids not unique in the file: positions
    assert all(isinstance(ex, QAExample) for ex in examples)
    assert [ex.answer_starts for ex in examples] == [[14], [42], [63]]
    for ex in examples:
        s = ex.answer_starts[0]
        assert ex.context[s : s + len(ex.answers[0])] == ex.answers[0]
    assert notes == [
        f"2 answer offsets repaired in {f} (moved to the answer text's occurrence nearest the given answer_start)"
    ]


def test_squad_repair_picks_the_nearest_occurrence(tmp_path):
    f = squad_file(tmp_path / "a.json", [("q1", "Hvor?", CTX, "Rygge", 45)])
    (ex,), _ = read_file(f, "extractive-qa")
    assert ex.id == "q1" and ex.answer_starts == [48]


def test_squad_answer_not_in_context(tmp_path):
    f = squad_file(tmp_path / "a.json", [("q7", "Hvor?", CTX, "Bergen", 3)])
    with pytest.raises(
        RalmError, match=r"a\.json: question q7: answer 'Bergen' does not occur in its context"
    ):
        read_file(f, "extractive-qa")


def test_squad_malformed_json_names_file_and_line(tmp_path):
    f = write(tmp_path / "a.json", '{"data": [\n  {"paragraphs": [}\n]}')
    with pytest.raises(RalmError, match=r"a\.json:2: malformed JSON"):
        read_file(f, "extractive-qa")


def test_squad_missing_field_is_a_ralm_error(tmp_path):
    f = write(tmp_path / "a.json", json.dumps({"data": [{"paragraphs": [{"qas": []}]}]}))
    with pytest.raises(RalmError, match=r'data\[0\]\.paragraphs\[0\]: "context" is missing'):
        read_file(f, "extractive-qa")


def test_squad_unanswerable_skipped_in_train_only(tmp_path):
    squad_file(tmp_path / "train.json", [("a", "Hvor?", CTX, "Rygge", 14), ("b", "Hvem?", CTX, None, 0)])
    squad_file(tmp_path / "dev.json", [("c", "Hvem?", CTX, None, 0)])
    data = load_task_data(tmp_path, "extractive-qa")
    assert [ex.id for ex in data.splits["train"]] == ["a"]
    assert [ex.answers for ex in data.splits["dev"]] == [[]]
    assert data.notes == [f"1 questions without answers skipped in train ({tmp_path / 'train.json'})"]


def test_squad_compact_file_for_open_qa(tmp_path):
    f = squad_file(tmp_path / "dev.json", [("a", "Hvor?", CTX, "Rygge", 14)], indent=None)
    assert detect_format(f, "open-qa") == "squad"
    (ex,), fmt = read_file(f, "open-qa")
    assert fmt == "squad" and ex == OpenQAExample("a", "Hvor?", ["Rygge"])


# ----------------------------------------------------------------------------- conllu / NDT

UD = "\n".join(
    [
        "# newdoc id = x",
        "# sent_id = s1",
        "# text = Han bor i Oslo.",
        conllu_line(1, "Han", "PRON"),
        conllu_line(2, "bor", "VERB"),
        "3-4\tdu\t_\t_\t_\t_\t_\t_\t_\t_",  # multiword token
        conllu_line(3, "i", "ADP"),
        conllu_line(4, "Oslo", "PROPN", "SpaceAfter=No|name=B-GPE_LOC"),
        "4.1\tx\tx\tX\t_\t_\t_\t_\t_\t_",  # empty node
        conllu_line(5, ".", "PUNCT"),
        "",
        "# sent_id = s2",
        conllu_line(1, "Kari", "PROPN", "name=B-PER"),
        conllu_line(2, "Nordmann", "PROPN", "name=I-PER|SpaceAfter=No"),
        "",
    ]
)


def test_conllu_pos_skips_comments_multiword_and_empty_nodes(tmp_path):
    f = write(tmp_path / "x-ud-dev.conllu", UD)
    examples, fmt = read_file(f, "pos")
    assert fmt == "conllu"
    assert examples == [
        TaggingExample("s1", ["Han", "bor", "i", "Oslo", "."], ["PRON", "VERB", "ADP", "PROPN", "PUNCT"]),
        TaggingExample("s2", ["Kari", "Nordmann"], ["PROPN", "PROPN"]),
    ]


def test_conllu_ner_from_misc_name(tmp_path):
    f = write(tmp_path / "x.conllu", UD)
    examples, _ = read_file(f, "ner")
    assert [ex.labels for ex in examples] == [["O", "O", "O", "B-GPE_LOC", "O"], ["B-PER", "I-PER"]]


def test_conllu_ner_without_name_tags_is_refused(tmp_path):
    f = write(tmp_path / "x.conllu", conllu_line(1, "Han", "PRON") + "\n")
    with pytest.raises(RalmError, match=r"x\.conllu: no name=\.\.\. entity tags"):
        read_file(f, "ner")


NDT = "\n".join(
    [
        ndt_line(1, "Lam", "subst"),
        ndt_line(2, "fra", "prep"),
        ndt_line(3, "Rygge", "subst", "B-GPE_LOC"),
        ndt_line(4, "|", "clb"),
        "",
        ndt_line(1, "Hei", "interj"),
        ndt_line(2, "|", "clb"),
        "",
    ]
)


def test_ndt_pipes_dropped_for_ner_with_note(tmp_path):
    f = write(tmp_path / "ap001_0000.conll", NDT)
    assert detect_format(f, "ner") == "conllu"
    notes: list[str] = []
    examples, fmt = read_file(f, "ner", notes=notes)
    assert fmt == "conllu"
    assert [ex.tokens for ex in examples] == [["Lam", "fra", "Rygge"], ["Hei"]]
    assert examples[0].labels == ["O", "O", "B-GPE_LOC"]
    assert notes == [f"2 NDT paragraph tokens '|' (tagged O) dropped in {f}"]


def test_ndt_refused_for_pos(tmp_path):
    f = write(tmp_path / "ap001_0000.conll", NDT)
    with pytest.raises(RalmError, match=r"ap001_0000\.conll:1: column 4 holds 'subst', not a UPOS tag"):
        read_file(f, "pos")


def test_conllu_wrong_column_count_names_file_and_line(tmp_path):
    f = write(tmp_path / "x.conllu", UD.replace(conllu_line(2, "bor", "VERB"), "2\tbor\tbo\tVERB"))
    with pytest.raises(RalmError) as err:
        read_file(f, "pos")
    assert str(err.value).startswith(f"{f}:5: expected 10 tab-separated columns (CoNLL-U), found 4")


# ----------------------------------------------------------------------------- conll (WNUT-17)

WNUT = "-DOCSTART-\tO\n\n@paulwalk\tO\nEmpire\tB-location\nState\tI-location\n\n#hashtag\tO\nhi\tO\n"


def test_conll_wnut_style(tmp_path):
    f = write(tmp_path / "wnut17train.conll", WNUT)
    assert detect_format(f, "ner") == "conll"
    examples, fmt = read_file(f, "ner")
    assert fmt == "conll"
    assert examples == [
        TaggingExample("0", ["@paulwalk", "Empire", "State"], ["O", "B-location", "I-location"]),
        TaggingExample("1", ["#hashtag", "hi"], ["O", "O"]),
    ]


def test_conll_whitespace_columns_token_first_tag_last(tmp_path):
    text = "-DOCSTART- -X- -X- O\n\nEU NNP B-NP B-ORG\nrejects VBZ B-VP O\n"
    (ex,), _ = read_file(write(tmp_path / "eng.train", text), "ner")
    assert ex.tokens == ["EU", "rejects"] and ex.labels == ["B-ORG", "O"]


def test_conll_inconsistent_columns_names_file_and_line(tmp_path):
    f = write(tmp_path / "a.conll", "a\tO\nb\tx\tO\n")
    with pytest.raises(RalmError, match=r"a\.conll:2: found 3 columns where line 1 has 2"):
        read_file(f, "ner")


def test_conll_non_iob2_tag(tmp_path):
    f = write(tmp_path / "a.conll", "a\tO\n\nb\tS-PER\n")
    with pytest.raises(RalmError, match=r"a\.conll:3: tag 'S-PER' is not IOB2"):
        read_file(f, "ner")
    (_, ex), _ = read_file(f, "pos")  # POS takes any tag
    assert ex.labels == ["S-PER"]


# ----------------------------------------------------------------------------- text classification


def test_sst2_label_first_lines(tmp_path):
    f = write(tmp_path / "stsa.binary.train", "1 a stirring , funny film\n0 apparently reassembled .\n\n")
    examples, fmt = read_file(f, "classify")
    assert fmt == "text"
    assert examples == [
        TextExample("0", "a stirring , funny film", "1"),
        TextExample("1", "apparently reassembled .", "0"),
    ]


def test_norec_json_list(tmp_path):
    rows = [
        {"sent_id": "108886-02-01", "text": "Hun avslutter med sin største hit .", "label": "Positive"},
        {"sent_id": "500236-01-01", "text": "Unyansert om slaveriet", "label": "Negative"},
    ]
    f = write(tmp_path / "dev.json", json.dumps(rows))
    examples, _ = read_file(f, "classify")
    assert examples == [TextExample(r["sent_id"], r["text"], r["label"]) for r in rows]


def test_jsonl_with_sentence_and_int_label(tmp_path):
    f = write(tmp_path / "a.jsonl", '{"sentence": "good", "label": 1}\n\n{"sentence": "bad", "label": 0}\n')
    assert read_file(f, "classify")[0] == [TextExample("0", "good", "1"), TextExample("1", "bad", "0")]


def test_jsonl_bad_line_and_missing_field(tmp_path):
    with pytest.raises(RalmError, match=r"a\.jsonl:2: malformed JSON line"):
        read_file(write(tmp_path / "a.jsonl", '{"text": "a", "label": 1}\n{"text": \n'), "classify")
    with pytest.raises(RalmError, match=r'b\.jsonl:1: needs a string "text"'):
        read_file(write(tmp_path / "b.jsonl", '{"label": 1}\n'), "classify")


def test_tsv_with_header_any_order(tmp_path):
    f = write(tmp_path / "a.tsv", "label\tid\tsentence\npos\tx1\tgreat fun\nneg\tx2\tdull\n")
    assert read_file(f, "classify")[0] == [
        TextExample("x1", "great fun", "pos"),
        TextExample("x2", "dull", "neg"),
    ]


@pytest.mark.parametrize("label_first", [True, False])
def test_tsv_without_header_finds_the_label_column(tmp_path, label_first):
    rows = [("1", "great fun"), ("0", "dull stuff"), ("1", "loved it")]
    lines = [f"{lab}\t{txt}" if label_first else f"{txt}\t{lab}" for lab, txt in rows]
    examples, _ = read_file(write(tmp_path / "a.tsv", "\n".join(lines) + "\n"), "classify")
    assert [(ex.label, ex.text) for ex in examples] == rows


def test_fasttext_labels_and_cp1252_fallback(tmp_path):
    f = tmp_path / "polarity.cor"
    f.write_bytes(
        "__label__neg the action clichés pile up \u2014 badly . \n__label__pos fine .\n".encode("cp1252")
    )
    notes: list[str] = []
    examples, _ = read_file(f, "classify", notes=notes)
    assert examples == [
        TextExample("0", "the action clichés pile up \u2014 badly .", "neg"),
        TextExample("1", "fine .", "pos"),
    ]
    assert notes == [f"1 file(s) read as cp1252 (not valid UTF-8): {f}"]


@pytest.mark.skipif(importlib.util.find_spec("gensim") is None, reason="gensim (ralm[samples]) not installed")
def test_gensim_pang_lee_polarity():
    from ralm.samples import _package_dir

    examples, fmt = read_file(_package_dir("gensim") / "test/test_data/pang_lee_polarity.cor", "classify")
    assert fmt == "text" and len(examples) == 200
    assert Counter(ex.label for ex in examples) == {"neg": 100, "pos": 100}
    assert examples[0].text == "simplistic , silly and tedious ."


def test_plain_text_is_not_label_first(tmp_path):
    lines = [f"word{i} is a sentence without a label" for i in range(60)]
    with pytest.raises(RalmError, match=r"60 distinct labels in 60 examples"):
        read_file(write(tmp_path / "a.txt", "\n".join(lines)), "classify")


# ----------------------------------------------------------------------------- open QA


def test_nq_open_jsonl_with_answer(tmp_path):
    f = write(
        tmp_path / "NQ-open.dev.jsonl",
        '{"question": "when was the last time anyone was on the moon", "answer": ["14 December 1972 UTC", '
        '"December 1972"]}\n{"question": "who wrote it", "answer": ["Bobby Scott"], "extra": [1]}\n',
    )
    assert detect_format(f, "open-qa") == "openqa"
    examples, fmt = read_file(f, "open-qa")
    assert fmt == "openqa"
    assert examples == [
        OpenQAExample(
            "0", "when was the last time anyone was on the moon", ["14 December 1972 UTC", "December 1972"]
        ),
        OpenQAExample("1", "who wrote it", ["Bobby Scott"]),
    ]


def test_webquestions_json_array(tmp_path):
    text = (
        '[\n {"qId": "wqs000000", "answers": ["Jamaican Creole English Language", "Jamaican English"], '
        '"qText": "what does jamaican people speak?"},\n {"qId": "wqs000001", "answers": ["Lawyer"], '
        '"qText": "what did james k polk do before he was president?"}\n]\n'
    )
    examples, _ = read_file(write(tmp_path / "test.json", text), "open-qa")
    assert examples[0] == OpenQAExample(
        "wqs000000",
        "what does jamaican people speak?",
        ["Jamaican Creole English Language", "Jamaican English"],
    )
    assert examples[1].id == "wqs000001"


def test_dpr_tsv(tmp_path):
    f = write(
        tmp_path / "nq-test.qa.csv",
        'who got the first nobel prize in physics\t["Wilhelm Conrad Röntgen"]\n'
        "who sang it\t['Ain\\'t Nobody', \"Rufus's band\"]\n",
    )
    examples, _ = read_file(f, "open-qa")
    assert [ex.answers for ex in examples] == [["Wilhelm Conrad Röntgen"], ["Ain't Nobody", "Rufus's band"]]
    bad = write(tmp_path / "bad.tsv", "q\t[__import__('os')]\n")
    with pytest.raises(RalmError, match=r"bad\.tsv:1: the answer column is not a list"):
        read_file(bad, "open-qa")


# ----------------------------------------------------------------------------- detection, errors


def test_format_checks(tmp_path):
    f = write(tmp_path / "a.conllu", UD)
    with pytest.raises(RalmError, match="unknown task"):
        read_file(f, "parse")
    with pytest.raises(RalmError, match="format 'squad' does not fit task 'pos'"):
        read_file(f, "pos", fmt="squad")
    with pytest.raises(RalmError, match="unknown dataset format"):
        read_file(f, "pos", fmt="csv")
    assert read_file(f, "pos", fmt="conllu")[1] == "conllu"


def test_missing_empty_and_directory_inputs(tmp_path):
    with pytest.raises(RalmError, match=r"nope\.json: no such file"):
        read_file(tmp_path / "nope.json", "classify")
    with pytest.raises(RalmError, match=r"empty\.jsonl: the file is empty"):
        read_file(write(tmp_path / "empty.jsonl", "\n \n"), "classify")
    with pytest.raises(RalmError, match="is a directory"):
        read_file(tmp_path, "classify")
    with pytest.raises(RalmError, match=r"no\.conll: no examples found"):
        read_file(write(tmp_path / "no.conll", "-DOCSTART-\tO\n"), "ner")


@pytest.mark.parametrize(
    ("name", "split"),
    [
        ("trainmodel.json", "train"),
        ("wnut17train.conll", "train"),
        ("stsa.binary.train", "train"),
        ("training_dataset_flattened.reconstructed.json", "train"),
        ("en_ewt-ud-train.conllu", "train"),
        ("devtest.json", "dev"),
        ("val.json", "dev"),
        ("validation_dataset_flattened.json", "dev"),
        ("no_bokmaal-ud-dev.conllu", "dev"),
        ("NQ-open.efficientqa.dev.1.1.jsonl", "dev"),
        ("emerging.dev.conll", "dev"),
        ("eng.testa", "dev"),
        ("emerging.test.annotated", "test"),
        ("NQ-open.efficientqa.test.1.1.jsonl", "test"),
        ("eng.testb", "test"),
        ("test.json", "test"),
        ("ap001_0000.conll", None),
        ("latest.json", None),
        ("evaluation.json", None),
        ("values.tsv", None),
    ],
)
def test_split_of(name, split):
    assert split_of(name) == split


# ----------------------------------------------------------------------------- load_task_data


def norne_like(root: Path) -> Path:
    write(root / "LICENSE_NDT.txt", "CC0\n")
    write(root / "README.md", "# NorNE\n")
    write(root / "ndt/nob/ap001_0000.conll", NDT)
    write(root / "ndt/nob/ap001_0001.conll", ndt_line(1, "Ola", "subst", "B-PER") + "\n")
    write(root / "ud/nob/no_bokmaal-ud-dev.conllu", UD)
    write(root / "ud/nob/no_bokmaal-ud-test.conllu", UD.split("\n\n")[1] + "\n")
    return root


def test_directory_scan_norne_layout(tmp_path):
    root = norne_like(tmp_path / "norne")
    data = load_task_data(root, "ner")
    assert data.format == "conllu"
    assert {k: len(v) for k, v in data.splits.items()} == {"train": 3, "dev": 2, "test": 1}
    assert data.sources == {
        "train": [str(root / "ndt/nob/ap001_0000.conll"), str(root / "ndt/nob/ap001_0001.conll")],
        "dev": [str(root / "ud/nob/no_bokmaal-ud-dev.conllu")],
        "test": [str(root / "ud/nob/no_bokmaal-ud-test.conllu")],
    }
    # positional ids collide across the train files: the file name makes them unique
    assert [ex.id for ex in data.splits["train"]] == [
        "ap001_0000.conll:0",
        "ap001_0000.conll:1",
        "ap001_0001.conll:0",
    ]
    assert data.notes == [
        f"train: 2 files under {root / 'ndt/nob'} whose names name no split (there is no train file)",
        f"2 NDT paragraph tokens '|' (tagged O) dropped in 2 files under {root / 'ndt/nob'}",
    ]


def test_check_label_sets_tagging(tmp_path):
    data = load_task_data(norne_like(tmp_path / "norne"), "ner")  # dev has I-PER, train does not
    with pytest.raises(RalmError, match=r"the dev split uses label\(s\) 'I-PER' that the train split lacks"):
        check_label_sets(data)


def test_check_label_sets_classify(tmp_path):
    write(tmp_path / "train.jsonl", '{"text": "a", "label": "pos"}\n{"text": "b", "label": "neg"}\n')
    write(tmp_path / "dev.jsonl", '{"text": "c", "label": "pos"}\n')
    write(tmp_path / "test.jsonl", '{"text": "d", "label": "neutral"}\n')
    data = load_task_data(tmp_path, "classify")
    with pytest.raises(RalmError) as err:
        check_label_sets(data)
    assert str(err.value).startswith(f"{tmp_path / 'test.jsonl'}: the test split uses label(s) 'neutral'")
    data.splits["test"][0].label = "neg"
    check_label_sets(data)
    check_label_sets(TaskData("extractive-qa", "squad", {"test": [QAExample("a", "q", "c", ["c"], [0])]}))


def test_carve_dev_is_seeded_and_noted(tmp_path):
    f = write(tmp_path / "reviews.txt", "".join(f"{i % 2} text number {i}\n" for i in range(20)))
    data = load_task_data(f, "classify", seed=3)
    again = load_task_data(f, "classify", seed=3)
    other = load_task_data(f, "classify", seed=4)
    assert len(data.splits["train"]) == 18 and len(data.splits["dev"]) == 2
    assert data.splits == again.splits and data.splits["dev"] != other.splits["dev"]
    assert {ex.id for ex in data.splits["train"]}.isdisjoint(ex.id for ex in data.splits["dev"])
    assert data.sources == {"train": [str(f)], "dev": [str(f)]}
    assert data.notes == ["no dev split: 2 of 20 train examples carved out as dev (dev_fraction=0.1, seed=3)"]
    assert "dev" not in load_task_data(f, "classify", dev_fraction=0).splits


def test_carve_test_then_dev(tmp_path):
    f = write(tmp_path / "reviews.txt", "".join(f"{i % 2} text number {i}\n" for i in range(20)))
    data = load_task_data(f, "classify", seed=3, test_fraction=0.2)
    n = {k: len(v) for k, v in data.splits.items()}
    assert n == {"train": 14, "test": 4, "dev": 2}  # 20% of 20 to test, then 10% of the 16 left to dev
    ids = [{ex.id for ex in data.splits[k]} for k in ("train", "dev", "test")]
    assert len(set().union(*ids)) == 20
    assert (
        data.notes[0]
        == "no test split: 4 of 20 train examples carved out as test (test_fraction=0.2, seed=3)"
    )
    with pytest.raises(RalmError, match="test_fraction"):
        load_task_data(f, "classify", test_fraction=1.0)


def test_overrides_and_loose_files_ignored(tmp_path):
    write(tmp_path / "d/train.tsv", "1\tgood\n0\tbad\n1\tfine\n")
    write(tmp_path / "d/extra.tsv", "1\tx\n")
    write(tmp_path / "d/test.tsv", "0\tawful\n")
    other = write(tmp_path / "other_dev.tsv", "1\tnice\n")
    data = load_task_data(tmp_path / "d", "classify", dev=other)
    assert [ex.text for ex in data.splits["dev"]] == ["nice"]
    assert data.sources["dev"] == [str(other)]
    assert data.notes == [f"ignored {tmp_path / 'd/extra.tsv'} whose names name no split: extra.tsv"]
    only_test = load_task_data(None, "classify", test=tmp_path / "d/test.tsv")
    assert list(only_test.splits) == ["test"]  # no train split is allowed here


def test_directory_errors(tmp_path):
    write(tmp_path / "empty/README.md", "# nothing\n")
    write(tmp_path / "empty/LICENSE", "MIT\n")
    with pytest.raises(RalmError, match=r"empty: no data files found"):
        load_task_data(tmp_path / "empty", "ner")
    with pytest.raises(RalmError, match=r"missing: no such file or directory"):
        load_task_data(tmp_path / "missing", "ner")
    with pytest.raises(RalmError, match="dev_fraction"):
        load_task_data(tmp_path / "empty", "ner", dev_fraction=1.0)


# ----------------------------------------------------------------------------- the real gold files

DATA = Path("/work/shared/data")
real = pytest.mark.skipif(not DATA.is_dir(), reason="/work/shared/data not present")


def sizes(data: TaskData) -> dict[str, int]:
    return {k: len(v) for k, v in data.splits.items()}


@real
def test_real_norquad():
    data = load_task_data(DATA / "norquad/all", "extractive-qa")
    assert sizes(data) == {"train": 3808, "dev": 472, "test": 472}
    assert data.notes == [
        f"7 answer offsets repaired in {DATA / 'norquad/all/training_dataset_flattened.reconstructed.json'} "
        "(moved to the answer text's occurrence nearest the given answer_start)"
    ]
    for ex in data.splits["train"]:
        s = ex.answer_starts[0]
        assert ex.context[s : s + len(ex.answers[0])] == ex.answers[0]


@real
def test_real_norne_and_ud_bokmaal():
    data = load_task_data(DATA / "norne", "ner")
    assert sizes(data) == {"train": 15696, "dev": 2410, "test": 1939}
    assert len(data.sources["train"]) == 180
    assert Counter(t for ex in data.splits["dev"] for t in ex.labels)["B-PER"] == 611
    assert not any("|" in ex.tokens for ex in data.splits["train"])
    check_label_sets(data)
    with pytest.raises(RalmError, match="not a UPOS tag"):
        load_task_data(DATA / "norne", "pos")
    ud = load_task_data(DATA / "ud_norwegian_bokmaal", "pos")
    assert sizes(ud) == {"dev": 2409, "test": 1939}


@real
def test_real_english_and_sentiment():
    assert sizes(load_task_data(DATA / "wnut17", "ner")) == {"train": 3394, "dev": 1009, "test": 1287}
    sst = load_task_data(DATA / "sst2", "classify")
    assert sizes(sst) == {"train": 6920, "dev": 872, "test": 1821}
    assert sst.labels() == ["0", "1"]
    norec = load_task_data(DATA / "norec_sentence/binary", "classify")
    assert sizes(norec) == {"train": 3894, "dev": 701, "test": 583}
    assert norec.labels() == ["Negative", "Positive"]


@real
def test_real_open_qa():
    examples, fmt = read_file(DATA / "nq_open/NQ-open.dev.jsonl", "open-qa")
    assert (len(examples), fmt) == (3610, "openqa")
    wq = load_task_data(DATA / "webquestions", "open-qa")
    assert len(wq.splits["test"]) == 2032
    assert len(wq.splits["train"]) + len(wq.splits["dev"]) == 3778


def test_squad_file_given_for_classify(tmp_path):
    f = squad_file(tmp_path / "a.json", [("a", "Hvor?", CTX, "Rygge", 14)])
    with pytest.raises(RalmError, match=r"a\.json: one JSON object, not JSON lines or a JSON list"):
        read_file(f, "classify")
