"""NER by span classification (ralm.luke.ner): features, batching, decoding, an end-to-end fine-tune."""

from __future__ import annotations

import json
import math
import shutil
from types import SimpleNamespace

import pytest
import torch

from ralm.formats.types import TaggingExample
from ralm.luke.ner_model import predict_tags
from ralm.luke.spans import (
    chunk_rows,
    collate,
    decode_spans,
    encode_sentences,
    enumerate_spans,
    iob2_spans,
    spans_to_iob2,
)

CLASSES = ["O", "LOC", "PER"]


def _ex(i, text, tags):
    return TaggingExample(str(i), text.split(), tags.split())


SENTS = [
    _ex(0, "alice met bob in oslo", "B-PER O B-PER O B-LOC"),
    _ex(1, "the weather in new york is unbelievably nice", "O O O B-LOC I-LOC O O O"),
    _ex(2, "bob", "B-PER"),
]


def test_encode_sentences_labels_and_bounds(bert_tokenizer):
    feats, counts = encode_sentences(bert_tokenizer, SENTS, CLASSES, max_length=64, max_span_length=3)
    assert counts == {"entities": 5, "too_long": 0, "cut": 0}
    for ex, x in zip(SENTS, feats, strict=True):
        assert x.spans == enumerate_spans(len(ex.tokens), 3)
        gold = {(s, e): CLASSES.index(t) for s, e, t in iob2_spans(ex.labels)}
        assert x.labels.tolist() == [gold.get(sp, 0) for sp in x.spans]
        for (s, e), (a, b) in zip(x.spans, x.bounds.tolist(), strict=True):
            want = bert_tokenizer(ex.tokens[s:e], is_split_into_words=True, add_special_tokens=False)
            assert x.input_ids[a : b + 1] == want["input_ids"]
    # truncation: "unbelievably" is five word pieces; max_length 9 keeps [CLS] + 7 tokens + [SEP]
    feats, counts = encode_sentences(bert_tokenizer, SENTS[1:2], CLASSES, max_length=9, max_span_length=3)
    x = feats[0]
    assert len(x.input_ids) == 9 and x.input_ids[-1] == bert_tokenizer.sep_token_id
    assert max(e for _, e in x.spans) == 6  # words 6 ("unbelievably", cut inside) and 7 are gone
    assert counts == {"entities": 1, "too_long": 0, "cut": 0}
    feats, counts = encode_sentences(bert_tokenizer, SENTS[1:2], CLASSES, max_length=6, max_span_length=1)
    assert counts == {"entities": 1, "too_long": 1, "cut": 0}
    feats, counts = encode_sentences(bert_tokenizer, SENTS[1:2], CLASSES, max_length=5, max_span_length=4)
    assert counts == {"entities": 1, "too_long": 0, "cut": 1}


def test_chunks_and_collate(bert_tokenizer):
    feats, _ = encode_sentences(bert_tokenizer, SENTS, CLASSES, max_length=64, max_span_length=4)
    n_spans = [len(x.spans) for x in feats]
    rows = chunk_rows(feats, range(3), 5)
    assert len(rows) == sum(math.ceil(n / 5) for n in n_spans)
    covered = sorted((f, k) for f, lo, hi in rows for k in range(lo, hi))
    assert covered == [(f, k) for f in range(3) for k in range(n_spans[f])]  # every span exactly once
    M = 3
    b = collate(rows, feats, bert_tokenizer.pad_token_id, M)
    R, E = len(rows), 5
    assert b["entity_position_ids"].shape == (R, E, M)
    for r, (f, lo, hi) in enumerate(rows):
        x = feats[f]
        T = len(x.input_ids)
        assert b["input_ids"][r, :T].tolist() == x.input_ids
        assert b["attention_mask"][r].tolist() == [1] * T + [0] * (b["input_ids"].shape[1] - T)
        for e in range(E):
            if e < hi - lo:
                a, z = x.bounds[lo + e].tolist()
                want = list(range(a, z + 1))[:M]
                want += [-1] * (M - len(want))
                assert b["entity_position_ids"][r, e].tolist() == want
                assert (b["entity_ids"][r, e], b["entity_attention_mask"][r, e]) == (2, 1)
                assert (b["entity_start_positions"][r, e], b["entity_end_positions"][r, e]) == (a, z)
                assert b["labels"][r, e] == x.labels[lo + e]
            else:
                assert b["entity_position_ids"][r, e].tolist() == [-1] * M
                assert (b["entity_ids"][r, e], b["entity_attention_mask"][r, e], b["labels"][r, e]) == (
                    0,
                    0,
                    -100,
                )


