"""Faults and bad files: damaged checkpoints, torn metrics, two writers, a checkpoint's index that
does not fit, config values of the wrong type. Real tiny runs, real files, real processes."""

from __future__ import annotations

import json
import re
import shutil
import signal

import pytest
import torch

from ralm.errors import RalmError

pytestmark = pytest.mark.usefixtures("one_thread")


def _steps(run):
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    return [r["step"] for r in rows if "loss" in r]


def _params(ckpt):
    from safetensors.torch import load_file

    return load_file(str(ckpt / "model.safetensors"))


def _truncate(path, size):
    with open(path, "r+b") as f:
        f.truncate(size)


# ----------------------------------------------------------------------------- damaged checkpoints
def test_state_json_records_every_checkpoint_file(tiny_cfg):
    from ralm.integrity import check_digests
    from ralm.realm.training.trainer import pretrain

    run = pretrain(tiny_cfg(steps=1), progress=False)
    ckpt = run / "checkpoints" / "step-0000001"
    files = json.loads((ckpt / "state.json").read_text())["files"]
    on_disk = sorted(p.relative_to(ckpt).as_posix() for p in ckpt.rglob("*") if p.is_file())
    assert sorted(files) == sorted(set(on_disk) - {"state.json"})
    assert {"model.safetensors", "optim.pt", "rng.safetensors", "index/index.faiss"} <= set(files)
    assert all(set(r) == {"size", "xxh3_128"} for r in files.values())
    assert check_digests(ckpt, files) == []


