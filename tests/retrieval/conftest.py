"""Fixtures for retriever training: a tiny DocStore of contexts and the SQuAD/DPR/BEIR/QA files over it."""

from __future__ import annotations

import json

import pytest
from pairs_ref import CONTEXTS, QUESTIONS, squad_json


@pytest.fixture(scope="session")
def context_store(tmp_path_factory, tiny_dir):
    """A DocStore of CONTEXTS (one article each, 24-token chunks), built with the tiny model's tokenizer."""
    from ralm.corpus.build import BuildConfig, build_docstore

    d = tmp_path_factory.mktemp("contexts")
    (d / "contexts.jsonl").write_text("".join(json.dumps({"text": c}) + "\n" for c in CONTEXTS))
    cfg = BuildConfig(chunk_size=24, min_chunk_tokens=4, tokenizer=str(tiny_dir))
    return build_docstore([d / "contexts.jsonl"], d / "store", cfg, progress=False, log=lambda m: None)


@pytest.fixture(scope="session")
def pair_files(tmp_path_factory):
    """SQuAD, open-QA JSONL, DPR JSON and a BEIR folder of QUESTIONS."""
    d = tmp_path_factory.mktemp("pairs")
    (d / "squad.json").write_text(json.dumps(squad_json()))
    (d / "qa.jsonl").write_text(
        "".join(json.dumps({"question": q, "answers": [a]}) + "\n" for q, a, _ in QUESTIONS)
    )
    sentences = [s.strip() + "." for c in CONTEXTS for s in c.split(".") if s.strip()]
    dpr = []
    for i, (q, a, _) in enumerate(QUESTIONS):
        pos = next(s for s in sentences if a in s)
        neg = sentences[(sentences.index(pos) + 3) % len(sentences)]
        dpr.append(
            {
                "question": q,
                "answers": [a],
                "positive_ctxs": [{"title": "", "text": pos, "passage_id": f"s{sentences.index(pos)}"}],
                "hard_negative_ctxs": [{"title": "", "text": neg, "passage_id": f"s{sentences.index(neg)}"}],
                "id": i,
            }
        )
    (d / "dpr.json").write_text(json.dumps(dpr))
    beir = d / "beir"
    (beir / "qrels").mkdir(parents=True)
    (beir / "corpus.jsonl").write_text(
        "".join(json.dumps({"_id": f"s{i}", "title": "", "text": s}) + "\n" for i, s in enumerate(sentences))
    )
    (beir / "queries.jsonl").write_text(
        "".join(json.dumps({"_id": f"q{i}", "text": q}) + "\n" for i, (q, _, _) in enumerate(QUESTIONS))
    )
    rows = ["query-id\tcorpus-id\tscore"]
    for i, (_, a, _) in enumerate(QUESTIONS):
        rows.append(f"q{i}\ts{next(j for j, s in enumerate(sentences) if a in s)}\t1")
    (beir / "qrels" / "train.tsv").write_text("\n".join(rows[:9]) + "\n")
    (beir / "qrels" / "dev.tsv").write_text("\n".join([rows[0], *rows[9:]]) + "\n")
    return {"dir": d, "sentences": sentences}
