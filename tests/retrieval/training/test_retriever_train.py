"""Retriever training end to end on tiny random towers: every mode, resume, and the saved encoder's uses."""

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from pairs_ref import QUESTIONS

from ralm.errors import RalmError
from ralm.retrieval.encoders import DualEncoder, EncoderConfig
from ralm.retrieval.passages import StorePassages
from ralm.retrieval.training import recipes as rt
from ralm.retrieval.training.batches import SupervisedBatches, plan_epoch
from ralm.retrieval.training.data import read_pairs
from ralm.retrieval.training.negatives import mine_negatives
from ralm.retrieval.training.recipes import RetrieverTrainConfig, train_retriever
from testkit import run_ralm_errors as run


def test_plan_epoch_docstring_example():
    batches = plan_epoch([7, 7, 8], 2, np.random.default_rng(0))
    assert len(batches) == 2 and sorted(i for b in batches for i in b) == [0, 1, 2]
    assert all(not {0, 1} <= set(b) for b in batches)


def test_plan_epoch_keeps_shared_positives_apart():
    rng = np.random.default_rng(3)
    positives = rng.integers(0, 40, size=203).tolist()  # many questions share a passage
    batches = plan_epoch(positives, 16, rng)
    assert len(batches) == -(-203 // 16)  # ceil(n / B), always
    assert sorted(i for b in batches for i in b) == list(range(203))
    clean = [len({positives[i] for i in b}) == len(b) for b in batches]
    assert sum(clean) >= len(batches) - 2  # only the leftovers at the end may clash


def test_mask_marks_other_positives_and_answer_bearing_passages(pair_files, context_store, tiny_dir):
    pairs = read_pairs(pair_files["dir"] / "squad.json", context_store)
    batches = SupervisedBatches(pairs, [[0]] * len(pairs.examples), batch_size=4)
    exs = pairs.examples[:2]  # both about Oslo (article 0)
    docs = [exs[0].positives[0], exs[1].positives[0], 0]
    mask = batches.mask(exs, docs)
    texts = [context_store.get(d)["text"] for d in docs]
    for i, ex in enumerate(exs):
        for j, d in enumerate(docs):
            want = d in ex.positives or any(a in texts[j] for a in ex.answers)
            assert bool(mask[i, j]) == want
    assert bool(mask[0, 0]) and bool(mask[1, 1])  # own positives (the loss keeps the target)


def _enc(tiny_dir, **kw):
    torch.manual_seed(0)
    return DualEncoder.from_pretrained(tiny_dir, EncoderConfig(normalize=True, max_length=32, **kw))


def _dpr_run(tiny_dir, pairs, out, dev=None, **kw):
    log = kw.pop("log", lambda m: None)
    cfg = RetrieverTrainConfig(
        mode="dpr", epochs=kw.pop("epochs", 2), batch_size=4, lr=1e-3, save_every=2, log_every=1, **kw
    )
    negatives = mine_negatives(pairs, pairs.passages.bm25(), depth=3)
    return train_retriever(
        _enc(tiny_dir), pairs, out, cfg, dev=dev, negatives=negatives, progress=False, log=log
    )


@pytest.mark.parametrize("fmt", ["squad.json", "qa.jsonl", "dpr.json", "beir"])
def test_dpr_mode_trains_on_each_format(tmp_path, pair_files, context_store, tiny_dir, one_thread, fmt):
    store = None if fmt in ("dpr.json", "beir") else context_store
    pairs = read_pairs(pair_files["dir"] / fmt, store)
    res = _dpr_run(tiny_dir, pairs, tmp_path / "run", dev=pairs)
    rows = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    steps = -(-len(pairs.examples) // 4) * 2
    assert res["steps"] == steps and res["steps_per_epoch"] == steps // 2
    assert [r["step"] for r in rows if "dev_recall@5" in r] == [0, steps // 2, steps]  # each epoch end
    assert [r["step"] for r in rows if "loss" in r] == list(range(1, steps + 1))
    assert res["best"] == max(r["dev_recall@5"] for r in rows if r["step"] > 0 and "dev_recall@5" in r)
    assert not (tmp_path / "run" / "checkpoints").exists()  # removed when finished
    enc = DualEncoder.from_pretrained(tmp_path / "run" / "encoder")
    assert enc.config.normalize and enc.fingerprint() != _enc(tiny_dir).fingerprint()
    # the training temperature (0.05 for unit vectors) travels with the encoder as its score scale
    assert res["temperature"] == 0.05 and enc.config.score_scale == pytest.approx(20.0)
    q, d = torch.randn(2, enc.dim), torch.randn(3, enc.dim)
    torch.testing.assert_close(enc.score(q, d), 20.0 * (q @ d.T))
    from huggingface_hub import ModelCard

    card = ModelCard.load(tmp_path / "run" / "encoder" / "README.md")  # for push_to_hub
    assert card.data.to_dict() == {
        "library_name": "sentence-transformers",
        "pipeline_tag": "sentence-similarity",
        "tags": ["ralm", "dense-retrieval", "dpr"],
    }
    assert f"| steps | {steps} (saved: step {res['best_step']}, by dev recall@5) |" in card.text
    assert f"| dev recall@5 | {res['best']:.4f} |" in card.text


def test_training_lowers_the_loss_on_the_pairs(tmp_path, pair_files, context_store, tiny_dir, one_thread):
    pairs = read_pairs(pair_files["dir"] / "squad.json", context_store)
    _dpr_run(tiny_dir, pairs, tmp_path / "run", epochs=12)
    rows = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    losses = [r["loss"] for r in rows if "loss" in r]
    assert np.mean(losses[-6:]) < 0.6 * np.mean(losses[:6])


@pytest.fixture(scope="module")
def lee_store(tmp_path_factory, tiny_dir):
    """40 articles of the bundled `lee` sample in 64-token chunks (~200): enough held-out chunks that
    an untrained encoder finds few of them."""
    from ralm.corpus.build import BuildConfig, build_docstore
    from ralm.samples import sample_format, sample_path

    cfg = BuildConfig(chunk_size=64, format=sample_format("lee"), tokenizer=str(tiny_dir), max_articles=40)
    out = tmp_path_factory.mktemp("lee") / "store"
    return build_docstore([sample_path("lee")], out, cfg, progress=False, log=lambda m: None)


@pytest.mark.parametrize("recipe", ["crop", "ict", "both"])
def test_contrastive_recipes_beat_the_untrained_encoder_on_held_out_chunks(
    tmp_path, lee_store, tiny_dir, one_thread, recipe
):
    cfg = RetrieverTrainConfig(
        mode="contrastive", recipe=recipe, steps=20, batch_size=16, heldout=40, log_every=1, lr=1e-3
    )
    enc = DualEncoder.from_pretrained(tiny_dir, EncoderConfig(max_length=64))
    res = train_retriever(
        enc, StorePassages(lee_store), tmp_path / "run", cfg, progress=False, log=lambda m: None
    )
    rows = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert res["steps"] == 20 and res["recipe"] == recipe
    before, after = [r for r in rows if "dev_heldout_recall@1" in r]
    assert (before["step"], after["step"]) == (0, 20)
    # step 0 is the untrained encoder on the held-out chunks' views (measured: recall@1 .03-.04)
    assert after["dev_heldout_recall@1"] >= before["dev_heldout_recall@1"] + 0.15
    assert after["dev_heldout_recall@5"] > before["dev_heldout_recall@5"]


def test_gradient_cache_run_equals_the_plain_run(tmp_path, pair_files, context_store, tiny_dir, one_thread):
    """Dropout off: batch 4 in mini-batches of 1 trains the same weights as batch 4 at once."""
    pairs = read_pairs(pair_files["dir"] / "squad.json", context_store)
    fps = []
    for cache in (0, 1):
        enc = _enc(tiny_dir, pooling="cls")
        for m in enc.modules():
            if isinstance(m, torch.nn.Dropout):
                m.p = 0.0
        cfg = RetrieverTrainConfig(mode="dpr", epochs=1, batch_size=4, grad_cache=cache, autocast="off")
        negatives = mine_negatives(pairs, pairs.passages.bm25(), depth=3)
        train_retriever(
            enc, pairs, tmp_path / f"c{cache}", cfg, negatives=negatives, progress=False, log=lambda m: None
        )
        fps.append(torch.cat([p.detach().flatten() for p in enc.parameters()]))
    # the same sums in another order: float32 rounding (one weight of 4M moved 2.6e-6 on one machine)
    torch.testing.assert_close(fps[0], fps[1], rtol=1e-4, atol=1e-5)


def test_resume_after_a_crash_gives_the_uninterrupted_weights(
    tmp_path, pair_files, context_store, tiny_dir, one_thread, monkeypatch
):
    pairs = read_pairs(pair_files["dir"] / "squad.json", context_store)
    _dpr_run(tiny_dir, pairs, tmp_path / "whole", epochs=2)
    calls = {"n": 0}
    real = rt.contrastive_losses

    def crash_at_step_4(*a, **k):
        calls["n"] += 1
        if calls["n"] == 4:
            raise KeyboardInterrupt
        return real(*a, **k)

    monkeypatch.setattr(rt, "contrastive_losses", crash_at_step_4)
    with pytest.raises(KeyboardInterrupt):
        _dpr_run(tiny_dir, pairs, tmp_path / "cut", epochs=2)
    assert (tmp_path / "cut" / "checkpoints" / "step-0000002").is_dir()
    notes: list[str] = []
    monkeypatch.setattr(rt, "contrastive_losses", real)
    # what a process killed while saving would leave: an encoder half-written by a PID that is gone
    (tmp_path / "cut" / ".encoder.tmp-99999999").mkdir()
    res = _dpr_run(tiny_dir, pairs, tmp_path / "cut", epochs=2, log=notes.append)
    assert not (tmp_path / "cut" / ".encoder.tmp-99999999").exists()
    assert any("removed" in n and ".encoder.tmp-99999999" in n and "no longer running" in n for n in notes)
    assert res["steps"] == 6
    a = DualEncoder.from_pretrained(tmp_path / "whole" / "encoder")
    b = DualEncoder.from_pretrained(tmp_path / "cut" / "encoder")
    assert a.fingerprint() == b.fingerprint()
    steps = [json.loads(x)["step"] for x in (tmp_path / "cut" / "metrics.jsonl").read_text().splitlines()]
    assert steps == [
        json.loads(x)["step"] for x in (tmp_path / "whole" / "metrics.jsonl").read_text().splitlines()
    ]
    cut = tmp_path / "cut"
    before = {p.relative_to(cut).as_posix(): p.stat().st_mtime_ns for p in cut.rglob("*") if p.is_file()}
    notes.clear()
    again = _dpr_run(tiny_dir, pairs, cut, epochs=2, log=notes.append)  # the same command: nothing to do
    assert again == json.loads((cut / "results.json").read_text())
    assert notes == [
        f"{cut}: finished already ({cut / 'results.json'}); nothing to do (--overwrite trains it again)"
    ]
    assert {
        p.relative_to(cut).as_posix(): p.stat().st_mtime_ns for p in cut.rglob("*") if p.is_file()
    } == before
    with pytest.raises(RalmError, match=r"holds a finished run with other settings \(epochs\)"):
        _dpr_run(tiny_dir, pairs, cut, epochs=3)
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "x").write_text("")
    with pytest.raises(RalmError, match="is not a `ralm retriever train` run"):
        _dpr_run(tiny_dir, pairs, tmp_path / "other", epochs=2)


def test_changed_settings_are_refused_on_resume(
    tmp_path, pair_files, context_store, tiny_dir, one_thread, monkeypatch
):
    pairs = read_pairs(pair_files["dir"] / "squad.json", context_store)
    monkeypatch.setattr(rt, "contrastive_losses", lambda *a, **k: (_ for _ in ()).throw(KeyboardInterrupt))
    with pytest.raises(KeyboardInterrupt):
        _dpr_run(tiny_dir, pairs, tmp_path / "cut")
    with pytest.raises(RalmError, match=r"unfinished `ralm retriever train` run with other settings \(lr\)"):
        cfg = RetrieverTrainConfig(mode="dpr", epochs=2, batch_size=4, lr=5e-4, save_every=2, log_every=1)
        train_retriever(_enc(tiny_dir), pairs, tmp_path / "cut", cfg, negatives=[[]] * 10, progress=False)


def _dpr_on_squad(capsys, pair_files, context_store, tiny_dir, out, *options):
    """`ralm retriever train dpr` of the tiny encoder on the SQuAD file over context_store into `out`,
    `options` added: run_ralm_errors' answer."""
    squad = pair_files["dir"] / "squad.json"
    argv = ["dpr", squad, "--corpus", context_store.root, "--out", out, "--encoder", tiny_dir, *options]
    return run(capsys, "retriever", "train", *argv)


def test_cli_trains_and_the_encoder_works_in_index_build_and_eval_retrieval(
    tmp_path, pair_files, context_store, tiny_dir, capsys, one_thread
):
    d = pair_files["dir"]
    code, out, err = _dpr_on_squad(
        capsys,
        pair_files,
        context_store,
        tiny_dir,
        tmp_path / "dpr",
        "--dev",
        d / "qa.jsonl",
        "--epochs",
        "1",
        "--batch-size",
        "4",
        "--max-length",
        "32",
        "--quiet",
    )
    assert code == 0 and not err
    summary = json.loads(out)
    assert summary["encoder"] == str(tmp_path / "dpr" / "encoder") and summary["best_step"] == 3
    enc = tmp_path / "dpr" / "encoder"
    assert (
        run(
            capsys,
            "index",
            "build",
            context_store.root,
            "--out",
            tmp_path / "index",
            "--encoder",
            enc,
            "--quiet",
        )[0]
        == 0
    )
    code, out, _ = run(
        capsys, "search", tmp_path / "index", "when was the royal palace finished", "-k", "2", "--json"
    )
    assert code == 0 and len(out.splitlines()) == 2
    code, out, err = run(
        capsys,
        "eval-retrieval",
        context_store.root,
        "--qa",
        d / "qa.jsonl",
        "--dense",
        enc,
        "--no-bm25",
        "-k",
        "1",
        "5",
        "--json-out",
        tmp_path / "eval.json",
        "--quiet",
    )
    assert code == 0 and not err
    report = json.loads((tmp_path / "eval.json").read_text())
    assert report["questions"] == len(QUESTIONS) and f"dense:{enc}" in report["recall"]
    # REALM pre-training starts from the trained towers: the same query and doc vectors as the saved encoder
    from ralm.realm.config import PretrainConfig
    from ralm.realm.training.build import build_model

    cfg = PretrainConfig(
        docstore=str(context_store.root),
        out=str(tmp_path / "realm"),
        reader=str(tiny_dir),
        retriever=str(enc),
        encoder_max_length=32,
        autocast="off",
    )
    model, _ = build_model(cfg, context_store)
    saved = DualEncoder.from_pretrained(enc)
    saved.config.max_length = 32
    model.encoder.eval()
    saved.eval()
    queries = [q for q, *_ in QUESTIONS]
    np.testing.assert_allclose(
        model.encoder.encode_queries(queries, autocast="off"),
        saved.encode_queries(queries, autocast="off"),
        rtol=0,
        atol=1e-6,
    )
    docs = [a for _, a, _ in QUESTIONS]
    np.testing.assert_allclose(
        model.encoder.encode_docs(None, docs, autocast="off"),
        saved.encode_docs(None, docs, autocast="off"),
        rtol=0,
        atol=1e-6,
    )
    untrained = DualEncoder.from_pretrained(tiny_dir)
    untrained.eval()
    assert not np.allclose(
        untrained.encode_queries(queries, autocast="off"),
        saved.encode_queries(queries, autocast="off"),
        atol=1e-3,
    )
    # ict and contrastive from the CLI
    for mode in ("ict", "contrastive"):
        code, out, err = run(
            capsys,
            "retriever",
            "train",
            mode,
            context_store.root,
            "--out",
            tmp_path / mode,
            "--encoder",
            tiny_dir,
            "--steps",
            "2",
            "--batch-size",
            "4",
            "--max-length",
            "32",
            "--quiet",
        )
        assert code == 0 and not err and Path(json.loads(out)["encoder"]).is_dir()


def test_cli_bad_input_is_one_line(tmp_path, pair_files, context_store, tiny_dir, capsys):
    d = pair_files["dir"]
    code, _, err = run(
        capsys, "retriever", "train", "dpr", d / "squad.json", "--out", tmp_path / "x", "--encoder", tiny_dir
    )
    assert code == 2 and len(err) == 1 and "need the corpus" in err[0]
    code, _, err = run(capsys, "retriever", "train", "dpr", tmp_path / "nope.json", "--out", tmp_path / "x")
    assert code == 2 and len(err) == 1 and "nope.json: no such file" in err[0]
    code, _, err = run(
        capsys, "retriever", "train", "dpr", d / "dpr.json", "--out", tmp_path / "x", "--batch-size", "1"
    )
    assert code == 2 and len(err) == 1 and "--batch-size 1" in err[0]
    assert not (tmp_path / "x").exists()


def test_cli_device_without_a_gpu_is_one_line(tmp_path, pair_files, context_store, tiny_dir, capsys):
    """--device cuda where torch sees no CUDA GPU: one line naming the device, exit 2, no --out."""
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a CUDA GPU")
    for device, want in (("cuda", "no CUDA GPU is available here"), ("tpu7", "use auto, cpu, cuda")):
        code, _, err = _dpr_on_squad(
            capsys, pair_files, context_store, tiny_dir, tmp_path / "x", "--device", device
        )
        assert code == 2 and len(err) == 1 and f"device {device!r}" in err[0] and want in err[0]
    assert not (tmp_path / "x").exists()
