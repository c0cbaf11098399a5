"""`ralm luke export`: round trips through transformers' LukeModel / LukeForMaskedLM /
LukeForEntitySpanClassification from_pretrained (l = L), ralm's own format for l < L, bad input."""

from __future__ import annotations

import json

import pytest
import torch

from ralm.cli import main
from ralm.luke.io import load_model, save_model
from ralm.luke.model import LukeForPretraining, LukeForSpanClassification
from ralm.luke.vocab import EntityVocabulary

pytestmark = pytest.mark.usefixtures("one_thread")

V = 30522  # the MiniLM vocabulary, so the copied tokenizer fits the model


def randomise(model, seed=0):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.2)
    return model.eval()


def make_run(tmp_path, cfg, minilm_dir, *, vocab_size=None, span_labels=None):
    """A run dir like `ralm luke pretrain` writes: model/ (io.save_model) + entity_vocab.tsv."""
    torch.manual_seed(0)
    pre = randomise(LukeForPretraining(cfg))
    model = pre if span_labels is None else randomise(LukeForSpanClassification(cfg, len(span_labels)), 1)
    model.ralm_meta = {"backbone": str(minilm_dir)}
    run = tmp_path / "run"
    save_model(model, run / "model", extra={"classes": span_labels} if span_labels else None)
    n = (vocab_size or cfg.entity_vocab_size) - 3
    EntityVocabulary([f"Entity {i}" for i in range(n)]).save(run / "entity_vocab.tsv")
    return run, model


def inputs(bert_tokenizer, n_ent=20):
    enc = bert_tokenizer(["Oslo is the capital of Norway.", "Bergen."], padding=True, return_tensors="pt")
    ent = torch.tensor([[5, 9, 2], [7, 0, 0]])
    ent_mask = torch.tensor([[1, 1, 1], [1, 0, 0]])
    pos = torch.full((2, 3, 30), -1)
    pos[0, 0, :1] = torch.tensor([1])
    pos[0, 1, :2] = torch.tensor([6, 7])
    pos[0, 2, :3] = torch.tensor([3, 4, 5])
    pos[1, 0, :2] = torch.tensor([1, 2])
    return enc, ent, ent_mask, pos


def close(a, b, tol=1e-5):
    diff = (a - b).abs().max().item()
    assert diff <= tol, f"max abs diff {diff}"


def test_export_pretraining_run_loads_in_hf_with_identical_outputs(
    tmp_path, tiny_luke_config, minilm_dir, bert_tokenizer, capsys
):
    from transformers import AutoTokenizer, LukeForMaskedLM, LukeModel

    cfg = tiny_luke_config(vocab_size=V, max_mention_length=30)
    run, ours = make_run(tmp_path, cfg, minilm_dir)
    out = tmp_path / "hf"
    assert main(["luke", "export", str(run), str(out)]) == 0
    assert "Hugging Face LUKE" in capsys.readouterr().out
    hc = json.loads((out / "config.json").read_text())
    assert hc["model_type"] == "luke" and hc["use_entity_aware_attention"] is True
    assert hc["architectures"] == ["LukeForMaskedLM"]
    ev = json.loads((out / "entity_vocab.json").read_text())
    assert ev["[PAD]"] == 0 and ev["[MASK]"] == 2 and ev["Entity 0"] == 3 and len(ev) == 20
    assert AutoTokenizer.from_pretrained(str(out))("Oslo")["input_ids"] == bert_tokenizer("Oslo")["input_ids"]

    enc, ent, ent_mask, pos = inputs(bert_tokenizer)
    kw = dict(entity_ids=ent, entity_attention_mask=ent_mask, entity_position_ids=pos, **enc)
    real_w, real_e = enc["attention_mask"].bool(), ent_mask.bool()
    with torch.no_grad():
        ref = ours(
            enc["input_ids"], enc["attention_mask"], ent, ent_mask, pos, token_type_ids=enc["token_type_ids"]
        )
        w, e = ours.luke(enc["input_ids"], enc["attention_mask"], ent, ent_mask, pos, enc["token_type_ids"])
        base = LukeModel.from_pretrained(str(out)).eval()(
            **kw
        )  # no position_ids passed: the offset is in the table
        mlm = LukeForMaskedLM.from_pretrained(str(out)).eval()(**kw)
    close(base.last_hidden_state[real_w], w[real_w])
    close(base.entity_last_hidden_state[real_e], e[real_e])
    close(mlm.logits[real_w], ref["mlm_logits"][real_w], 1e-4)
    close(mlm.entity_logits[real_e], ref["entity_logits"][real_e], 1e-4)

    enc_only = tmp_path / "encoder"  # a bare EntityAwareModel exports as LukeModel
    save_model(ours.luke, enc_only)
    assert main(["luke", "export", str(enc_only), str(tmp_path / "hf2")]) == 0
    assert json.loads((tmp_path / "hf2" / "config.json").read_text())["architectures"] == ["LukeModel"]
    with torch.no_grad():
        again = LukeModel.from_pretrained(str(tmp_path / "hf2")).eval()(**kw)
    close(again.entity_last_hidden_state[real_e], e[real_e])


