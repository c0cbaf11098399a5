import json

import pytest
from pairs_ref import CONTEXTS, QUESTIONS, squad_json

from ralm.answers import has_answer
from ralm.errors import RalmError
from ralm.retrieval.passages import ListPassages, squeeze
from ralm.retrieval.training.data import detect_pair_format, read_beir_dev, read_pairs
from ralm.retrieval.training.negatives import mine_negatives


def test_squeeze_docstring_example():
    assert squeeze("Сове́тских  Oslo\nér") == "СоветскихOsloer"


def test_formats_are_detected(pair_files):
    d = pair_files["dir"]
    assert detect_pair_format(d / "squad.json") == "squad"
    assert detect_pair_format(d / "dpr.json") == "dpr"
    assert detect_pair_format(d / "qa.jsonl") == "openqa"
    assert detect_pair_format(d / "beir") == "beir"


def test_squad_positive_is_the_chunk_of_the_context_holding_the_answer(pair_files, context_store):
    pairs = read_pairs(pair_files["dir"] / "squad.json", context_store)
    assert pairs.format == "squad" and len(pairs.examples) == len(QUESTIONS)
    arts = context_store.articles().to_pylist()
    for ex, (q, a, c) in zip(pairs.examples, QUESTIONS, strict=True):
        assert ex.query == q and ex.answers == [a]
        # reference: the chunk of article c whose character range holds the answer's start
        start = CONTEXTS[c].index(a)
        first, n = arts[c]["first_chunk"], arts[c]["n_chunks"]
        want = [
            i
            for i in range(first, first + n)
            if context_store.get(i)["char_start"] <= start < context_store.get(i)["char_end"]
        ]
        assert ex.positives == want
        assert a in context_store.get(ex.positives[0])["text"]


def test_squad_errors_name_the_file_and_question(tmp_path, context_store):
    doc = squad_json(contexts=[*CONTEXTS[:4], "A context that is not in the store at all. " + CONTEXTS[4]])
    doc["data"][4]["paragraphs"][0]["qas"][0]["answers"][0]["answer_start"] += 43
    p = tmp_path / "missing.json"
    p.write_text(json.dumps(doc))
    with pytest.raises(RalmError, match=r"missing\.json: question q8: its context .* is not an article of"):
        read_pairs(p, context_store)
    doc = squad_json()
    doc["data"][0]["paragraphs"][0]["qas"][0]["answers"][0]["text"] = "1850"
    p = tmp_path / "wrong.json"
    p.write_text(json.dumps(doc))
    with pytest.raises(
        RalmError, match=r"wrong\.json: question q0: answer '1850' does not occur in its context"
    ):
        read_pairs(p, context_store)
    with pytest.raises(RalmError, match="need the corpus"):
        read_pairs(p, None)


def test_dpr_json_passages_are_deduplicated_and_mapped(pair_files):
    pairs = read_pairs(pair_files["dir"] / "dpr.json", None)
    assert isinstance(pairs.passages, ListPassages)
    rows = json.loads((pair_files["dir"] / "dpr.json").read_text())
    ids = {c["passage_id"] for r in rows for c in r["positive_ctxs"] + r["hard_negative_ctxs"]}
    assert len(pairs.passages) == len(ids)
    for ex, row in zip(pairs.examples, rows, strict=True):
        assert pairs.passages.text(ex.positives[0]) == row["positive_ctxs"][0]["text"]
        assert pairs.passages.ids[ex.negatives[0]] == row["hard_negative_ctxs"][0]["passage_id"]
        assert ex.answers == row["answers"]


