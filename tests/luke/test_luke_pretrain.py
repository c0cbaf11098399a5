"""`ralm luke pretrain` on a tiny linked corpus and a tiny BERT: the run directory, resume equals an
uninterrupted run, the plain-MLM mode, bf16, the stats, and bad input (one line, exit 2, --out untouched)."""

from __future__ import annotations

import json
import shutil

import pytest
import torch

import testkit
from ralm.cli import main
from ralm.errors import RalmError

pytestmark = pytest.mark.usefixtures("one_thread")

# testkit's linked corpus to Copenhagen, a shorter Denmark, and Sweden
DOCS = [
    *testkit.FACTS[:5],
    ("Denmark", "Denmark is a country in [[Scandinavia]]. Its capital is [[Copenhagen]]."),
    testkit.FACTS[7],
]


def build(tmp, name, tokenizer, links=True):
    src = testkit.linked_jsonl(tmp / f"{name}.jsonl", DOCS, links)
    return testkit.quiet_store([src], tmp / name, 24, tokenizer).root


@pytest.fixture(scope="module")
def store(tmp_path_factory, tiny_dir):
    return build(tmp_path_factory.mktemp("luke-pre"), "store", tiny_dir)


@pytest.fixture
def make_cfg(store, tiny_dir, tmp_path):
    from ralm.luke.pretrain_config import LukePretrainConfig

    def make(**kw):
        base = dict(
            docstore=str(store),
            out=str(tmp_path / "run"),
            backbone=str(tiny_dir),
            steps=4,
            batch_size=4,
            checkpoint_every=2,
            lr=1e-3,
            warmup_ratio=0.25,
            **testkit.CPU_RUN,
        )
        base.update(kw)
        return LukePretrainConfig(**base)

    return make


def rows(run):
    return [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]


def weights(d):
    from safetensors.torch import load_file

    return load_file(str(d / "model.safetensors"))


def cli(capsys, *argv):
    code = main(["luke", "pretrain", *map(str, argv)])
    cap = capsys.readouterr()
    return code, cap.out, [x for x in cap.err.splitlines() if x.strip()]


def test_run_directory(make_cfg):
    from ralm.luke.io import load_model
    from ralm.luke.pretrain import pretrain
    from ralm.luke.pretrain_config import LukePretrainConfig
    from ralm.luke.vocab import EntityVocabulary

    cfg = make_cfg()
    run = pretrain(cfg, progress=False)
    assert sorted(p.name for p in run.iterdir()) == [
        "checkpoints",
        "config.toml",
        "entity_vocab.tsv",
        "metrics.jsonl",
        "model",
    ]
    assert LukePretrainConfig.from_toml(run / "config.toml") == cfg
    vocab = EntityVocabulary.load(run / "entity_vocab.tsv")
    assert vocab == EntityVocabulary.from_docstore(cfg.docstore, cfg.entity_vocab_size, ["link"])
    assert vocab.titles[0] == "Norway"  # 4 links, more than any other title
    model = load_model(run / "model")
    assert model.config.entity_vocab_size == len(vocab) and model.config.entity_hidden_size == 64
    final = weights(run / "checkpoints" / "step-0000004")
    assert all(torch.equal(v, final[k]) for k, v in model.state_dict().items())
    r = rows(run)
    assert [x["step"] for x in r] == [0, 1, 2, 3, 4]
    from ralm.luke.annotations import annotation_rate

    assert r[0]["entities_per_1k_words"] == pytest.approx(annotation_rate(cfg.docstore, ["link"]))
    assert r[0]["entities_per_1k_words_link_auto"] > r[0]["entities_per_1k_words_link"] > 0
    # lr: warm-up over round(0.25 * 4) = 1 step, then linear decay; logged as used by the step
    assert [x["lr"] for x in r[1:]] == pytest.approx([0.0, 1e-3, 2 / 3 * 1e-3, 1 / 3 * 1e-3])
    for x in r[1:]:
        assert x["loss"] == pytest.approx(x["mlm_loss"] + x["mep_loss"])
        assert 0 <= x["mlm_acc"] <= 1 and 0 <= x["mep_acc"] <= 1 and x["masked_words"] > 0
    assert sum(x["masked_entities"] for x in r[1:]) > 0 and all(
        x["entities_per_1k_tokens"] > 0 for x in r[1:]
    )