def test_resume_falls_back_from_a_truncated_checkpoint(tiny_cfg, tmp_path, capsys):
    from ralm.realm.training.trainer import pretrain

    kw = dict(steps=3, checkpoint_every=1, keep_checkpoints=3)
    full = pretrain(tiny_cfg(out=str(tmp_path / "full"), **kw), progress=False)
    cfg = tiny_cfg(out=str(tmp_path / "part"), **kw)
    run = pretrain(cfg, progress=False, stop_after=2)
    m = run / "checkpoints" / "step-0000002" / "model.safetensors"
    size = m.stat().st_size
    _truncate(m, size // 2)
    capsys.readouterr()
    pretrain(cfg, resume=True, progress=False)  # was: SafetensorError
    assert capsys.readouterr().err == (
        f"ralm: warning: checkpoint step-0000002 is damaged ({m}: {size // 2} bytes, expected {size}); "
        "using step-0000001, the newest intact checkpoint\n"
    )
    assert _steps(run) == [1, 2, 3]  # step 2 was trained again, logged once
    a, b = _params(full / "checkpoints" / "step-0000003"), _params(run / "checkpoints" / "step-0000003")
    for name in a:
        torch.testing.assert_close(a[name], b[name], rtol=0, atol=0, msg=name)


def test_a_flipped_byte_is_found_and_every_reader_falls_back(tiny_cfg, capsys):
    from ralm.cli import main
    from ralm.realm.training.run import load_run
    from ralm.realm.training.trainer import pretrain

    run = pretrain(tiny_cfg(steps=2, checkpoint_every=1), progress=False)
    m = run / "checkpoints" / "step-0000002" / "model.safetensors"
    data = bytearray(m.read_bytes())
    data[-5] ^= 0xFF  # same size, other contents: only the digest finds it
    m.write_bytes(bytes(data))
    capsys.readouterr()
    loaded = load_run(run)
    assert loaded.checkpoint.name == "step-0000001" and loaded.state["step"] == 1
    note = (
        f"ralm: warning: checkpoint step-0000002 is damaged ({m}: contents changed (checksum mismatch)); "
        "using step-0000001, the newest intact checkpoint\n"
    )
    assert capsys.readouterr().err == note
    assert main(["fill", str(run), "Oslo is the capital of [MASK].", "--json"]) == 0
    assert capsys.readouterr().err == note
    # a checkpoint named explicitly is not replaced by another: one line naming the file
    with pytest.raises(RalmError) as exc:
        load_run(run, checkpoint=run / "checkpoints" / "step-0000002")
    assert str(exc.value) == (
        f"checkpoint {run / 'checkpoints' / 'step-0000002'} is damaged ({m}: contents changed (checksum "
        "mismatch)); give another checkpoint of the run"
    )


def test_no_intact_checkpoint_is_one_line(tiny_cfg, capsys):
    from ralm.cli import main
    from ralm.realm.training.trainer import pretrain

    cfg = tiny_cfg(steps=2, checkpoint_every=1)
    run = pretrain(cfg, progress=False)
    ck = run / "checkpoints"
    (ck / "step-0000002" / "optim.pt").unlink()
    _truncate(ck / "step-0000001" / "rng.safetensors", 10)
    want = (
        f"{run}: every checkpoint is damaged ({ck / 'step-0000002' / 'optim.pt'}: missing; "
        f"{ck / 'step-0000001' / 'rng.safetensors'}: 10 bytes, expected "
    )
    with pytest.raises(RalmError) as exc:
        pretrain(cfg, resume=True, progress=False)
    assert str(exc.value).startswith(want)
    assert str(exc.value).endswith("); start the run over with `ralm pretrain --overwrite`")
    capsys.readouterr()
    assert main(["evaluate-mlm", str(run)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("ralm: error: " + want) and err.count("\n") == 1


def test_unrecorded_checkpoint_that_safetensors_cannot_read_is_one_line(tiny_cfg, capsys):
    """A checkpoint written before files were recorded: the loader's error becomes one line."""
    from ralm.cli import main
    from ralm.realm.training.run import load_run
    from ralm.realm.training.trainer import pretrain

    cfg = tiny_cfg(steps=1)
    run = pretrain(cfg, progress=False)
    ckpt = run / "checkpoints" / "step-0000001"
    state = json.loads((ckpt / "state.json").read_text())
    del state["files"]
    (ckpt / "state.json").write_text(json.dumps(state))
    m = ckpt / "model.safetensors"
    _truncate(m, m.stat().st_size // 2)
    pat = (
        rf"{re.escape(str(m))}: cannot be read \(.+\); checkpoint step-0000001 is damaged: delete it to use "
        "the previous checkpoint"
    )
    with pytest.raises(RalmError, match=pat):
        load_run(run)
    with pytest.raises(
        RalmError,
        match=pat.replace(
            "use the previous checkpoint",
            "resume from the previous checkpoint, or start over with --overwrite",
        ),
    ):
        pretrain(tiny_cfg(steps=2), resume=True, progress=False)
    capsys.readouterr()
    for argv in (["evaluate-mlm", str(run)], ["export-reader", str(run), str(run.parent / "x")]):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert re.fullmatch("ralm: error: " + pat + "\n", err), err
    assert not (run.parent / "x").exists()


# ----------------------------------------------------------------------------- metrics.jsonl
def test_torn_last_metrics_line_is_dropped_with_a_note(tiny_cfg, capsys):
    from ralm.realm.inference.plot import read_metrics
    from ralm.realm.training.trainer import pretrain

    cfg = tiny_cfg(steps=3, checkpoint_every=1)
    run = pretrain(cfg, progress=False, stop_after=2)
    p = run / "metrics.jsonl"
    n = len(p.read_text().splitlines())
    with open(p, "a") as f:
        f.write('{"step": 3, "loss": 2.')  # the crash came mid-write
    note = f"ralm: warning: {p}: line {n + 1} is incomplete (cut off by a crash); dropped it\n"
    capsys.readouterr()
    assert read_metrics(run)["step"].tolist() == [1, 2]
    assert capsys.readouterr().err == note
    pretrain(cfg, resume=True, progress=False)  # was: JSONDecodeError
    assert capsys.readouterr().err == note
    assert _steps(run) == [1, 2, 3]


def test_bad_metrics_line_in_the_middle_is_an_error(tiny_cfg, capsys):
    from ralm.cli import main
    from ralm.realm.training.trainer import pretrain

    cfg = tiny_cfg(steps=3, checkpoint_every=1)
    run = pretrain(cfg, progress=False, stop_after=2)
    p = run / "metrics.jsonl"
    lines = p.read_text().splitlines()
    p.write_text("\n".join([lines[0], "{oops", *lines[1:]]) + "\n")
    want = f"{p}: line 2 is not valid JSON (Expecting property name enclosed in double quotes); fix or delete that line"
    with pytest.raises(RalmError) as exc:
        pretrain(cfg, resume=True, progress=False)
    assert str(exc.value) == want
    assert p.read_text().splitlines()[1] == "{oops"  # nothing rewritten
    capsys.readouterr()
    assert main(["plot", str(run), "--out", str(run / "x.png")]) == 2
    assert capsys.readouterr().err == f"ralm: error: {want}\n"


# ----------------------------------------------------------------------------- two writers
def test_a_second_writer_and_overwrite_of_a_live_run_are_refused(tiny_cfg, tmp_path, lock_holder, capsys):
    from ralm.cli import main
    from ralm.locks import holder
    from ralm.realm.training.trainer import pretrain

    cfg = tiny_cfg(steps=1)
    run = pretrain(cfg, progress=False)
    before = sorted(p.relative_to(run) for p in run.rglob("*"))
    p = lock_holder(run, "ralm pretrain --out X")
    want = rf"^{re.escape(str(run))}: another ralm process is writing it \(PID {p.pid} on .*\); wait for it"
    for kw in ({}, {"overwrite": True}, {"resume": True}):
        with pytest.raises(RalmError, match=want):
            pretrain(cfg, progress=False, **kw)
    assert sorted(p.relative_to(run) for p in run.rglob("*")) == before  # nothing deleted or added
    fresh = tiny_cfg(steps=1, out=str(tmp_path / "new"))
    lock_holder(tmp_path / "new", "ralm pretrain --out X")
    with pytest.raises(RalmError, match="another ralm process is writing it"):
        pretrain(fresh, progress=False)
    assert not (tmp_path / "new").exists()
    capsys.readouterr()
    argv = [
        "pretrain",
        "--docstore",
        cfg.docstore,
        "--reader",
        cfg.reader,
        "--out",
        str(run),
        "--overwrite",
        "--quiet",
    ]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert re.match("ralm: error: " + want[1:], err) and err.count("\n") == 1
    assert sorted(p.relative_to(run) for p in run.rglob("*")) == before
    p.send_signal(signal.SIGKILL)
    p.wait()
    assert holder(run) is None
    pretrain(cfg, progress=False, overwrite=True)  # the holder is gone: overwrite goes ahead


def test_pretrain_holds_the_lock_while_it_writes(tiny_cfg, monkeypatch):
    import ralm.realm.training.trainer as trainer
    import ralm.train.checkpoint as checkpoint
    from ralm.locks import holder

    seen = []
    save = checkpoint.save_checkpoint

    def spy(run, *a, **kw):
        seen.append(holder(run))  # another open file description: sees the lock as taken
        return save(run, *a, **kw)

    monkeypatch.setattr(checkpoint, "save_checkpoint", spy)  # what trainer's step_saver calls
    run = trainer.pretrain(tiny_cfg(steps=2, checkpoint_every=1), progress=False)
    import os

    assert [s["pid"] for s in seen] == [os.getpid()] * 2
    assert holder(run) is None  # released at the end


def test_leftover_temp_directories_are_cleared_on_resume(tiny_cfg):
    from ralm.realm.training.trainer import pretrain

    cfg = tiny_cfg(steps=3, checkpoint_every=1)
    run = pretrain(cfg, progress=False, stop_after=2)
    junk = [run / "checkpoints" / ".step-0000003.tmp-99999", run / "index" / ".build-v00009"]
    for d in junk:
        d.mkdir()
        (d / "model.safetensors").write_bytes(b"x" * 1000)
    pretrain(cfg, resume=True, progress=False)
    assert not any(d.exists() for d in junk)


# ----------------------------------------------------------------------------- index / corpus mismatch
def test_resume_on_a_rebuilt_corpus_says_what_fits(tiny_cfg, realm_store, tmp_path, tiny_dir):
    from ralm.corpus.build import BuildConfig, build_docstore
    from ralm.realm.training.trainer import pretrain

    store = tmp_path / "store"
    shutil.copytree(realm_store, store)
    cfg = tiny_cfg(docstore=str(store), steps=3, checkpoint_every=1)
    run = pretrain(cfg, progress=False, stop_after=2)
    src = tmp_path / "wiki.jsonl"  # the corpus's source (beside the session's store), one word changed
    src.write_text((realm_store.parent / "wiki.jsonl").read_text().replace("capital", "chief city"))
    shutil.rmtree(store)
    build_docstore(
        [src], store, BuildConfig(chunk_size=24, tokenizer=str(tiny_dir)), progress=False, log=lambda m: None
    )
    with pytest.raises(RalmError) as exc:
        pretrain(cfg, resume=True, progress=False)
    assert str(exc.value) == (
        f"{run}: checkpoint step-0000002 was trained on another corpus than {store} (fingerprints differ); "
        "point docstore back to the corpus the run was trained on, or start over with --overwrite"
    )


def test_unreadable_index_in_an_unrecorded_checkpoint(tiny_cfg):
    from ralm.realm.training.trainer import pretrain

    cfg = tiny_cfg(steps=3, checkpoint_every=1)
    run = pretrain(cfg, progress=False, stop_after=2)
    ckpt = run / "checkpoints" / "step-0000002"
    state = json.loads((ckpt / "state.json").read_text())
    del state["files"]  # as written before files were recorded: nothing finds the damage early
    (ckpt / "state.json").write_text(json.dumps(state))
    idx = ckpt / "index" / "index.faiss"
    data = idx.read_bytes()
    idx.unlink()  # a hard link: break it before writing
    idx.write_bytes(b"\0" * len(data))
    with pytest.raises(RalmError) as exc:
        pretrain(cfg, resume=True, progress=False)
    msg = str(exc.value)
    assert msg.startswith(
        f"checkpoint step-0000002: its index cannot be used ({idx}: "
    )  # the index's own words
    assert msg.endswith(
        "); delete the checkpoint to resume from the previous one, or start over with --overwrite"
    )
    assert "ralm index" not in msg  # its advice fits an index directory, not a checkpoint


# ----------------------------------------------------------------------------- config value types
@pytest.mark.parametrize(
    ("toml", "want"),
    [
        ('steps = "ten"', "steps = 'ten': expected an integer"),
        ("steps = true", "steps = true: expected an integer"),
        ("steps = 10.5", "steps = 10.5: expected an integer"),
        ('lr_reader = "fast"', "lr_reader = 'fast': expected a number"),
        ("tensorboard = 1", "tensorboard = 1: expected true or false"),
        ("reader = 3", "reader = 3: expected a string"),
        ('proj_dim = "big"', "proj_dim = 'big': expected an integer"),
        ('builder_cores = [1, "a"]', "builder_cores = [1, 'a']: expected a list of integers"),
        ("builder_cores = 1", "builder_cores = 1: expected a list of integers"),
        ("masking = 3", "masking = 3: expected a [masking] table"),
        ('[masking]\nsalient_rate = "abc"', "masking.salient_rate = 'abc': expected a number"),
        ("[masking]\nspan_max_len = false", "masking.span_max_len = false: expected an integer"),
        ("[masking]\nreplace_probs = [1, 0]", "masking.replace_probs = [1, 0]: expected a list of 3 numbers"),
        ('[masking]\nsources = ["link", 2]', "masking.sources = ['link', 2]: expected a list of strings"),
    ],
)
def test_config_values_of_the_wrong_type(tmp_path, toml, want):
    from ralm.realm.config import PretrainConfig

    p = tmp_path / "c.toml"
    p.write_text(f'docstore = "d"\nout = "o"\n{toml}\n')
    with pytest.raises(RalmError) as exc:
        PretrainConfig.from_toml(p)
    assert str(exc.value) == f"{p}: {want}"


def test_config_types_in_code_and_numbers_that_fit():
    from ralm.realm.config import PretrainConfig

    with pytest.raises(RalmError) as exc:
        PretrainConfig(steps="ten")
    assert str(exc.value) == "steps = 'ten': expected an integer"
    with pytest.raises(RalmError) as exc:
        PretrainConfig(k=True)
    assert str(exc.value) == "k = true: expected an integer"
    with pytest.raises(RalmError) as exc:
        PretrainConfig(masking={"span_p": "x"})
    assert str(exc.value) == "masking.span_p = 'x': expected a number"
    cfg = PretrainConfig(
        lr_reader=1, dist_timeout_s=600, masking={"replace_probs": [1, 0, 0], "salient_rate": 0}
    )
    assert cfg.lr_reader == 1.0 and isinstance(cfg.lr_reader, float) and isinstance(cfg.dist_timeout_s, float)
    assert cfg.masking.replace_probs == (1.0, 0.0, 0.0) and isinstance(cfg.masking.salient_rate, float)
    assert PretrainConfig(builder_cores=[1, 2], proj_dim=None, bm25_lang=None).builder_cores == [1, 2]


@pytest.mark.parametrize(
    ("setting", "want"),
    [
        ("steps=ten", "--set steps=ten: expected an integer"),
        ("masking.salient_rate=abc", "--set masking.salient_rate=abc: expected a number"),
        ("tensorboard=yes", "--set tensorboard=yes: expected true or false"),
        (
            "masking.bogus=1",
            "--set masking.bogus: unknown [masking] setting; known: max_salient_tokens, max_spans, "
            "random_span_rate, replace_probs, retrievable_only, salient_rate, sources, span_max_len, span_p, "
            "span_rate, strategy, uniform_rate",
        ),
    ],
)
def test_set_values_of_the_wrong_type_are_one_line(tmp_path, capsys, setting, want):
    from ralm.cli import main

    argv = ["pretrain", "--docstore", "d", "--out", str(tmp_path / "r"), "--set", setting, "--quiet"]
    assert main(argv) == 2
    assert capsys.readouterr().err == f"ralm: error: {want}\n"
    assert not (tmp_path / "r").exists()


def test_resume_without_any_checkpoint_starts_over_cleanly(tiny_cfg):
    """A run that died before its first checkpoint: --resume starts at step 1, metrics logged once."""
    from ralm.realm.training.trainer import pretrain

    cfg = tiny_cfg(steps=2, checkpoint_every=0)
    run = pretrain(cfg, progress=False)
    shutil.rmtree(run / "checkpoints")
    pretrain(cfg, resume=True, progress=False)
    assert _steps(run) == [1, 2]
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows if "refresh_seconds" in r] == [0, 2]


def test_resume_into_a_foreign_directory_deletes_nothing(tiny_cfg, tmp_path):
    from ralm.realm.training.trainer import pretrain

    d = tmp_path / "mine"
    d.mkdir()
    (d / "notes.tmp").write_text("mine")
    pretrain(tiny_cfg(steps=1, out=str(d)), resume=True, progress=False)
    assert (d / "notes.tmp").read_text() == "mine"


def test_fallback_past_a_newer_index_version_keeps_the_one_it_resumes_with(tiny_cfg, capsys):
    """Falling back to step 1 (index v0) while RUN/index holds v1: v1 belongs to the discarded
    steps; the next checkpoint links v0 (was: v0 pruned in favour of v1, FileNotFoundError)."""
    from ralm.realm.training.trainer import pretrain

    cfg = tiny_cfg(steps=3, checkpoint_every=1, refresh_every=2, keep_checkpoints=3)
    run = pretrain(cfg, progress=False, stop_after=2)
    assert sorted(p.name for p in (run / "index").iterdir()) == ["v00001"]
    _truncate(run / "checkpoints" / "step-0000002" / "optim.pt", 10)
    again = tiny_cfg(
        steps=3, checkpoint_every=1, refresh_every=100, keep_checkpoints=3
    )  # no refresh at step 2
    pretrain(again, resume=True, progress=False)
    assert "using step-0000001" in capsys.readouterr().err
    versions = [
        json.loads((run / "checkpoints" / f"step-000000{s}" / "state.json").read_text())["index_version"]
        for s in (1, 2, 3)
    ]
    assert versions == [0, 0, 1]  # v1 again from the final refresh
    assert sorted(p.name for p in (run / "index").iterdir()) == ["v00001"]


def _files(d):
    return {
        p.relative_to(d).as_posix(): (p.stat().st_mtime_ns, p.read_bytes())
        for p in d.rglob("*")
        if p.is_file()
    }


def test_rerunning_a_finished_run_says_so_and_changes_nothing(tiny_cfg, capsys):
    from ralm.realm.training.trainer import pretrain

    run = pretrain(tiny_cfg(steps=2, checkpoint_every=1), progress=False)
    before = _files(run)
    capsys.readouterr()
    with pytest.raises(RalmError) as err:  # without --resume: one line, as for any existing run
        pretrain(tiny_cfg(steps=2, checkpoint_every=1), progress=False)
    assert str(err.value) == (
        f"{run}: finished already (step 2); nothing to do. --resume with more steps continues it, "
        "--overwrite trains it again"
    )
    assert pretrain(tiny_cfg(steps=2, checkpoint_every=1), resume=True, progress=False) == run
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"{run}: finished already (step 2); nothing to do (--overwrite trains it again)"]
    assert _files(run) == before
    # other fixed settings are not this run: refused as before; more steps continue it with --resume
    with pytest.raises(RalmError, match="exists; pass --resume"):
        pretrain(tiny_cfg(steps=2, batch_size=6), progress=False)
    pretrain(tiny_cfg(steps=3, checkpoint_every=1), resume=True, progress=False)
    assert (run / "checkpoints" / "step-0000003" / "state.json").is_file()
