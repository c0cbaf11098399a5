"""Long phases show progress: corpus embedding for every index version, the final refresh; the
step bar is complete before the final re-embedding; --quiet/progress=False shows nothing."""

from __future__ import annotations

import re

import pytest

pytestmark = pytest.mark.usefixtures("one_thread")


def test_embed_chunks_progress(tiny_cfg, realm_store, capsys):
    from ralm.corpus.docstore import DocStore
    from ralm.realm.refresh.sync import embed_chunks
    from ralm.realm.training.build import build_model

    model, _ = build_model(tiny_cfg(), DocStore(realm_store))
    n = len(model.docs)
    capsys.readouterr()
    embed_chunks(model.encoder, model.docs, autocast="off", progress=True, desc="index v7")
    err = capsys.readouterr().err
    assert f"index v7:   0%|          | 0/{n} [00:00<?, ?chunk/s]" in err
    embed_chunks(model.encoder, model.docs, autocast="off")
    assert capsys.readouterr().err == ""  # off by default


def test_pretrain_shows_every_embedding_and_a_complete_step_bar_first(tiny_cfg, capsys):
    from ralm.corpus.docstore import DocStore
    from ralm.realm.training.trainer import pretrain
    from ralm.retrieval.index.plan import estimate

    cfg = tiny_cfg(steps=4, refresh_every=2, checkpoint_every=0)
    pretrain(cfg, progress=True)
    out, err = capsys.readouterr()
    n = len(DocStore(cfg.docstore))
    mem = estimate("flat", n, 64)["memory"]
    assert out.splitlines()[0] == f"index: flat index of {n:,} x 64: about {mem} in memory"
    assert "build time" not in out
    assert re.search(
        r"index v0 built in \d+\.\d s; each re-embedding \(every 2 steps\) takes about as long", out
    )
    for v in (0, 1, 2):
        assert f"index v{v}: embedding" in err, v
    assert err.index("4/4") < err.rindex("index v2: embedding")  # the bar says 4/4 while re-embedding
    pretrain(tiny_cfg(steps=2, refresh_every=1, out=cfg.out + "-q"), progress=False)
    out, err = capsys.readouterr()
    assert err == "" and "built in" not in out
