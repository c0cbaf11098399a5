"""The records world, where REALM's retriever must learn from the reader's signal alone (issue 64).

A registry of invented record codes ("KX-4821"), each with `n_attributes` facts whose values are
invented words that occur nowhere else. Every fact is one short document of the knowledge corpus,
written in the corpus wording of its attribute:

    title "Record KX-4821", text "The registered owner of KX-4821 is Velmorin."

so the documents about one record are close distractors of each other (same code, another
attribute), and the documents about one attribute are close distractors too (same wording,
another code). A query restates one fact in other words, with the value as its only salient span
(a JSONL link), which REALM masks:

    "The title to record KX-4821 belongs to Velmorin."  ->  "The title to record KX-4821 belongs to [1]."

Why the world forces the mechanism:
- the value is unguessable (invented, unique), so the reader can fill the span only by copying it
  from a retrieved document: closed-book exact match is near 0;
- the query's wording of the attribute shares no content word with the corpus wording, so a
  starting retriever matches the code but not which of the record's facts is asked for: recall@1
  of the right document starts low (about 1 / n_attributes when the code is matched);
- the reader's likelihood is high under the right document and low under the distractors (they
  hold other values), so every query tells the retriever which document was right: the gradient of
  the marginal is all the retriever needs, and nothing else trains it.

The control world (`shuffle_values`) keeps the queries and the gold documents but shuffles the
values among the documents: the reader's signal then points to whichever document holds the
query's value, unrelated to the gold one, so a retriever that learns the gold documents there
learns from something other than the reader.

Held-out records: their queries (all wordings) are written to a file of their own and never to the
training queries; their documents are in the knowledge corpus, as any fact a model is asked about
later would be. `check_heldout` verifies that no held-out code or value occurs in a training query.

Files (`write_records_world`): corpus.jsonl (the documents), queries.jsonl (training queries),
heldout.jsonl (queries about held-out records) and gold.jsonl (each query id -> its document id),
plus world.json (the settings and counts). Build the first three with `ralm corpus build`; gold.jsonl
is what `ralm evaluate-mlm RUN --gold heldout/ gold.jsonl` reads (`ralm.realm.inference.gold.read_gold`).
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ralm.atomic import write_json_atomic, write_text_atomic
from ralm.errors import RalmError
from ralm.worlds.words import Lexicon

__all__ = [
    "ATTRIBUTES",
    "Attribute",
    "RecordsWorld",
    "RecordsWorldConfig",
    "check_heldout",
    "make_records_world",
    "write_records_world",
]


@dataclass(frozen=True)
class Attribute:
    """One kind of fact: how the corpus states it, and the other wordings queries use.

    Templates hold "{code}" and "{value}"; the query wordings share no content word with the corpus
    wording (so a starting retriever cannot tell the attributes apart by their words alone)."""

    name: str
    corpus: str
    queries: tuple[str, ...]


ATTRIBUTES: tuple[Attribute, ...] = (
    Attribute(
        "owner",
        "The registered owner of {code} is {value}.",
        (
            "The title to record {code} belongs to {value}.",
            "Whoever wants to buy {code} must ask {value}.",
            "{code} was purchased years ago by {value}.",
        ),
    ),
    Attribute(
        "port",
        "The home port of {code} is {value}.",
        (
            "Ships of record {code} dock at {value}.",
            "The harbour where {code} moors is {value}.",
            "Sailors of {code} return each winter to {value}.",
        ),
    ),
    Attribute(
        "inspector",
        "The last inspector of {code} was {value}.",
        (
            "The most recent check of record {code} was signed by {value}.",
            "An audit of {code} was carried out by {value}.",
            "Safety approval for {code} came from {value}.",
        ),
    ),
    Attribute(
        "cargo",
        "The listed cargo of {code} is {value}.",
        (
            "The hold of record {code} is full of {value}.",
            "Goods carried under {code} are crates of {value}.",
            "What {code} transports is mostly {value}.",
        ),
    ),
    Attribute(
        "builder",
        "The shipyard that built {code} is {value}.",
        (
            "The hull of record {code} was made in {value}.",
            "Workers at {value} constructed {code}.",
            "{code} was launched from the yards of {value}.",
        ),
    ),
    Attribute(
        "captain",
        "The current captain of {code} is {value}.",
        (
            "Command of record {code} now rests with {value}.",
            "Crews of {code} take their orders from {value}.",
            "At the helm of {code} stands {value}.",
        ),
    ),
)


@dataclass
class RecordsWorldConfig:
    """The size of a records world; the defaults are the benchmark's (1,200 documents)."""

    records: int = 300  # record codes in the registry
    heldout_records: int = 60  # of them, records whose queries are never trained on
    n_attributes: int = 4  # facts a record (the first n of ATTRIBUTES)
    seed: int = 0
    # the control world: the documents' values are shuffled among all documents, so the document
    # about (code, attribute) holds another fact's value and the reader's signal no longer points to
    # it; queries and gold stay as they are
    shuffle_values: bool = False

    def __post_init__(self) -> None:
        if not 1 <= self.n_attributes <= len(ATTRIBUTES):
            raise RalmError(f"n_attributes={self.n_attributes}: choose 1..{len(ATTRIBUTES)}")
        if not 0 < self.heldout_records < self.records:
            raise RalmError(
                f"heldout_records={self.heldout_records}: must be between 1 and records - 1 ({self.records - 1})"
            )


