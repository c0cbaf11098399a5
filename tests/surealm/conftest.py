"""Tiny SUREALM fixtures: a small dialogue file (testkit.DIALOGUES), data stores built with the tiny random BERT."""

from __future__ import annotations

import pytest

from testkit import dialogue_jsonl


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
