"""Open-QA answers as strings or regular expressions (CuratedTREC): reading and the auto rule,
exact match and F1, training spans from pattern matches, and `ralm finetune open-qa` end to end."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from ralm.cli import main
from ralm.errors import RalmError
from ralm.formats.types import OpenQAExample
from ralm.tasks.datasets import load_task_data, read_file
from ralm.tasks.metrics import qa_metrics
from ralm.tasks.openqa import pattern_spans

pytestmark = pytest.mark.usefixtures("one_thread")


def write(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


TREC_TSV = 'when was lincoln born\t["18(0|1)\\\\d"]\nwho taught aristotle\t["Plat(o|on)", "socrates"]\n'


def test_auto_rule_trec_names_and_answer_type_records(tmp_path):
    trec = write(tmp_path / "curatedtrec-test.qa.csv", TREC_TSV)
    examples, fmt = read_file(trec, "open-qa")
    assert fmt == "openqa" and [ex.regex for ex in examples] == [True, True]
    assert examples[0].answers == [r"18(0|1)\d"]
    flashrag = write(tmp_path / "CuratedTREC" / "test.jsonl", '{"question": "q", "answers": ["a+"]}\n')
    assert read_file(flashrag, "open-qa")[0][0].regex
    mixed = write(
        tmp_path / "qa.jsonl",
        '{"question": "q1", "answers": ["19(6|7)\\\\d"], "answer_type": "regex"}\n'
        '{"question": "q2", "answers": ["1969"]}\n'
        '{"question": "q3", "answers": ["1969"], "answer_type": "string"}\n',
    )
    assert [ex.regex for ex in read_file(mixed, "open-qa")[0]] == [True, False, False]
    # a record's "answer_type" overrides the file name; the flag overrides both
    typed = write(
        tmp_path / "curatedtrec.jsonl", '{"question": "q", "answers": ["(a"], "answer_type": "string"}\n'
    )
    assert not read_file(typed, "open-qa")[0][0].regex
    assert [ex.regex for ex in read_file(trec, "open-qa", answers="string")[0]] == [False, False]
    assert [ex.regex for ex in read_file(mixed, "open-qa", answers="regex")[0]] == [True, True, True]
    assert not read_file(
        write(tmp_path / "trec-covid" / "q.jsonl", '{"question": "q", "answers": ["(a"]}\n'), "open-qa"
    )[0][0].regex
    data = load_task_data(tmp_path / "CuratedTREC", "open-qa", dev_fraction=0)
    assert data.notes == [
        f"1 questions with regular-expression answers in {flashrag}, matched as patterns "
        "(--answers string matches them as text)"
    ]
    data = load_task_data(tmp_path / "CuratedTREC", "open-qa", answers="string", dev_fraction=0)
    assert data.splits["test"] == [OpenQAExample("0", "q", ["a+"])] and not data.notes


def test_bad_patterns_and_modes_are_one_line_errors(tmp_path):
    bad = write(tmp_path / "curatedtrec-test.qa.csv", TREC_TSV + 'third\t["ok", "(unclosed"]\n')
    with pytest.raises(RalmError, match=r"curatedtrec-test\.qa\.csv:3: answer pattern '\(unclosed' is not a"):
        read_file(bad, "open-qa")
    assert len(read_file(bad, "open-qa", answers="string")[0]) == 3  # as strings it is fine
    kind = write(tmp_path / "qa.jsonl", '{"question": "q", "answers": ["a"], "answer_type": "glob"}\n')
    with pytest.raises(RalmError, match=r'qa\.jsonl:1: "answer_type" is \'glob\''):
        read_file(kind, "open-qa")
    with pytest.raises(RalmError, match="--answers 'pattern'"):
        read_file(kind, "open-qa", answers="pattern")
    squad = {
        "data": [
            {
                "paragraphs": [
                    {
                        "context": "Oslo",
                        "qas": [
                            {"id": "a", "question": "?", "answers": [{"text": "Oslo", "answer_start": 0}]}
                        ],
                    }
                ]
            }
        ]
    }
    sq = write(tmp_path / "squad.json", json.dumps(squad))
    with pytest.raises(RalmError, match=r"squad\.json: a SQuAD file's answers are spans"):
        read_file(sq, "open-qa", answers="regex")


def test_exact_match_for_patterns_and_f1_for_strings_only():
    examples = [
        OpenQAExample("r1", "?", [r"19(6|7)\d"], regex=True),
        OpenQAExample("r2", "?", [r"19(6|7)\d"], regex=True),
        OpenQAExample("s1", "?", ["Eiffel Tower"]),
    ]
    preds = {"r1": "1969", "r2": "in 1969", "s1": "the Eiffel Tower in Paris"}
    m = qa_metrics(preds, examples)
    assert m["em"] == pytest.approx(100 / 3)  # r1 matches at the start; r2 does not; s1 is not exact
    assert m["f1"] == pytest.approx(100 * 2 / 3)  # over s1 alone: P 2/4, R 1
    assert qa_metrics(preds, examples[:2]) == {"em": 50.0}  # no F1 when every answer is a pattern


def test_pattern_spans_by_hand():
    offsets = [(0, 4), (5, 7), (7, 9), (10, 12)]  # "born" "19" "69" "ok"
    assert pattern_spans("born 1969 ok", offsets, [re.compile(r"19(6|7)\d")], 0, 4) == [(1, 2)]
    assert pattern_spans("born 1969 ok", offsets, [re.compile(r"19(6|7)\d")], 0, 2) == []  # truncated
    assert pattern_spans("born 1969 ok", offsets, [re.compile("x*"), re.compile("OK", re.I)], 0, 4) == [
        (3, 3)
    ]


@pytest.mark.filterwarnings("ignore:Detected call of `lr_scheduler.step\\(\\)`")  # as strings: no step
def test_finetune_open_qa_with_regex_answers(fact_store, tiny_dir, tmp_path, capsys):
    """BM25 (frozen) so recall@k can be checked by hand: patterns that no string would match are
    found in the retrieved chunks, give training spans, and F1 is not reported."""
    from ralm.answers import has_answer
    from ralm.retrieval.retriever import Retriever
    from ralm.tasks.finetune import FinetuneConfig, finetune

    cities = [
        ("Oslo", "Norway"),
        ("Bergen", "Norway"),
        ("Copenhagen", "Denmark"),
        ("Stockholm", "Sweden"),
        ("Helsinki", "Finland"),
        ("Reykjavik", "Iceland"),
        ("Aarhus", "Denmark"),
        ("Trondheim", "Norway"),
    ]
    rows = [
        json.dumps({"question": f"which country is {c} in", "answers": [n[:3] + r"\w+"]}) for c, n in cities
    ]
    data = tmp_path / "curatedtrec"
    for split in ("train", "test"):
        write(data / f"{split}.jsonl", "\n".join(rows) + "\n")
    common = dict(
        task="open-qa",
        data=str(data),
        model=str(tiny_dir),
        index=str(fact_store / "index"),
        k=3,
        retriever="bm25",
        max_steps=2,
        batch_size=4,
        device="cpu",
        autocast="off",
        progress=False,
        max_length=48,
        eval_batch_size=8,
    )
    res = finetune(FinetuneConfig(out=str(tmp_path / "o"), **common), log=lambda m: None)
    rec = res["seeds"][0]
    assert set(rec["test"]) == {"em", "recall@1", "recall@3"}  # no F1 for patterns
    assert rec["skipped_train_examples"] < rec["train_examples"]  # pattern matches became spans
    opened = Retriever.load(fact_store / "index", kind="bm25")
    ds, bm25 = opened.store, opened.backend
    test = load_task_data(data, "open-qa").splits["test"]
    assert all(ex.regex for ex in test)
    top = bm25.search_text([ex.question for ex in test], 3).ids
    want = np.mean(
        [
            any(has_answer(ds[int(i)]["text"], ex.answers, regex=True) for i in row)
            for ex, row in zip(test, top, strict=True)
        ]
    )
    assert want > 0 and rec["test"]["recall@3"] == pytest.approx(100.0 * want)
    as_text = finetune(
        FinetuneConfig(out=str(tmp_path / "s"), answers="string", **common), log=lambda m: None
    )
    assert as_text["seeds"][0]["test"]["recall@3"] == 0.0  # "Nor\w+" never occurs as text
    write(
        data / "test.jsonl", "\n".join(rows[:2] + [json.dumps({"question": "q", "answers": ["(x"]})]) + "\n"
    )
    argv = [
        "finetune",
        "open-qa",
        str(data),
        "--out",
        str(tmp_path / "bad"),
        "--model",
        str(tiny_dir),
        "--index",
        str(fact_store / "index"),
        "--no-progress",
    ]
    capsys.readouterr()
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"{data / 'test.jsonl'}:3: answer pattern '(x'" in err[0]
    assert not (tmp_path / "bad").exists()
