"""The DocStore of testkit's small linked corpus (FACTS) and tiny-model REALM configs shared by the REALM
tests."""

from __future__ import annotations

import pytest

from testkit import CPU_RUN, linked_jsonl, quiet_store


@pytest.fixture(scope="session")
def realm_store(tmp_path_factory, tiny_dir):
    tmp = tmp_path_factory.mktemp("realm-corpus")
    quiet_store([linked_jsonl(tmp / "wiki.jsonl")], tmp / "store", 24, tiny_dir)
    return tmp / "store"


def tiny_config(realm_store, tiny_dir, **kw):
    """A fast PretrainConfig on the tiny model (fp32, CPU); `kw` (with `out`) overrides."""
    from ralm.realm.config import PretrainConfig

    base = dict(
        docstore=str(realm_store),
        reader=str(tiny_dir),
        steps=4,
        batch_size=3,
        k=3,
        encoder_max_length=32,
        reader_max_length=96,
        heldout=3,
        refresh_every=2,
        checkpoint_every=2,
        warmup_steps=1,
        lr_reader=1e-3,
        lr_retriever=1e-3,
        **CPU_RUN,
    )
    base.update(kw)
    return PretrainConfig(**base)


@pytest.fixture
def tiny_cfg(realm_store, tiny_dir, tmp_path):
    """A factory of `tiny_config`s writing to tmp_path/run."""

    def make(**kw):
        return tiny_config(realm_store, tiny_dir, **{"out": str(tmp_path / "run"), **kw})

    return make


def causal_config(realm_store, tiny_dir, causal_dirs, lm="llama", **kw):
    """`tiny_config` with a causal reader (causal_dirs[lm]) and the tiny BERT as towers; `kw` overrides."""
    base = dict(reader=str(causal_dirs[lm]), retriever=str(tiny_dir), reader_max_length=200)
    base.update(kw)
    return tiny_config(realm_store, tiny_dir, **base)


@pytest.fixture
def causal_cfg(realm_store, causal_dirs, tiny_dir, tmp_path):
    """A factory of `causal_config`s (default the tiny Llama) writing to tmp_path/run."""

    def make(lm="llama", **kw):
        return causal_config(realm_store, tiny_dir, causal_dirs, lm, **{"out": str(tmp_path / "run"), **kw})

    return make


# A run of one step, checkpointed at it, whose index is never refreshed
ONE_STEP = dict(steps=1, refresh_every=0, checkpoint_every=1)

FROZEN = dict(
    reader_train="freeze", retriever_train="query", score_scale="learned", steps=1, checkpoint_every=1
)


@pytest.fixture(scope="module")
def frozen(tmp_path_factory, realm_store, tiny_dir, causal_dirs):
    """A frozen-reader, query-side REALM run (tiny Llama reader, tiny BERT towers) and the diagnosis
    records of 6 of its training chunks (4 chunks a record + the null document)."""
    import torch

    from ralm.realm.inference.diagnose import diagnose
    from ralm.realm.training.run import load_run
    from ralm.realm.training.trainer import pretrain

    n = torch.get_num_threads()
    torch.set_num_threads(1)
    cfg = tiny_config(
        realm_store,
        tiny_dir,
        out=str(tmp_path_factory.mktemp("cached") / "run"),
        reader=str(causal_dirs["llama"]),
        retriever=str(tiny_dir),
        reader_max_length=200,
        refresh_every=0,
        warmup_steps=0,
        lr_scale=1e-2,
        **FROZEN,
    )
    run_dir = pretrain(cfg, progress=False)
    run = load_run(run_dir)
    records = diagnose(run, None, depth=8, reader_depth=4, ids=run.train_ids[:6]).records
    torch.set_num_threads(n)
    return run_dir, records
