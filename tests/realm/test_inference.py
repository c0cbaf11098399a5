"""evaluate-mlm, export-reader, fill and plot on tiny runs, through Python and the CLI."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from tests.realm.conftest import tiny_config

from ralm.errors import RalmError

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def runs(realm_store, tiny_dir, tmp_path_factory):
    from ralm.realm.training.trainer import pretrain

    root = tmp_path_factory.mktemp("runs")
    base = dict(steps=3, heldout=4, checkpoint_every=0)
    realm = pretrain(tiny_config(realm_store, tiny_dir, out=str(root / "realm"), **base), progress=False)
    mlm = pretrain(
        tiny_config(realm_store, tiny_dir, out=str(root / "mlm"), mode="mlm", **base), progress=False
    )
    return realm, mlm


def test_evaluate_mlm_table(runs):
    from ralm.realm.inference.evaluate import evaluate_mlm, format_table
    from ralm.realm.training.run import load_run

    run, base = load_run(runs[0]), load_run(runs[1])
    rows = evaluate_mlm(run, base, batch_size=3)
    assert [r.name for r in rows] == ["realm (retrieval)", "realm reader alone", "mlm-only baseline"]
    assert len({r.tokens for r in rows}) == 1 and rows[0].examples == 4  # same masks for every model
    for r in rows:
        assert r.ppl == pytest.approx(np.exp(r.nll))
    # the batch size changes nothing (masks are seeded per chunk)
    again = evaluate_mlm(run, base, batch_size=1)
    for a, b in zip(rows, again, strict=True):
        assert a.nll == pytest.approx(b.nll, abs=1e-5)
    assert "realm reader alone" in format_table(rows)
    # eval masks are salient spans only: every masked token lies in a salient span of its chunk
    from ralm.realm.training.heldout import heldout_batches

    for batch in heldout_batches(run, run.heldout_ids, 8):
        for b, cid in enumerate(batch["source_ids"].tolist()):
            pos = set((batch["labels"][b] != -100).nonzero().flatten().add(-1).tolist())
            sal = run.store.salient_tokens(cid)
            cover = {t for s, e, _ in sal.tolist() for t in range(s, e)}
            assert pos and pos <= cover


def test_baseline_trained_on_heldout_chunks_is_refused(runs, tmp_path):
    from ralm.realm.inference.evaluate import evaluate_mlm
    from ralm.realm.training.run import load_run

    run, base = load_run(runs[0]), load_run(runs[1])
    base.train_ids = np.concatenate([base.train_ids, run.heldout_ids[:1]])
    with pytest.raises(RalmError, match="held-out chunks"):
        evaluate_mlm(run, base)


def test_export_reader_round_trip(runs, tmp_path):
    """AutoModelForMaskedLM on the export gives the run's reader logits; the towers load too."""
    from transformers import AutoModel, AutoModelForMaskedLM, AutoTokenizer

    from ralm.realm.inference.export import export_reader, export_retriever
    from ralm.realm.training.run import load_run

    run = load_run(runs[0], device="cpu")
    out = export_reader(run, tmp_path / "reader")
    assert (out / "model.safetensors").is_file() and not list(out.glob("*.bin"))
    mlm = AutoModelForMaskedLM.from_pretrained(out).eval()
    tok = AutoTokenizer.from_pretrained(out)
    x = tok(["Oslo is the capital of [MASK]."], return_tensors="pt")
    with torch.no_grad():
        torch.testing.assert_close(mlm(**x).logits, run.model.reader.mlm(**x).logits, rtol=0, atol=0)
    ret = export_retriever(run, tmp_path / "retriever")
    q = AutoModel.from_pretrained(ret / "query").eval()
    with torch.no_grad():
        torch.testing.assert_close(
            q(**x).last_hidden_state, run.model.encoder.query_tower.model(**x).last_hidden_state
        )
    from huggingface_hub import ModelCard

    from ralm.retrieval.encoders import DualEncoder

    DualEncoder.from_pretrained(ret)  # the model card beside the towers changes nothing for ralm
    reader_card, retriever_card = ModelCard.load(out / "README.md"), ModelCard.load(ret / "README.md")
    assert reader_card.data.to_dict() == {
        "library_name": "transformers",
        "pipeline_tag": "fill-mask",
        "tags": ["ralm", "realm", "brent", "retrieval-augmented"],
    }  # no base_model: the run's reader is a local directory, not a Hub id
    assert retriever_card.data.library_name == "sentence-transformers"
    assert retriever_card.data.pipeline_tag == "sentence-similarity"
    assert "AutoModelForMaskedLM.from_pretrained" in reader_card.text and "| step | 3 |" in reader_card.text
    with pytest.raises(RalmError, match="exists"):
        export_reader(run, tmp_path / "reader")
    (tmp_path / "junk").mkdir()
    (tmp_path / "junk" / "notes.txt").write_text("mine")
    with pytest.raises(RalmError, match="not an exported model"):
        export_reader(run, tmp_path / "junk", overwrite=True)