def test_link_entities_gives_named_spans_their_ids(bert_tokenizer):
    """--link-entities: a span whose words name a vocabulary entity (case-folded, disambiguation dropped,
    the more frequent entity first) gets that entity's id; every other span, and every span without
    linking, is [MASK] (2)."""
    from ralm.luke.spans import link_spans
    from ralm.luke.vocab import EntityVocabulary

    vocab = EntityVocabulary(["Oslo", "New York", "Bob (singer)", "bob", "York"], [9, 8, 7, 6, 5])
    names = vocab.name_ids()
    assert names == {"oslo": 3, "new york": 4, "bob": 5, "york": 7}  # "bob" (id 6) loses to "Bob (singer)"
    words = ["Bob", "met", "Alice", "in", "NEW", "YORK"]
    spans = enumerate_spans(len(words), 2)
    ids = link_spans(words, spans, names).tolist()
    assert {sp: i for sp, i in zip(spans, ids, strict=True) if i != 2} == {(0, 1): 5, (4, 6): 4, (5, 6): 7}
    assert link_spans([], [], names).tolist() == []

    sents = [_ex(0, "alice met bob in oslo", "B-PER O B-PER O B-LOC"), SENTS[1]]
    feats, _ = encode_sentences(bert_tokenizer, sents, CLASSES, max_length=64, max_span_length=2, names=names)
    linked = [{sp: i for sp, i in zip(x.spans, x.entity_ids.tolist(), strict=True) if i != 2} for x in feats]
    assert linked == [{(2, 3): 5, (4, 5): 3}, {(3, 5): 4, (4, 5): 7}]
    rows = chunk_rows(feats, range(2), 100)
    b = collate(rows, feats, bert_tokenizer.pad_token_id, 3)
    for r, x in enumerate(feats):
        n = len(x.spans)
        assert b["entity_ids"][r, :n].tolist() == x.entity_ids.tolist()
        assert b["entity_ids"][r, n:].tolist() == [0] * (b["entity_ids"].shape[1] - n)
    # with context words, the linked spans are those of the sentence itself, shifted to its words
    ctx = [(["oslo"], ["bob"]), ([], [])]
    feats_ctx, _ = encode_sentences(
        bert_tokenizer, sents, CLASSES, max_length=64, max_span_length=2, context=ctx, names=names
    )
    assert [x.spans for x in feats_ctx] == [x.spans for x in feats]
    assert [x.entity_ids.tolist() for x in feats_ctx] == [x.entity_ids.tolist() for x in feats]
    # without linking: no entity ids, every span is [MASK]
    plain, _ = encode_sentences(bert_tokenizer, sents, CLASSES, max_length=64, max_span_length=2)
    assert all(x.entity_ids is None for x in plain)
    b = collate(chunk_rows(plain, range(2), 100), plain, bert_tokenizer.pad_token_id, 3)
    assert set(b["entity_ids"][b["entity_attention_mask"] == 1].tolist()) == {2}


class SpanTable(torch.nn.Module):
    """A stand-in classifier whose logits depend only on a span's (first, last) token: chunking and
    batching cannot change them, so predict_tags must equal decoding the table directly."""

    def __init__(self, size: int, classes: int):
        super().__init__()
        self.config = SimpleNamespace(max_mention_length=4)
        self.table = torch.nn.Parameter(
            torch.randn(size, size, classes, generator=torch.Generator().manual_seed(0))
        )
        self.calls = 0

    def forward(
        self,
        input_ids,
        attention_mask,
        entity_ids,
        entity_attention_mask,
        entity_position_ids,
        entity_start_positions,
        entity_end_positions,
    ):
        self.calls += 1
        real = entity_attention_mask == 1
        assert (entity_ids[real] == 2).all() and (
            entity_position_ids[real][:, 0] == entity_start_positions[real]
        ).all()
        return {"logits": self.table[entity_start_positions, entity_end_positions]}