def test_export_span_classifier_loads_in_hf(tmp_path, tiny_luke_config, minilm_dir, bert_tokenizer):
    from transformers import LukeForEntitySpanClassification

    cfg = tiny_luke_config(vocab_size=V, max_mention_length=30)
    run, ours = make_run(tmp_path, cfg, minilm_dir, span_labels=["O", "PER", "LOC"])
    out = tmp_path / "hf"
    assert main(["luke", "export", str(run / "model"), str(out)]) == 0  # a model dir directly
    enc, ent, ent_mask, pos = inputs(bert_tokenizer)
    starts = torch.tensor([[1, 6, 3], [1, 0, 0]])
    ends = torch.tensor([[1, 7, 5], [2, 0, 0]])
    with torch.no_grad():
        ref = ours(
            enc["input_ids"],
            enc["attention_mask"],
            ent,
            ent_mask,
            pos,
            starts,
            ends,
            **{"token_type_ids": enc["token_type_ids"]},
        )
        hf = LukeForEntitySpanClassification.from_pretrained(str(out)).eval()
        got = hf(
            **enc,
            entity_ids=ent,
            entity_attention_mask=ent_mask,
            entity_position_ids=pos,
            entity_start_positions=starts,
            entity_end_positions=ends,
        )
    assert hf.config.id2label == {0: "O", 1: "PER", 2: "LOC"}
    real = ent_mask.bool()
    close(got.logits[real], ref["logits"][real])
    from huggingface_hub import ModelCard

    card = ModelCard.load(out / "README.md")
    assert card.data.to_dict() == {
        "library_name": "transformers",
        "pipeline_tag": "token-classification",
        "tags": ["ralm", "luke", "entity-aware", "ner"],
    }
    assert (
        "LukeForEntitySpanClassification.from_pretrained" in card.text
        and "| hidden size L / entity size l | 32 / 32 |" in card.text
    )


def test_reduced_entity_dimension_exports_ralm_format(
    tmp_path, tiny_luke_config, minilm_dir, bert_tokenizer, capsys
):
    cfg = tiny_luke_config(vocab_size=V, entity_hidden_size=16, max_mention_length=30)
    run, ours = make_run(tmp_path, cfg, minilm_dir)
    out = tmp_path / "exp"
    assert main(["luke", "export", str(run), str(out)]) == 0
    printed = capsys.readouterr().out.strip().splitlines()
    note = [x for x in printed if "cannot represent a reduced entity dimension" in x]
    assert len(note) == 1 and "l = 16 < L = 32" in note[0]
    assert json.loads((out / "config.json").read_text())["format"] == "ralm_luke"
    assert (out / "entity_vocab.tsv").is_file() and (out / "vocab.txt").is_file()
    card = (out / "README.md").read_text()
    assert (
        'library_name: "ralm"' in card
        and "load_model(" in card
        and "| hidden size L / entity size l | 32 / 16 |" in card
    )
    enc, ent, ent_mask, pos = inputs(bert_tokenizer)
    with torch.no_grad():
        a = ours(enc["input_ids"], enc["attention_mask"], ent, ent_mask, pos)
        b = load_model(out)(enc["input_ids"], enc["attention_mask"], ent, ent_mask, pos)
    assert torch.equal(a["entity_logits"], b["entity_logits"])


def test_export_refuses_existing_out_and_bad_runs(tmp_path, tiny_luke_config, minilm_dir, capsys):
    cfg = tiny_luke_config(vocab_size=V, max_mention_length=30)
    run, _ = make_run(tmp_path, cfg, minilm_dir)
    out = tmp_path / "hf"
    assert main(["luke", "export", str(run), str(out)]) == 0
    before = (out / "model.safetensors").stat().st_mtime_ns
    capsys.readouterr()
    assert main(["luke", "export", str(run), str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "exists" in err[0] and "--overwrite" in err[0]
    assert (out / "model.safetensors").stat().st_mtime_ns == before
    assert main(["luke", "export", str(run), str(out), "--overwrite"]) == 0

    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep")
    capsys.readouterr()
    assert main(["luke", "export", str(run), str(mine), "--overwrite"]) == 2
    assert "not an exported model" in capsys.readouterr().err and (mine / "notes.txt").is_file()

    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["luke", "export", str(empty), str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "neither a ralm LUKE model directory" in err[0]
    assert not (tmp_path / "x").exists()


def test_export_rejects_a_vocabulary_of_another_run(tmp_path, tiny_luke_config, minilm_dir, capsys):
    cfg = tiny_luke_config(vocab_size=V, max_mention_length=30)
    run, _ = make_run(tmp_path, cfg, minilm_dir, vocab_size=25)
    out = tmp_path / "hf"
    assert main(["luke", "export", str(run), str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "25 entities" in err[0] and "20 rows" in err[0]
    assert not out.exists() and not [p for p in tmp_path.iterdir() if p.name.startswith(".hf")]
