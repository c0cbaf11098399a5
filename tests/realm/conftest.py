"""A small linked corpus and tiny-model REALM configs shared by the REALM tests."""

from __future__ import annotations

import pytest

from testkit import unlink, write_jsonl

FACTS = [
    ("Oslo", "Oslo is the capital of [[Norway]]. It was founded in 1040 by [[Harald Hardrada]]."),
    ("Bergen", "Bergen is a city in [[Norway]] on the west coast. It was founded in 1070 by [[Olav Kyrre]]."),
    (
        "Norway",
        "Norway is a country in [[Scandinavia]]. Its capital is [[Oslo]] and its king is [[Harald V]].",
    ),
    ("Harald Hardrada", "Harald Hardrada was king of [[Norway]]. He died at [[Stamford Bridge]] in 1066."),
    ("Copenhagen", "Copenhagen is the capital of [[Denmark]]. It lies on the island of [[Zealand]]."),
    (
        "Denmark",
        "Denmark is a country in [[Scandinavia]]. Its capital is [[Copenhagen]] and its queen was [[Margrethe II]].",
    ),
    (
        "Stockholm",
        "Stockholm is the capital of [[Sweden]]. It lies where [[Lake Malaren]] meets the [[Baltic Sea]].",
    ),
    (
        "Sweden",
        "Sweden is a country in [[Scandinavia]]. Its capital is [[Stockholm]] and it borders [[Norway]].",
    ),
    ("Helsinki", "Helsinki is the capital of [[Finland]]. It was founded in 1550 by [[Gustav Vasa]]."),
    ("Finland", "Finland is a country east of [[Sweden]]. Its capital is [[Helsinki]]."),
    ("Reykjavik", "Reykjavik is the capital of [[Iceland]]. It was settled by [[Ingolfur Arnarson]] in 874."),
    ("Iceland", "Iceland is an island country in the North Atlantic. Its capital is [[Reykjavik]]."),
]


def wiki_jsonl(path):
    """The FACTS as JSONL with link spans (text without the brackets)."""
    rows = []
    for title, marked in FACTS:
        text, links = unlink(marked)
        rows.append({"title": title, "text": (text + " ") * 2, "links": links})
    return write_jsonl(path, rows)


@pytest.fixture(scope="session")
def realm_store(tmp_path_factory, tiny_dir):
    from ralm.corpus.build import BuildConfig, build_docstore

    tmp = tmp_path_factory.mktemp("realm-corpus")
    src = wiki_jsonl(tmp / "wiki.jsonl")
    build_docstore(
        [src],
        tmp / "store",
        BuildConfig(chunk_size=24, tokenizer=str(tiny_dir)),
        progress=False,
        log=lambda m: None,
    )
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
        device="cpu",
        autocast="off",
        tensorboard=False,
    )
    base.update(kw)
    return PretrainConfig(**base)


@pytest.fixture
def tiny_cfg(realm_store, tiny_dir, tmp_path):
    """A factory of `tiny_config`s writing to tmp_path/run."""

    def make(**kw):
        return tiny_config(realm_store, tiny_dir, **{"out": str(tmp_path / "run"), **kw})

    return make


@pytest.fixture
def causal_cfg(tiny_cfg, causal_dirs, tiny_dir):
    """tiny_cfg with a causal reader (default the tiny Llama) and the tiny BERT as towers."""

    def make(lm="llama", **kw):
        base = dict(reader=str(causal_dirs[lm]), retriever=str(tiny_dir), reader_max_length=200)
        base.update(kw)
        return tiny_cfg(**base)

    return make


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