@dataclass
class RecordsWorld:
    """A generated world: JSONL records (dicts) for each file, and the gold document of each query."""

    config: RecordsWorldConfig
    documents: list[dict[str, Any]]
    queries: list[dict[str, Any]]
    heldout: list[dict[str, Any]]
    gold: dict[str, str]  # query id -> document id
    heldout_codes: list[str]
    train_codes: list[str]


def _linked(text: str, value: str) -> dict[str, Any]:
    """A JSONL record body whose only link is `value`'s one occurrence in `text`."""
    start = text.index(value)
    return {"text": text, "links": [{"start": start, "end": start + len(value), "target": value}]}


def _sentence(template: str, code: str, value: str) -> str:
    s = template.format(code=code, value=value)
    return s[0].upper() + s[1:]


def make_records_world(config: RecordsWorldConfig | None = None) -> RecordsWorld:
    """Generate the world of `config` (deterministic under its seed; see the module docstring).

    Documents are ordered record by record, attribute by attribute; training queries record by
    record (every wording of every fact); the held-out records are a seeded choice of the codes."""
    cfg = config or RecordsWorldConfig()
    lex = Lexicon(cfg.seed)
    attrs = ATTRIBUTES[: cfg.n_attributes]
    codes = [lex.code() for _ in range(cfg.records)]
    values = {(c, a.name): lex.word(3) for c in codes for a in attrs}
    rng = np.random.default_rng([cfg.seed, 2])
    held = set(rng.choice(len(codes), size=cfg.heldout_records, replace=False).tolist())
    shown = dict(values)  # the value each document states
    if cfg.shuffle_values:
        keys = list(values)
        perm = np.random.default_rng([cfg.seed, 3]).permutation(len(keys))
        shown = {k: values[keys[j]] for k, j in zip(keys, perm.tolist(), strict=True)}
    documents, queries, heldout, gold = [], [], [], {}
    for i, code in enumerate(codes):
        for a in attrs:
            value = values[(code, a.name)]
            doc_id = f"{code}/{a.name}"
            text = _sentence(a.corpus, code, shown[(code, a.name)])
            documents.append({"id": doc_id, "title": f"Record {code}", "text": text})
            for w, template in enumerate(a.queries):
                qid = f"{doc_id}/q{w}"
                rec = {"id": qid, "title": "", **_linked(_sentence(template, code, value), value)}
                (heldout if i in held else queries).append(rec)
                gold[qid] = doc_id
    return RecordsWorld(
        config=cfg,
        documents=documents,
        queries=queries,
        heldout=heldout,
        gold=gold,
        heldout_codes=[c for i, c in enumerate(codes) if i in held],
        train_codes=[c for i, c in enumerate(codes) if i not in held],
    )


def check_heldout(world: RecordsWorld) -> None:
    """RalmError if a held-out record's code or any of its values occurs in a training query."""
    held_values = {q["links"][0]["target"] for q in world.heldout}
    for q in world.queries:
        text = q["text"]
        leaked = [c for c in world.heldout_codes if c in text] + [v for v in held_values if v in text]
        if leaked:
            raise RalmError(f"training query {q['id']} mentions held-out {leaked[0]!r}")


def _jsonl(records: list[dict[str, Any]]) -> str:
    return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records)


def write_records_world(out: str | os.PathLike, config: RecordsWorldConfig | None = None) -> RecordsWorld:
    """Generate the world and write it under `out` (each file atomically; see the module docstring)."""
    world = make_records_world(config)
    check_heldout(world)
    root = Path(out)
    write_text_atomic(root / "corpus.jsonl", _jsonl(world.documents))
    write_text_atomic(root / "queries.jsonl", _jsonl(world.queries))
    write_text_atomic(root / "heldout.jsonl", _jsonl(world.heldout))
    write_text_atomic(
        root / "gold.jsonl", _jsonl([{"query": q, "document": d} for q, d in world.gold.items()])
    )
    write_json_atomic(
        root / "world.json",
        {
            "world": "records",
            "config": asdict(world.config),
            "documents": len(world.documents),
            "training_queries": len(world.queries),
            "heldout_queries": len(world.heldout),
            "heldout_codes": world.heldout_codes,
        },
    )
    return world