def test_dpr_json_errors(tmp_path, context_store, pair_files):
    rows = json.loads((pair_files["dir"] / "dpr.json").read_text())
    rows[2]["positive_ctxs"][0]["text"] = "  "
    p = tmp_path / "empty.json"
    p.write_text(json.dumps(rows))
    with pytest.raises(RalmError, match=r"empty\.json: row 2\.positive_ctxs\[0\]: the passage is empty"):
        read_pairs(p, None)
    rows[2]["positive_ctxs"] = []
    p.write_text(json.dumps(rows))
    with pytest.raises(RalmError, match=r"row 2: \"positive_ctxs\" is missing or empty"):
        read_pairs(p, None)
    # with a DocStore, a passage must be one of its chunks
    with pytest.raises(
        RalmError, match=r"dpr\.json: row 0\.positive_ctxs\[0\]: passage .* is not a chunk of"
    ):
        read_pairs(pair_files["dir"] / "dpr.json", context_store)


def test_dpr_json_over_a_docstore_maps_chunk_texts(tmp_path, context_store):
    chunk = context_store.get(3)
    row = {
        "question": "q",
        "answers": [],
        "positive_ctxs": [{"title": "", "text": "  " + chunk["text"] + "\n"}],
    }
    p = tmp_path / "chunks.json"
    p.write_text(json.dumps([row, row]))
    pairs = read_pairs(p, context_store)
    assert [ex.positives for ex in pairs.examples] == [[3], [3]]


def test_beir_folder(pair_files):
    beir = pair_files["dir"] / "beir"
    pairs = read_pairs(beir, None)
    sentences = pair_files["sentences"]
    assert len(pairs.passages) == len(sentences)
    assert [ex.query for ex in pairs.examples] == [q for q, _, _ in QUESTIONS[:8]]
    for ex, (_, a, _) in zip(pairs.examples, QUESTIONS, strict=False):
        assert a in pairs.passages.text(ex.positives[0])
    dev = read_beir_dev(beir, pairs)
    assert [ex.query for ex in dev.examples] == [q for q, _, _ in QUESTIONS[8:]]
    assert dev.passages is pairs.passages


def test_beir_unknown_document_names_the_row(tmp_path, pair_files):
    import shutil

    beir = tmp_path / "beir"
    shutil.copytree(pair_files["dir"] / "beir", beir)
    lines = (beir / "qrels" / "train.tsv").read_text().splitlines()
    lines[3] = "q2\tnope\t1"
    (beir / "qrels" / "train.tsv").write_text("\n".join(lines) + "\n")
    with pytest.raises(RalmError, match=r"qrels/train\.tsv:4: document 'nope' is not in corpus\.jsonl"):
        read_pairs(beir, None)
    with pytest.raises(RalmError, match="brings its own corpus"):
        read_pairs(beir, object())  # type: ignore[arg-type]


def test_openqa_positives_are_bm25_chunks_holding_an_answer(pair_files, context_store):
    pairs = read_pairs(pair_files["dir"] / "qa.jsonl", context_store, depth=len(context_store))
    bm25 = pairs.passages.bm25()
    for ex, (q, a, _) in zip(pairs.examples, QUESTIONS, strict=True):
        ranked = bm25.search_text([q], len(context_store)).ids[0].tolist()
        assert ex.positives == [c for c in ranked if has_answer(context_store.get(c)["text"], [a])]
        assert ex.positives  # every answer is in some chunk


def test_openqa_question_without_answers_is_an_error(tmp_path, context_store):
    p = tmp_path / "noans.jsonl"
    p.write_text(
        json.dumps({"question": "a", "answers": ["x"]}) + "\n" + json.dumps({"question": "b", "answers": []})
    )
    with pytest.raises(RalmError, match=r"noans\.jsonl: question .* has no answer"):
        read_pairs(p, context_store)


def test_mined_negatives_are_bm25_order_without_positives_or_answers(pair_files, context_store):
    pairs = read_pairs(pair_files["dir"] / "squad.json", context_store)
    bm25 = pairs.passages.bm25()
    mined = mine_negatives(pairs, bm25, depth=3, search_depth=len(context_store))
    for ex, negs in zip(pairs.examples, mined, strict=True):
        ranked = bm25.search_text([ex.query], len(context_store)).ids[0].tolist()
        want = [
            c
            for c in ranked
            if c not in ex.positives and not has_answer(context_store.get(c)["text"], ex.answers)
        ][:3]
        assert negs == want and len(negs) == 3
