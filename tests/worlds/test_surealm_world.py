"""The dialogue world (`ralm.worlds.dialogues`): the generator is deterministic under its seed, a held-out
conversation never occurs in training while its fact does, and a tiny SUREALM trained on it predicts the
held-out replies better than the same LM without memory (the test fails when the memory stops being
used: gates frozen, memory cut, retrieval broken)."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from ralm.worlds.dialogues import (
    ANSWERS,
    QUESTIONS,
    DialogueWorldConfig,
    facts_in_training,
    make_world,
    verbatim_leaks,
    world_vocabulary,
    write_world,
)

SMALL = DialogueWorldConfig(facts=30, valid_facts=5, test_facts=10, places=30, seed=3)


def test_generator_is_deterministic_under_its_seed(tmp_path):
    a = write_world(make_world(SMALL), tmp_path / "a")
    b = write_world(make_world(SMALL), tmp_path / "b")
    c = write_world(make_world(replace(SMALL, seed=4)), tmp_path / "c")
    assert a.read_bytes() == b.read_bytes()
    assert a.read_bytes() != c.read_bytes()
    rows = [json.loads(x) for x in a.read_text().splitlines()]
    # 30 facts x 2 training conversations x 2 turns, then 5 valid and 10 test conversations of 2 turns
    assert [r["split"] for r in rows] == ["train"] * 120 + ["valid"] * 10 + ["test"] * 20
    assert len({r["group"] for r in rows}) == 75
    meta = json.loads((a.parent / "world.json").read_text())
    assert meta["sentences"] == {"train": 120, "valid": 10, "test": 20}


def test_held_out_conversations_never_in_training_but_their_facts_are():
    world = make_world(SMALL)
    assert verbatim_leaks(world.rows) == []
    assert facts_in_training(world)
    train = " ".join(world.texts("train")).lower()
    for f in world.facts:
        if f.held_out:
            # the held-out wordings: a question and a reply template this fact has in no training turn
            assert f.keeper.lower() in train and f.place.lower() in train
    # a planted leak is found
    leaky = world.rows + [{"text": world.texts("test")[1], "group": "cx", "split": "train"}]
    assert verbatim_leaks(leaky) == [world.texts("test")[1]]


def test_every_wording_and_word_is_spelled_by_the_world_vocabulary():
    from transformers import BertTokenizerFast

    vocab = world_vocabulary()
    assert len(vocab) == len(set(vocab)) and vocab[:5] == ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    world = make_world(SMALL)
    assert len(QUESTIONS) == len(ANSWERS) == 6
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as d:
        (Path(d) / "vocab.txt").write_text("\n".join(vocab) + "\n")
        tok = BertTokenizerFast(vocab=str(Path(d) / "vocab.txt"), do_lower_case=True)
        unk = tok.unk_token_id
        for r in world.rows:
            assert unk not in tok(r["text"], add_special_tokens=False)["input_ids"], r["text"]


def _place_nll(run, world, tokenizer) -> float:
    """Mean NLL (nats) of the trained `run` on the place pieces of the test replies: what only the
    data store holds (each place is one fact's, and its turn does not name it)."""
    from ralm.surealm.datastore import Datastore
    from ralm.surealm.evaluation import sentence_nll
    from ralm.surealm.train import run_datastore

    store = Datastore(run_datastore(run))
    texts = store.sentences().column("text").to_pylist()
    by_keeper = {f.keeper.lower(): f for f in world.facts if f.held_out == "test"}
    replies = []  # (sentence id, its fact): the test replies, which name the keeper and the place
    for i in store.split_ids("test"):
        words = texts[int(i)].lower().split()
        fact = next((by_keeper[w] for w in words if w in by_keeper), None)
        if fact is not None and fact.place.lower() in words:
            replies.append((int(i), fact))
    assert len(replies) == len(by_keeper)  # one held-out reply a test fact
    total, n = 0.0, 0
    for (_, fact), (toks, nll) in zip(replies, sentence_nll(str(run), [i for i, _ in replies]), strict=True):
        piece = tokenizer(fact.place, add_special_tokens=False)["input_ids"]
        at = max(i for i in range(len(toks)) if toks[i : i + len(piece)] == piece)
        total += sum(nll[at : at + len(piece)])
        n += len(piece)
    return total / n


@pytest.mark.slow
def test_surealm_uses_its_memory_where_it_holds_the_reply(tmp_path):
    """A 2-layer BERT of hidden 64 over the world vocabulary, run as a causal LM, 300 steps of 32
    sentences with memory (gated cross-attention, gates from 0, the latest retrieval visible) and
    without, on a 120-fact world. A test reply's place is in the data store (its keeper's training
    turns) and nowhere in the turn: SUREALM must predict it better than the same LM without memory
    (measured: place NLL 1.84 against 2.04 nats a piece, test perplexity 3.45 against 3.71). Cut
    the memory (gates frozen, slots empty, retrieval broken) and the two are alike: the same
    backbone, seed and batches."""
    import torch

    from ralm.surealm.datastore_build import DatastoreConfig, build_datastore
    from ralm.surealm.evaluation import step0_ratio
    from ralm.surealm.sentences import read_sentences
    from ralm.surealm.train import TrainConfig, evaluate, load_trained, train
    from ralm.worlds.world_lm import write_world_lm

    torch.manual_seed(0)
    world = make_world(DialogueWorldConfig(facts=120, valid_facts=20, test_facts=40, places=120, seed=0))
    data = write_world(world, tmp_path / "world")
    lm = write_world_lm(tmp_path / "lm", world_vocabulary(), hidden=64, layers=2)
    store = tmp_path / "store"
    build_datastore(
        read_sentences([data]), store, DatastoreConfig(lm=str(lm), k=4, autocast="off"), progress=False
    )
    # step 0: the memory is inert (gates at 0), so SUREALM's perplexity is its backbone's
    s0 = step0_ratio(str(store), str(lm), k=4, window=1)
    assert s0["ratio"] == pytest.approx(1.0, abs=1e-4)
    ppl, place = {}, {}
    for name, retrieval in (("surealm", True), ("no_retrieval", False)):
        out = tmp_path / name
        tc = TrainConfig(
            datastore=str(store),
            out=str(out),
            lm=str(lm),
            k=4,
            retrieval=retrieval,
            memory_window=1 if retrieval else None,
            steps=300,
            batch_size=32,
            lr=2e-3,
            warmup_steps=30,
            eval_every=300,
            device="cpu",
            autocast="off",
            tensorboard=False,
            seed=0,
        )
        train(tc, overwrite=True, progress=False)
        model, tok, ds, batcher = load_trained(out, device="cpu")
        ppl[name] = evaluate(model, batcher, ds.split_ids("test"), autocast="off").token_ppl
        place[name] = _place_nll(out, world, tok)
        if retrieval:
            assert max(abs(g) for g in model.gates()) > 0.01  # the gates opened
    assert place["no_retrieval"] - place["surealm"] >= 0.1, place
    assert ppl["surealm"] / ppl["no_retrieval"] <= 0.96, ppl


def test_the_world_command_writes_dialogues_and_lm_and_refuses_bad_sizes(tmp_path, capsys):
    from ralm.cli import main

    out = tmp_path / "data"
    argv = ["world", "dialogues", "--out", str(out), "--facts", "30", "--places", "30"]
    assert main([*argv, "--valid-facts", "5", "--test-facts", "10", "--seed", "3", "--hidden", "32"]) == 0
    printed = capsys.readouterr().out
    assert "30 facts, 120 training sentences, 10 valid and 20 test sentences" in printed
    assert "ralm surealm datastore" in printed
    assert (out / "dialogues.jsonl").read_bytes() == write_world(
        make_world(SMALL), tmp_path / "ref"
    ).read_bytes()
    cfg = json.loads((out / "lm" / "config.json").read_text())
    assert (cfg["hidden_size"], cfg["num_hidden_layers"], cfg["vocab_size"]) == (
        32,
        2,
        len(world_vocabulary()),
    )
    assert (
        main(["world", "dialogues", "--out", str(tmp_path / "x"), "--facts", "3", "--test-facts", "5"]) == 2
    )
    assert "valid_facts=50, test_facts=5" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()


def test_the_cli_reads_the_worlds_defaults_from_its_config():
    import dataclasses

    from ralm.cli import build_parser

    args = build_parser().parse_args(["world", "dialogues", "--out", "OUT"])
    world = {f.name: f.default for f in dataclasses.fields(DialogueWorldConfig)}
    assert (
        (args.facts, args.places, args.conversations, args.valid_facts, args.test_facts)
        == (
            world["facts"],
            world["places"],
            world["train_conversations"],
            world["valid_facts"],
            world["test_facts"],
        )
        == (400, 400, 2, 50, 100)
    )