def test_fill_on_tiny_model(runs):
    from ralm.realm.inference.fill import fill
    from ralm.realm.modeling.marginal import marginal_log_likelihood
    from ralm.realm.training.run import load_run

    run = load_run(runs[0])
    res = fill(run, "Oslo is the capital of [MASK] and [MASK].", top=3)
    assert len(res.docs) == 3 and res.docs[-1].chunk_id == -1  # k=3: two chunks + the null document
    assert [d.p_z for d in res.docs[:-1]] == sorted((d.p_z for d in res.docs[:-1]), reverse=True)
    assert sum(d.p_z for d in res.docs) == pytest.approx(1.0, abs=1e-5)
    assert len(res.prediction) == 2 and all(len(d.prediction) == 2 for d in res.docs)
    assert [len(a) for a in res.alternatives] == [3, 3]
    assert res.alternatives[0][0][0] == res.prediction[0]  # the marginal argmax heads its alternatives
    for d in res.docs:
        if d.chunk_id >= 0:
            assert d.title and d.text == run.store.get(d.chunk_id)["text"]
    # p(y|x) of the marginal prediction: recompute Σ_z p(z|x) Π_j p(y_j|z,x) with the reader directly
    from ralm.realm.readers.mlm import build_reader_inputs

    tok = run.tokenizer
    enc = tok(res.text, return_tensors="pt")
    masked = (enc["input_ids"][0] == tok.mask_token_id).nonzero().flatten()
    labels = torch.full_like(enc["input_ids"], -100)
    labels[0, masked] = torch.tensor(tok.convert_tokens_to_ids(res.prediction))
    docs = [run.model.docs.reader_doc(d.chunk_id) for d in res.docs[:-1]] + [([], [])]
    rin = build_reader_inputs(enc["input_ids"], labels, [docs], run.model.sep_id, run.model.pad_id, 96)
    with torch.no_grad():
        lpyz = run.model.reader.log_p_y_given_z(rin, 1, 3)
    lpz = torch.tensor([[d.p_z for d in res.docs]]).log()
    assert res.p_y == pytest.approx(float(marginal_log_likelihood(lpz, lpyz).exp()), rel=1e-4)
    assert "p(z|x)" in res.format() and "(null document)" in res.format()
    with pytest.raises(RalmError, match="no \\[MASK\\]"):
        fill(run, "Oslo is the capital of Norway.")
    with pytest.raises(RalmError, match="k=500"):
        fill(run, "Oslo is the capital of [MASK].", k=500)
    plain = fill(load_run(runs[1]), "Oslo is the capital of [MASK].")
    assert plain.docs == [] and len(plain.prediction) == 1


def test_plot_and_ema(runs, tmp_path):
    from ralm.realm.inference.plot import ema, plot_runs

    np.testing.assert_allclose(ema(np.array([1.0, 3.0, 3.0]), 0.5), [1.0, 2.0, 2.5])
    png = plot_runs(list(runs), tmp_path / "curves.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
    with pytest.raises(RalmError, match="no metrics.jsonl"):
        plot_runs([tmp_path], tmp_path / "x.png")


def test_cli_commands(runs, tmp_path, capsys, realm_store, tiny_dir):
    from ralm.cli import main

    assert (
        main(
            ["evaluate-mlm", str(runs[0]), "--baseline", str(runs[1]), "--json-out", str(tmp_path / "e.json")]
        )
        == 0
    )
    table = capsys.readouterr().out
    assert "mlm-only baseline" in table
    assert [r["name"] for r in json.loads((tmp_path / "e.json").read_text())["rows"]][
        0
    ] == "realm (retrieval)"
    assert main(["fill", str(runs[0]), "Oslo is the capital of [MASK].", "--json"]) == 0
    assert json.loads(capsys.readouterr().out.strip())["docs"][-1]["chunk_id"] == -1
    assert main(["fill", str(runs[0]), "no mask here"]) == 2
    assert "ralm: error:" in capsys.readouterr().err
    assert main(["export-reader", str(runs[0]), str(tmp_path / "r")]) == 0
    assert main(["plot", str(runs[0]), "--out", str(tmp_path / "p.png")]) == 0
    # pretrain from a TOML file plus flags; the saved config has both
    cfg = tmp_path / "c.toml"
    cfg.write_text(
        f'docstore = "{realm_store}"\nreader = "{tiny_dir}"\nsteps = 1\nbatch_size = 2\nk = 3\n'
        'encoder_max_length = 32\nreader_max_length = 96\nheldout = 2\nautocast = "off"\n'
        "tensorboard = false\n[masking]\nsalient_rate = 0.2\n"
    )
    out = tmp_path / "cli-run"
    assert (
        main(
            [
                "pretrain",
                str(cfg),
                "--out",
                str(out),
                "--mode",
                "mlm",
                "--set",
                "masking.random_span_rate=0.0",
                "--quiet",
            ]
        )
        == 0
    )
    saved = (out / "config.toml").read_text()
    assert 'mode = "mlm"' in saved and "salient_rate = 0.2" in saved and "random_span_rate = 0.0" in saved
    assert main(["pretrain", str(cfg), "--out", str(out), "--quiet"]) == 2  # exists, no --resume
    assert main(["pretrain", str(cfg), "--out", str(tmp_path / "x"), "--set", "bogus=1"]) == 2
    assert main(["evaluate-mlm", str(tmp_path)]) == 2