def test_first_step_loss_is_the_models_own(make_cfg):
    """The loop's loss (global sums / counts, for DDP) equals LukeForPretraining's mean losses."""
    import numpy as np

    from ralm.luke.data import LukeCollator, MaskSettings
    from ralm.luke.pretrain import MODEL_INPUTS, prepare
    from ralm.realm.data import example_rngs

    cfg = make_cfg()
    prep = prepare(cfg)
    col = LukeCollator(prep.store, prep.spans, prep.vocab, prep.tok, MaskSettings(mep_prob=0.5))
    batch = col(np.arange(6), example_rngs(1, 1, 0, range(6)))
    model = prep.model.eval()
    out = model(
        **{k: batch[k] for k in MODEL_INPUTS},
        mlm_labels=batch["mlm_labels"],
        entity_labels=batch["entity_labels"],
    )
    from ralm.luke.pretrain import _ce_sum

    mlm, _ = _ce_sum(out["mlm_logits"], batch["mlm_labels"])
    mep, _ = _ce_sum(out["entity_logits"], batch["entity_labels"])
    n_mlm, n_mep = (batch["mlm_labels"] != -100).sum(), (batch["entity_labels"] != -100).sum()
    assert n_mep > 0
    torch.testing.assert_close(mlm / n_mlm, out["mlm_loss"])
    torch.testing.assert_close(mep / n_mep, out["mep_loss"])


def test_resume_equals_an_uninterrupted_run(make_cfg, tmp_path):
    from ralm.luke.pretrain import pretrain

    straight = pretrain(make_cfg(out=str(tmp_path / "a"), checkpoint_every=0), progress=False)
    cfg = make_cfg(out=str(tmp_path / "b"), checkpoint_every=0)
    pretrain(cfg, progress=False, stop_after=2)
    assert not (tmp_path / "b" / "model").exists()  # not finished
    resumed = pretrain(cfg, progress=False, resume=True)
    a, b = weights(straight / "model"), weights(resumed / "model")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    drop = ("step_seconds", "elapsed_seconds")
    clean = [{k: v for k, v in x.items() if k not in drop} for x in rows(straight)]
    assert clean == [{k: v for k, v in x.items() if k not in drop} for x in rows(resumed)]
    shutil.rmtree(resumed / "model")  # as if it died between the last checkpoint and the model
    pretrain(cfg, progress=False, resume=True)
    c = weights(resumed / "model")
    assert all(torch.equal(a[k], c[k]) for k in a) and len(rows(resumed)) == len(clean)


def test_mlm_mode_masks_the_same_words_without_entities(make_cfg, tmp_path):
    from ralm.luke.pretrain import pretrain

    luke = rows(pretrain(make_cfg(out=str(tmp_path / "luke"), steps=3), progress=False))
    mlm = rows(pretrain(make_cfg(out=str(tmp_path / "mlm"), steps=3, mode="mlm"), progress=False))
    assert [x["masked_words"] for x in mlm[1:]] == [x["masked_words"] for x in luke[1:]]
    assert all(x["mep_loss"] == 0 and x["masked_entities"] == 0 for x in mlm[1:])
    assert all(x["entities_per_1k_tokens"] == 0 for x in mlm[1:])
    assert mlm[0]["parameters"] == luke[0]["parameters"]  # the same model, E = 0
    assert luke[1]["mlm_loss"] != mlm[1]["mlm_loss"]  # entity tokens change the word states


def test_reduced_entity_dimension_and_bf16(make_cfg, tmp_path):
    from ralm.luke.io import load_model
    from ralm.luke.pretrain import pretrain

    run = pretrain(
        make_cfg(out=str(tmp_path / "ent"), steps=2, entity_hidden_size=32, autocast="bf16"), progress=False
    )
    assert load_model(run / "model").config.entity_hidden_size == 32
    r = rows(run)
    assert all(torch.isfinite(torch.tensor(x["loss"])) for x in r[1:])


def test_stats_only(capsys, store):
    from ralm.luke.annotations import annotation_rate

    code, out, err = cli(capsys, "--docstore", store, "--stats-only")
    assert code == 0, err
    st = json.loads(out)
    assert st["entities_per_1k_words"]["link"] == pytest.approx(annotation_rate(store, ["link"]))
    assert st["entities_per_1k_words"]["link+auto"] == pytest.approx(annotation_rate(store, ["link", "auto"]))
    assert st["run_entities_per_1k_words"] == st["entities_per_1k_words"]["link"]


def _cli_args(store, tiny_dir, out, *extra):
    return [
        "--docstore",
        store,
        "--out",
        out,
        "--backbone",
        tiny_dir,
        "--steps",
        2,
        "--batch-size",
        2,
        "--quiet",
        "--set",
        "device='cpu'",
        "--set",
        "autocast='off'",
        "--set",
        "tensorboard=false",
        *extra,
    ]


