"""Faults and bad files: damaged index files, `ralm index verify`, rebuilding over an index
(--overwrite, resume rules), one writer per index directory, arguments refused before any model loads."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from pairs_ref import DOCS

from ralm.cli import main
from testkit import run_ralm_errors as run

REBUILD = "rebuild it (`ralm index build ... --overwrite`)"


@pytest.fixture(scope="module")
def built(tmp_path_factory, tiny_dir):
    """A DocStore and a finished index (dense + BM25) over it; tests copy the index before harming it."""
    d = tmp_path_factory.mktemp("faults")
    src = d / "docs.jsonl"
    src.write_text("\n".join(json.dumps({"title": t, "text": x}) for t, x in DOCS) + "\n")
    argv = ["corpus", "build", src, "--out", d / "store", "--tokenizer", tiny_dir, "--quiet"]
    assert main([str(a) for a in argv]) == 0
    argv = ["index", "build", d / "store", "--out", d / "index", "--encoder", tiny_dir, "--bm25", "--quiet"]
    assert main([str(a) for a in argv]) == 0
    return d


@pytest.fixture
def index(built, tmp_path):
    """A private copy of the built index (the doc -> query symlink kept as a symlink)."""
    out = tmp_path / "index"
    shutil.copytree(built / "index", out, symlinks=True)
    return out


def snapshot(d):
    """Every file under d with its bytes: to show a directory was not touched."""
    return {
        str(p.relative_to(d)): (os.readlink(p) if p.is_symlink() else p.read_bytes())
        for p in sorted(d.rglob("*"))
        if p.is_symlink() or p.is_file()
    }


def flip(path, n, start):
    data = bytearray(path.read_bytes())
    pos = np.random.default_rng(0).choice(np.arange(start, len(data)), size=n, replace=False)
    for p in pos:
        data[p] ^= 0xFF
    path.write_bytes(bytes(data))


# ----------------------------------------------------------------------------- damaged files
def test_search_refuses_a_damaged_index_faiss(index, capsys):
    code, out, _ = run(capsys, "search", index, "capital of Norway", "-k", "3")
    assert code == 0 and len(out.splitlines()) == 3
    path = index / "dense" / "index.faiss"
    flip(path, 1000, start=200)  # 6 x 64 float32 = 1,536 bytes of vectors after the header
    code, out, err = run(capsys, "search", index, "capital of Norway", "-k", "3")
    assert code == 2 and out == ""
    assert err == [
        f"ralm: error: {path}: contents changed since it was saved (xxh3_128 checksum mismatch: a damaged "
        f"disk or copy); check the whole index with `ralm index verify {index}`, then {REBUILD}"
    ]


def test_search_refuses_damaged_encoder_weights(index, capsys):
    weights = index / "encoder" / "query" / "model.safetensors"
    flip(weights, 10, start=weights.stat().st_size - 1000)
    code, _, err = run(capsys, "search", index, "capital of Norway", "-k", "3")
    assert code == 2 and err == [
        f"ralm: error: {weights}: contents changed (checksum mismatch); check the whole index with "
        f"`ralm index verify {index}`, then {REBUILD}"
    ]


def test_verify_an_intact_index(built, capsys):
    index = built / "index"
    manifest = json.loads((index / "retrieval.json").read_text())
    files = manifest["files"]
    weights = [f for f in files if f.endswith(".safetensors")]
    assert weights == ["encoder/query/model.safetensors"]  # one copy: doc is a symlink to query
    assert manifest["links"] == {"encoder/doc": "query"} and os.readlink(index / "encoder" / "doc") == "query"
    assert {"encoder/ralm_encoder.json", "dense/index.json", "bm25/bm25.json", "embeddings.meta.json"} <= set(
        files
    )
    assert all(set(r) == {"size", "xxh3_128"} for r in files.values())
    code, out, err = run(capsys, "index", "verify", index)
    assert code == 0 and err == []
    n = len(files) + 1 + 1 + 5  # + embeddings.npy, dense/index.faiss, the 5 BM25 files
    assert out == f"ok: {index}: {n} files match their recorded sizes and checksums\n"


def test_verify_lists_every_problem(index, capsys):
    flip(index / "dense" / "index.faiss", 100, start=200)
    flip(index / "encoder" / "query" / "model.safetensors", 10, start=100_000)
    (index / "bm25" / "vocab.index.json").unlink()
    emb = index / "embeddings.npy"
    emb.write_bytes(emb.read_bytes()[:-2])
    (index / "encoder" / "doc").unlink()
    (index / "encoder" / "doc").symlink_to("elsewhere")
    code, out, err = run(capsys, "index", "verify", index)
    assert code == 2
    assert out.splitlines() == [
        f"{index}/encoder/query/model.safetensors: contents changed (checksum mismatch)",
        f"{index}/encoder/doc: a symlink to elsewhere, expected one to query",
        f"{index}/embeddings.npy: {emb.stat().st_size} bytes, expected {emb.stat().st_size + 2}",
        f"{index}/dense/index.faiss: contents changed (checksum mismatch)",
        f"{index}/bm25/vocab.index.json: missing",
    ]
    assert err == [
        f"ralm: error: {index}: 5 problems (listed above); rebuild it with `ralm index build ... --overwrite`"
    ]


def test_verify_unfinished_missing_and_older_indexes(index, tmp_path, capsys):
    code, _, err = run(capsys, "index", "verify", tmp_path / "nowhere")
    assert code == 2 and err == [
        f"ralm: error: {tmp_path / 'nowhere'}: no such index directory; build one with `ralm index build`"
    ]
    half = tmp_path / "half"
    (half / "encoder").mkdir(parents=True)
    code, _, err = run(capsys, "index", "verify", half)
    assert code == 2 and err == [
        f"ralm: error: {half}: unfinished index build (no retrieval.json); rerun `ralm index build` "
        "with the same options to resume it"
    ]
    # built before checksums: what is recorded (sizes) is checked, the rest is said so
    m = json.loads((index / "retrieval.json").read_text())
    del m["files"], m["links"]
    (index / "retrieval.json").write_text(json.dumps(m))
    dm = json.loads((index / "dense" / "index.json").read_text())
    del dm["files"]
    (index / "dense" / "index.json").write_text(json.dumps(dm))
    code, out, _ = run(capsys, "index", "verify", index)
    assert code == 0 and out == (
        f"ok: {index}: 7 files match their recorded sizes and checksums; built by an older ralm: no "
        "checksums recorded for encoder/ and the manifests, dense/index.faiss (size checked)\n"
    )


# ----------------------------------------------------------------------------- rebuilding
def test_build_refuses_a_finished_index_without_overwrite(built, index, capsys, tiny_dir):
    before = snapshot(index)
    for extra in ([], ["--pooling", "cls", "--proj-dim", "128"], ["--bm25"]):
        argv = ["index", "build", built / "store", "--out", index, "--encoder", tiny_dir, "--quiet", *extra]
        code, _, err = run(capsys, *argv)
        assert code == 2 and err == [
            f"ralm: error: {index}: holds a finished index; pass --overwrite to replace it (the old one "
            "stays usable until the new one is complete), or choose another --out"
        ]
    assert snapshot(index) == before


def test_overwrite_builds_aside_and_swaps_in_at_the_end(built, index, capsys, tiny_dir):
    from ralm.corpus.docstore import DocStore
    from ralm.retrieval.encoders import EncoderConfig
    from ralm.retrieval.index.build import build_index_dir
    from ralm.retrieval.searchers import open_searcher

    before = snapshot(index)
    seen = []

    def log(msg):  # called while the new index is being built: the old one is still whole and usable
        if msg.startswith("index plan"):
            assert snapshot(index) == before
            _, old = open_searcher(index, "bm25", log=lambda m: None)
            seen.append(old.search_text(["capital of Norway"], 1).ids.tolist())

    build_index_dir(
        DocStore(built / "store"),
        index,
        encoder=tiny_dir,
        encoder_config=EncoderConfig(pooling="cls", proj_dim=128),
        progress=False,
        log=log,
        overwrite=True,
    )
    assert seen == [[[0]]]
    m = json.loads((index / "retrieval.json").read_text())
    assert m["dim"] == 128 and m["bm25"] is False and not (index / "bm25").exists()
    saved = json.loads((index / "encoder" / "ralm_encoder.json").read_text())["config"]
    assert saved["pooling"] == "cls" and saved["proj_dim"] == 128
    assert sorted(p.name for p in index.parent.iterdir()) == [".index.lock", "index"]  # no temp dir left
    code, out, _ = run(capsys, "search", index, "capital of Norway", "-k", "2")
    assert code == 0 and len(out.splitlines()) == 2
    code, _, _ = run(capsys, "index", "verify", index)
    assert code == 0


def test_overwrite_that_fails_leaves_the_old_index(built, index, tmp_path, capsys):
    before = snapshot(index)
    (tmp_path / "notamodel").mkdir()
    argv = [
        "index",
        "build",
        built / "store",
        "--out",
        index,
        "--encoder",
        tmp_path / "notamodel",
        "--overwrite",
    ]
    code, _, err = run(capsys, *argv)
    assert code == 2 and "notamodel" in err[0]
    assert snapshot(index) == before


def test_unfinished_build_resumes_only_with_the_same_encoder_options(built, tmp_path, capsys, tiny_dir):
    out = tmp_path / "idx"
    argv = ["index", "build", built / "store", "--out", out, "--encoder", tiny_dir, "--quiet"]
    assert run(capsys, *argv)[0] == 0
    (out / "retrieval.json").unlink()  # as if killed before the end
    emb = (out / "embeddings.npy").read_bytes()
    code, _, err = run(capsys, *argv, "--pooling", "cls", "--proj-dim", "128")
    assert code == 2 and err == [
        f"ralm: error: {out}: holds an unfinished build made with other encoder options (--pooling mean, "
        "asked cls; --proj-dim none, asked 128); rerun with its options to resume it, pass --overwrite "
        "to start over, or choose another --out"
    ]
    code, _, err = run(capsys, "index", "build", built / "store", "--out", out, "--quiet")
    assert code == 2 and err == [
        f"ralm: error: {out}: holds an unfinished build made with other encoder options (--encoder "
        f"{tiny_dir}, asked the bundled MiniLM); rerun with its options to resume it, pass --overwrite "
        "to start over, or choose another --out"
    ]
    assert not (out / "retrieval.json").exists()
    assert run(capsys, *argv)[0] == 0  # the same options: resumed, the embeddings reused
    assert (out / "embeddings.npy").read_bytes() == emb and (out / "retrieval.json").is_file()
    (out / "retrieval.json").unlink()
    assert run(capsys, *argv, "--pooling", "cls", "--proj-dim", "128", "--overwrite")[0] == 0
    assert json.loads((out / "retrieval.json").read_text())["dim"] == 128


# ----------------------------------------------------------------------------- one writer
HOLDER = "ralm index build (test holder)"


def test_a_second_writer_fails_at_once_naming_the_holder(
    built, index, tmp_path, capsys, tiny_dir, lock_holder
):
    fresh = tmp_path / "fresh"
    proc = lock_holder(fresh, HOLDER)
    code, _, err = run(capsys, "index", "build", built / "store", "--out", fresh, "--encoder", tiny_dir)
    assert code == 2 and len(err) == 1
    assert err[0].startswith(f"ralm: error: {fresh}: another ralm process is writing it (PID {proc.pid} on ")
    assert "`ralm index build (test holder)`" in err[0] and not fresh.exists()
    # --overwrite of an index someone else is writing: refused before anything is removed
    before = snapshot(index)
    proc = lock_holder(index, HOLDER)
    argv = ["index", "build", built / "store", "--out", index, "--encoder", tiny_dir, "--overwrite"]
    code, _, err = run(capsys, *argv)
    assert code == 2 and f"another ralm process is writing it (PID {proc.pid} on " in err[0]
    assert snapshot(index) == before and not (tmp_path / ".index.rebuild").exists()


# ----------------------------------------------------------------------------- refused before loading
PROBE = textwrap.dedent(
    """
    import contextlib, io, sys
    from ralm.cli import main
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            code = main(sys.argv[1:])
        except SystemExit as exc:
            code = exc.code
    print(code, "torch" in sys.modules, "transformers" in sys.modules, err.getvalue().strip().splitlines()[-1:])
    """
)


def probe(*argv):
    res = subprocess.run(
        [sys.executable, "-c", PROBE, *map(str, argv)], capture_output=True, text=True, check=True
    )
    return res.stdout.strip()


def test_search_arguments_are_refused_before_torch_is_imported(built, tmp_path):
    index = built / "index"
    assert probe("search", index, "q", "-k", "0") == "2 False False ['ralm: error: -k 0: must be >= 1']"
    nowhere = tmp_path / "nowhere"
    assert probe("search", index, "q", "--store", nowhere) == (
        f"2 False False ['ralm: error: --store {nowhere}: no such DocStore directory; pass the directory "
        "that `ralm corpus build` wrote']"
    )
    assert probe("search", tmp_path / "noindex", "q") == (
        f"2 False False ['ralm: error: {tmp_path / 'noindex'}: no such index directory; build one with "
        "`ralm index build`']"
    )
    assert probe("search", "--help") == "0 False False []"
    assert probe("index", "verify", index).startswith("0 False False")


def test_verify_accepts_a_copy_that_followed_the_doc_link(built, tmp_path, capsys):
    """`cp -rL` / copytree without symlinks=True turn encoder/doc into a real copy of query/."""
    copy = tmp_path / "copy"
    shutil.copytree(built / "index", copy)  # follows the link
    assert (copy / "encoder" / "doc").is_dir() and not (copy / "encoder" / "doc").is_symlink()
    code, out, _ = run(capsys, "index", "verify", copy)
    assert code == 0 and out.startswith("ok: ")
    weights = copy / "encoder" / "doc" / "model.safetensors"
    flip(weights, 10, 200)
    code, out, err = run(capsys, "index", "verify", copy)
    assert code == 2 and f"{weights}: contents changed (checksum mismatch)" in out


def test_a_full_disk_during_index_build_is_one_line(built, tmp_path, capsys, tiny_dir, monkeypatch):
    """safetensors reports ENOSPC inside its own error type; the CLI still gives one line."""
    from ralm.retrieval.encoders import DualEncoder

    def full(self, path):
        raise RuntimeError("Error while serializing: I/O error: No space left on device (os error 28)")

    monkeypatch.setattr(DualEncoder, "save", full)
    code, _, err = run(
        capsys, "index", "build", built / "store", "--out", tmp_path / "i", "--encoder", tiny_dir, "--quiet"
    )
    assert (
        code == 2
        and len(err) == 1
        and err[0].startswith("ralm: error: no space left on device (RuntimeError)")
    )
