"""Tiny SUREALM fixtures: a small dialogue file, data stores built with the tiny random BERT."""

from __future__ import annotations

import json

import pytest

DIALOGUES = [
    ["i would like to book a room", "sure , for how many nights ?", "two nights please"],
    ["i would like to order a pizza", "what size would you like ?", "a large one please"],
    ["can i bring my dog to the hotel ?", "no , pets are not allowed", "ok thanks"],
    ["i want a table for two", "for what time ?", "seven in the evening please"],
    ["is there free wifi in the room ?", "yes , wifi is free", "great"],
    ["i need a taxi to the station", "when do you want to leave ?", "at noon please"],
    ["i would like to book a table", "how many people ?", "four people"],
    ["do you have a room with a view ?", "yes we do", "i will take it"],
    ["i would like a cup of tea", "milk or sugar ?", "just milk"],
    ["where is the train station ?", "it is two streets away", "thanks a lot"],
]


def dialogue_jsonl(path, dialogues=DIALOGUES):
    rows = [{"text": t, "group": f"d{i}"} for i, d in enumerate(dialogues) for t in d]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n", encoding="utf-8")
    return path


@pytest.fixture(scope="session")
def dialogue_file(tmp_path_factory):
    return dialogue_jsonl(tmp_path_factory.mktemp("surealm-data") / "dialogues.jsonl")


@pytest.fixture(scope="session")
def tiny_store(tmp_path_factory, tiny_dir, dialogue_file):
    """A data store over the dialogues: LM and encoder are the tiny BERT, K=3, m=3."""
    import torch

    from ralm.surealm.datastore_build import DatastoreConfig, build_datastore
    from ralm.surealm.sentences import read_sentences

    torch.set_num_threads(1)
    sents = read_sentences([dialogue_file], fractions=(0.2, 0.2), seed=0)
    out = tmp_path_factory.mktemp("surealm-store") / "ds"
    cfg = DatastoreConfig(
        lm=str(tiny_dir), encoder=str(tiny_dir), m=3, k=3, batch_sentences=4, autocast="off"
    )
    build_datastore(sents, out, cfg, progress=False, log=lambda m: None)
    return out