def test_cli_run_and_resume(capsys, store, tiny_dir, tmp_path):
    out = tmp_path / "run"
    code, text, err = cli(capsys, *_cli_args(store, tiny_dir, out, "--set", "auto_annotation=true"))
    assert code == 0, err
    assert "run:" in text and (out / "model" / "config.json").is_file()
    code, _, err = cli(capsys, "--out", out, "--resume", "--quiet")  # its own config.toml
    assert code == 0, err
    code, _, err = cli(capsys, *_cli_args(store, tiny_dir, out))
    assert code == 2 and len(err) == 1 and "--resume" in err[0] and "--overwrite" in err[0]


def test_cli_leaves_a_folder_that_is_not_a_run_alone(capsys, store, tiny_dir, tmp_path):
    """--resume into a folder of other files used to delete it: now it starts the run beside them,
    as `ralm pretrain` does; --overwrite refuses it."""
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    code, _, err = cli(capsys, *_cli_args(store, tiny_dir, out, "--overwrite"))
    assert code == 2 and len(err) == 1
    assert "is not a `ralm luke pretrain` run (no config.toml); refusing to overwrite it" in err[0]
    assert [p.name for p in out.iterdir()] == ["notes.txt"]
    code, _, err = cli(capsys, *_cli_args(store, tiny_dir, out, "--resume"))
    assert code == 0, err
    assert (out / "notes.txt").read_text() == "mine" and (out / "model" / "config.json").is_file()


def _snapshot(d):
    return {p.relative_to(d).as_posix(): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}


def test_no_entity_spans_one_line_and_nothing_written(capsys, tmp_path, tiny_dir):
    plain = build(tmp_path, "plain", tiny_dir, links=False)
    out = tmp_path / "run"
    code, _, err = cli(capsys, *_cli_args(plain, tiny_dir, out, "--set", "auto_annotation=true"))
    assert code == 2 and len(err) == 1
    assert str(plain) in err[0] and "link, auto" in err[0]
    assert not out.exists()


def test_l_larger_than_L_one_line_and_old_run_kept(capsys, store, tiny_dir, tmp_path):
    out = tmp_path / "run"
    assert cli(capsys, *_cli_args(store, tiny_dir, out))[0] == 0
    before = _snapshot(out)
    code, _, err = cli(
        capsys, *_cli_args(store, tiny_dir, out, "--overwrite", "--set", "entity_hidden_size=128")
    )
    assert code == 2 and len(err) == 1 and "larger than hidden_size" in err[0]
    assert _snapshot(out) == before  # --overwrite deletes only after every check passed
    code, _, err = cli(
        capsys, *_cli_args(store, tiny_dir, tmp_path / "new", "--set", "entity_hidden_size=128")
    )
    assert code == 2 and not (tmp_path / "new").exists()


def test_vocabulary_mismatch_on_resume(capsys, store, tiny_dir, tmp_path):
    out = tmp_path / "run"
    assert cli(capsys, *_cli_args(store, tiny_dir, out, "--stop-after", 1))[0] == 0
    tsv = out / "entity_vocab.tsv"
    lines = tsv.read_text().splitlines()
    lines[4], lines[5] = (
        lines[5].replace("4\t", "3\t", 1),
        lines[4].replace("3\t", "4\t", 1),
    )  # swap ids 3 and 4
    tsv.write_text("\n".join(lines) + "\n")
    before = _snapshot(out)
    code, _, err = cli(capsys, "--out", out, "--resume", "--quiet")
    assert code == 2 and len(err) == 1
    assert str(tsv) in err[0] and "does not match" in err[0] and "id 3" in err[0]
    assert _snapshot(out) == before
    # a changed source is caught by the config check first, with its own line
    code, _, err = cli(capsys, *_cli_args(store, tiny_dir, out, "--resume", "--set", "auto_annotation=true"))
    assert code == 2 and len(err) == 1 and "auto_annotation=False" in err[0]


def test_config_errors(tmp_path, store):
    from ralm.luke.pretrain_config import LukePretrainConfig

    p = tmp_path / "c.toml"
    p.write_text('docstore = "x"\nsteps = "ten"\n')
    with pytest.raises(RalmError, match=r"c.toml: steps = 'ten': expected an integer"):
        LukePretrainConfig.from_toml(p)
    p.write_text("stepz = 3\n")
    with pytest.raises(RalmError, match="unknown setting.*stepz"):
        LukePretrainConfig.from_toml(p)
    with pytest.raises(RalmError, match="entity sources are link, auto"):
        LukePretrainConfig(sources=["ner"])
    with pytest.raises(RalmError, match="no entity source"):
        LukePretrainConfig(sources=[])
    cfg = LukePretrainConfig(sources=["link"], auto_annotation=True, steps=50)
    assert cfg.entity_sources == ("link", "auto") and cfg.warmup_steps == 3
    assert cfg.replace_probs == pytest.approx((0.8, 0.1, 0.1))
    assert LukePretrainConfig.from_toml(cfg.save(tmp_path / "saved")) == cfg