def test_predict_tags_matches_direct_decoding(bert_tokenizer):
    feats, _ = encode_sentences(bert_tokenizer, SENTS, CLASSES, max_length=64, max_span_length=4)
    model = SpanTable(64, len(CLASSES))
    got = predict_tags(
        model, feats, CLASSES, pad_id=0, batch_size=2, max_entities=3, device=torch.device("cpu")
    )
    assert model.calls == math.ceil(len(chunk_rows(feats, range(3), 3)) / 2)
    for x, tags in zip(feats, got, strict=True):
        p = model.table[x.bounds[:, 0], x.bounds[:, 1]].softmax(-1)
        score, cls = p.max(-1)
        want = decode_spans(x.spans, [CLASSES[c] for c in cls.tolist()], score.tolist())
        assert tags == spans_to_iob2(want, x.n_words)
    assert any(t != "O" for tags in got for t in tags)  # the check above is not vacuous


# ----------------------------------------------------------------------------- end to end

TRAIN = """alice\tB-PER
visited\tO
oslo\tB-LOC

bob\tB-PER
likes\tO
new\tB-LOC
york\tI-LOC

we\tO
saw\tO
bob\tB-PER
and\tO
alice\tB-PER

paris\tB-LOC
is\tO
far\tO
"""


@pytest.fixture(scope="module")
def luke_run(tmp_path_factory, minilm_dir):
    """A `ralm luke pretrain`-shaped run: model/ (tiny random LukeConfig, l < L) with the MiniLM tokenizer."""
    from ralm.luke.config import LukeConfig
    from ralm.luke.io import save_model
    from ralm.luke.model import LukeForPretraining

    run = tmp_path_factory.mktemp("luke") / "tiny-run"
    torch.manual_seed(0)
    cfg = LukeConfig(
        vocab_size=30522,
        hidden_size=32,
        entity_hidden_size=16,
        entity_vocab_size=8,
        entity_emb_size=8,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        entity_intermediate_size=32,
        max_position_embeddings=64,
        type_vocab_size=2,
        max_mention_length=4,
    )
    save_model(LukeForPretraining(cfg), run / "model")
    for f in ("vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        shutil.copy(minilm_dir / f, run / "model" / f)
    return run


@pytest.fixture
def data_dir(tmp_path):
    d = tmp_path / "toy"
    d.mkdir()
    for split in ("train", "dev", "test"):
        (d / f"{split}.conll").write_text(TRAIN, encoding="utf-8")
    return d


def _main(argv):
    from ralm.cli import main

    return main([str(a) for a in argv])


def test_end_to_end_fits_toy_set(luke_run, data_dir, tmp_path, capsys, one_thread):
    out = tmp_path / "out"
    argv = ["luke", "ner", data_dir, "--model", luke_run, "--out", out, "--seeds", "1,2"]
    argv += [
        "--max-steps",
        60,
        "--batch-size",
        2,
        "--lr",
        "3e-3",
        "--max-span-length",
        3,
        "--max-entities",
        4,
    ]
    argv += ["--warmup-ratio", 0.1, "--eval-every", 20, "--no-progress"]
    assert _main(argv) == 0
    res = json.loads((out / "results.json").read_text())
    assert res["task"] == "ner" and res["primary"] == "f1" and res["name"] == "tiny-run"
    assert res["classes"] == ["O", "LOC", "PER"]
    for rec in res["seeds"]:  # train = dev = test: the model fits all 6 entities of the 4 sentences
        assert rec["dev"]["f1"] == 100.0 and rec["test"]["f1"] == 100.0, rec
        assert rec["inference"]["sentences"] == 4 and rec["inference"]["sentences_per_s"] > 0
    assert res["summary"]["test"]["f1"] == {"mean": 100.0, "std": 0.0, "n": 2}
    assert res["inference"]["sentences_per_s"]["n"] == 2
    md = (out / "results.md").read_text()
    assert "| test | f1 | 100.00 ± 0.00 |" in md and "sentences/s" in md
    for seed in (1, 2):
        sd = out / f"seed-{seed}"
        assert (sd / "model" / "config.json").is_file() and (sd / "eval.json").is_file()
        preds = [json.loads(line) for line in (sd / "predictions.jsonl").read_text().splitlines()]
        assert preds[1]["prediction"] == ["B-PER", "O", "B-LOC", "I-LOC"]
        rows = [json.loads(line) for line in (sd / "metrics.jsonl").read_text().splitlines()]
        assert sum("loss" in r for r in rows) == 60
        dev = [(r["step"], r["dev_f1"]) for r in rows if "dev_f1" in r]
        assert [s for s, _ in dev] == [20, 40, 60] and dev[-1][1] == 100.0  # the last step fits too
    # no partial directories left; the writer lock's file stays (ralm.locks)
    assert sorted(p.name for p in tmp_path.iterdir()) == [".out.lock", "out", "toy"]
    printed = capsys.readouterr().out
    assert "sentences/s" in printed and "results:" in printed

    # `ralm table` puts this row beside a word-only `ralm finetune ner` row of the same data
    from ralm.tasks.tables import comparison_table, read_results

    word = dict(res, name="word-only", method=None)
    table = comparison_table([read_results(out), word])
    lines = table.splitlines()
    assert lines[0] == "| model | toy f1 |"
    assert lines[2] == "| tiny-run | 100.00 ± 0.00 |" and lines[3].startswith("| word-only |")


def test_bad_iob_one_line_exit_2(luke_run, tmp_path, capsys):
    d = tmp_path / "bad"
    d.mkdir()
    (d / "train.conll").write_text("alice\tB-PER\n\nin\tO\noslo\tI-LOC\n", encoding="utf-8")
    out = tmp_path / "out"
    assert _main(["luke", "ner", d, "--model", luke_run, "--out", out, "--seeds", "1", "--max-steps", 1]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert err.startswith(f"ralm: error: {d / 'train.conll'}: sentence 2: word 2 is tagged 'I-LOC' after 'O'")
    assert "IOB2" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad"]


def test_train_file_without_data_reads_the_file(luke_run, tmp_path, capsys):
    """--train FILE with no DATA argument: the job reads FILE (its bad tag is the one line), where it
    used to stop on a TypeError before reading anything."""
    bad = tmp_path / "train.conll"
    bad.write_text("alice\tB-PER\n\nin\tO\noslo\tI-LOC\n", encoding="utf-8")
    out = tmp_path / "out"
    argv = [
        "luke",
        "ner",
        "--train",
        bad,
        "--model",
        luke_run,
        "--out",
        out,
        "--seeds",
        "1",
        "--max-steps",
        1,
    ]
    assert _main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert err.startswith(f"ralm: error: {bad}: sentence 2: word 2 is tagged 'I-LOC' after 'O'")


def test_bad_model_dir_one_line_exit_2(data_dir, tmp_path, capsys):
    out = tmp_path / "out"
    assert _main(["luke", "ner", data_dir, "--model", tmp_path / "nope", "--out", out]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "nope: no such directory" in err
    assert not out.exists()


def test_link_entities_without_vocabulary_one_line_exit_2(luke_run, data_dir, tmp_path, capsys):
    out = tmp_path / "out"
    argv = ["luke", "ner", data_dir, "--model", luke_run, "--out", out, "--link-entities", "--max-steps", 1]
    assert _main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert err.startswith(f"ralm: error: {luke_run}: no entity_vocab.tsv in the run or model directory")
    assert "drop --link-entities" in err
    assert not out.exists()


def test_link_entities_end_to_end(luke_run, data_dir, tmp_path, one_thread):
    """With the run's entity vocabulary beside the model, --link-entities links the named spans (counted
    in eval.json) and trains; a vocabulary larger than the model's entity table is refused."""
    from ralm.luke.vocab import EntityVocabulary

    run = tmp_path / "run"
    shutil.copytree(luke_run, run)
    EntityVocabulary(["oslo", "bob", "Alice"], [3, 2, 1]).save(run / "entity_vocab.tsv")
    out = tmp_path / "out"
    argv = ["luke", "ner", data_dir, "--model", run, "--out", out, "--seeds", "1", "--max-steps", 2]
    assert _main([*argv, "--link-entities", "--no-progress", "--no-save"]) == 0
    rec = json.loads((out / "seed-1" / "eval.json").read_text())
    assert rec["linked_spans"]["train"]["spans"] > 0
    assert rec["linked_spans"]["train"]["gold_entity_spans"] == rec["linked_spans"]["train"]["spans"]
    EntityVocabulary([f"e{i}" for i in range(10)]).save(run / "entity_vocab.tsv")  # 13 ids > 8 rows
    with pytest.raises(Exception, match="13 entity ids, but the model's entity table has 8 rows"):
        from ralm.luke.ner import LukeNerConfig, luke_ner

        luke_ner(
            LukeNerConfig(data=str(data_dir), out=str(tmp_path / "o2"), model=str(run), link_entities=True)
        )


def test_check_iob2_names_the_file_of_a_multi_file_split(tmp_path):
    from ralm.errors import RalmError
    from ralm.luke.spans import check_iob2
    from ralm.tasks.datasets import load_task_data

    d = tmp_path / "train"
    d.mkdir()
    (d / "a.conll").write_text("alice\tB-PER\n\nbob\tB-PER\n", encoding="utf-8")
    (d / "b.conll").write_text("x\tO\n\ny\tB-LOC\nz\tI-LOC\n\nq\tB-LOC\nr\tI-PER\n", encoding="utf-8")
    data = load_task_data(tmp_path, "ner", dev_fraction=0)
    with pytest.raises(RalmError) as exc:
        check_iob2(data)
    assert str(exc.value).startswith(f"{d / 'b.conll'}: sentence 3: word 2 is tagged 'I-PER' after 'B-LOC'")


def test_failed_seed_keeps_the_finished_one_and_a_rerun_resumes(
    luke_run, data_dir, tmp_path, capsys, monkeypatch
):
    """The job folder of `ralm finetune` (ralm.train.seed_jobs): a failed seed 2 keeps seed 1 in
    .out.partial, and the same command again runs seed 2 alone and publishes both."""
    import ralm.luke.ner as ner
    from ralm.errors import RalmError

    real = ner.run_seed
    ran = []

    def second_fails(cfg, bb, splits, classes, seed, out, names=None):
        ran.append(seed)
        if seed == 2 and len(ran) == 2:
            raise RalmError("seed 2 failed on purpose")
        return real(cfg, bb, splits, classes, seed, out, names)

    monkeypatch.setattr(ner, "run_seed", second_fails)
    out = tmp_path / "out"
    partial = tmp_path / ".out.partial"
    argv = ["luke", "ner", data_dir, "--model", luke_run, "--out", out, "--seeds", "1,2", "--max-steps", 1]
    assert _main(argv + ["--no-progress"]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        f"note: kept {partial} (seed-1 finished); rerun the same command to continue",
        "ralm: error: seed 2 failed on purpose",
    ]
    assert sorted(p.name for p in tmp_path.iterdir()) == [".out.lock", ".out.partial", "toy"]
    kept = (partial / "seed-1" / "eval.json").read_bytes()

    assert _main(argv + ["--no-progress"]) == 0
    assert ran == [1, 2, 2]  # the rerun ran seed 2 alone
    assert capsys.readouterr().err.strip() == (
        f"note: resuming the interrupted job in {partial} (seed-1 finished, kept); remove that folder to start over"
    )
    assert (out / "seed-1" / "eval.json").read_bytes() == kept
    assert [r["seed"] for r in json.loads((out / "results.json").read_text())["seeds"]] == [1, 2]
    assert sorted(p.name for p in tmp_path.iterdir()) == [".out.lock", "out", "toy"]