def test_demo_config_parses():
    from pathlib import Path

    from ralm.luke.pretrain_config import LukePretrainConfig

    cfg = LukePretrainConfig.from_toml(Path(__file__).parents[2] / "configs" / "luke_demo.toml")
    assert cfg.mode == "luke" and cfg.entity_sources == ("link",) and cfg.entity_emb_size == 256


def test_torchrun_two_processes_match_one(store, tiny_dir, tmp_path):
    """2 gloo processes (each half of every batch) reach one process's weights (no dropout: same arithmetic
    up to the order of float additions in the all-reduce)."""
    import os
    import subprocess

    from transformers import BertConfig, BertModel

    from ralm.train.distributed import torchrun_command

    nodrop = tmp_path / "nodrop"
    shutil.copytree(tiny_dir, nodrop)
    bc = BertConfig.from_pretrained(str(tiny_dir))
    bc.hidden_dropout_prob = bc.attention_probs_dropout_prob = 0.0
    BertModel(bc, add_pooling_layer=False).save_pretrained(nodrop)
    argv = ["luke", "pretrain", *map(str, _cli_args(store, nodrop, tmp_path / "two", "--set", "lr=1e-3"))]
    argv[argv.index("--batch-size") + 1] = "4"
    env = dict(os.environ, OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    env.pop("WORLD_SIZE", None)
    res = subprocess.run(torchrun_command(2, argv), capture_output=True, text=True, env=env, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    one = [a if a != str(tmp_path / "two") else str(tmp_path / "one") for a in argv]
    assert main(one) == 0
    a, b = weights(tmp_path / "one" / "model"), weights(tmp_path / "two" / "model")
    for k in a:
        torch.testing.assert_close(a[k], b[k], rtol=1e-4, atol=1e-5, msg=k)
    la = [(x["loss"], x["masked_words"], x["masked_entities"]) for x in rows(tmp_path / "one")[1:]]
    lb = [(x["loss"], x["masked_words"], x["masked_entities"]) for x in rows(tmp_path / "two")[1:]]
    assert [x[1:] for x in la] == [x[1:] for x in lb] and [x[0] for x in la] == pytest.approx(
        [x[0] for x in lb]
    )


def test_entity_first_stage_leaves_the_word_side_bit_identical(make_cfg, tmp_path):
    """Steps 1-2 train the entity side alone (the word side stays bit-identical to the start); steps
    3-4 train everything; the metrics say which stage each step was in."""
    from ralm.luke.pretrain import pretrain
    from ralm.luke.pretrain_run import prepare
    from ralm.luke.stages import entity_side

    cfg = make_cfg(
        out=str(tmp_path / "staged"),
        steps=4,
        entity_first_steps=2,
        checkpoint_every=1,
        keep_checkpoints=8,
        entity_first_lr=1e-2,
    )
    start = {k: v.clone() for k, v in prepare(cfg).model.state_dict().items()}
    run = pretrain(cfg, progress=False)
    two, four = weights(run / "checkpoints" / "step-0000002"), weights(run / "checkpoints" / "step-0000004")
    word = [k for k in start if k in two and not entity_side(k)]
    ent = [k for k in start if k in two and entity_side(k)]
    assert word and ent
    for k in word:
        assert torch.equal(two[k], start[k]), k
    assert all(not torch.equal(four[k], start[k]) for k in word if k.endswith("query.weight"))
    assert sum(not torch.equal(two[k], start[k]) for k in ent) > len(ent) // 2
    assert [r.get("stage") for r in rows(run) if "mlm_loss" in r] == [1, 1, 2, 2]


def test_cli_rerun_of_a_finished_run_changes_nothing(capsys, store, tiny_dir, tmp_path):
    out = tmp_path / "run"
    code, _, err = cli(capsys, *_cli_args(store, tiny_dir, out))
    assert code == 0, err
    before = {p.relative_to(out).as_posix(): p.stat().st_mtime_ns for p in out.rglob("*") if p.is_file()}
    code, _, err = cli(capsys, *_cli_args(store, tiny_dir, out))
    assert code == 2
    assert err == [
        f"ralm: error: {out}: finished already (step 2, {out / 'model'}); nothing to do. --resume with more "
        "steps continues it, --overwrite trains it again"
    ]
    code, _, err = cli(capsys, *_cli_args(store, tiny_dir, out, "--resume"))
    assert code == 0
    assert err == [
        f"{out}: finished already (step 2, {out / 'model'}); nothing to do (--overwrite trains it again)"
    ]
    assert {
        p.relative_to(out).as_posix(): p.stat().st_mtime_ns for p in out.rglob("*") if p.is_file()
    } == before
