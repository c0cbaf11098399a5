"""`retriever_init`: a run's retriever started from another run's towers and score prior."""

from __future__ import annotations

import re

import pytest
import torch
from safetensors.torch import load_file

from ralm.errors import RalmError
from ralm.realm.config import PretrainConfig
from ralm.realm.training.build import build_model
from ralm.train.checkpoint import intact_checkpoint

# the frozen run's settings (tests/realm/conftest.py), without its step count
SETTINGS = dict(reader_train="freeze", retriever_train="query", score_scale="learned")


def _build(cfg: PretrainConfig):
    from ralm.corpus.docstore import DocStore

    torch.manual_seed(cfg.seed)
    return build_model(cfg, DocStore(cfg.docstore))[0]


def _source(frozen) -> dict[str, torch.Tensor]:
    return load_file(str(intact_checkpoint(frozen[0]) / "model.safetensors"))


def test_towers_and_scale_come_from_the_run_and_the_reader_does_not(frozen, causal_cfg):
    src = _source(frozen)
    fresh = _build(causal_cfg(**SETTINGS)).state_dict()
    warm = _build(causal_cfg(retriever_init=str(frozen[0]), **SETTINGS)).state_dict()
    towers = [k for k in warm if k.startswith("encoder.")]
    assert towers and all(torch.equal(warm[k], src[k]) for k in towers)
    # the source run's one step moved its query tower and its scale: the copy is not the fresh build
    assert any(not torch.equal(fresh[k], src[k]) for k in towers if k.startswith("encoder.query_tower"))
    assert float(src["prior.log_scale"]) != 0.0
    assert torch.equal(warm["prior.log_scale"], src["prior.log_scale"])
    reader = [k for k in warm if k.startswith("reader.")]
    assert reader and all(torch.equal(warm[k], fresh[k]) for k in reader)


def test_a_prior_parameter_the_run_lacks_keeps_its_start(frozen, causal_cfg):
    warm = _build(
        causal_cfg(retriever_init=str(frozen[0]), null_doc="logit", null_logit_init=-2.0, **SETTINGS)
    )
    assert "prior.null_logit" not in _source(frozen)
    assert float(warm.state_dict()["prior.null_logit"]) == -2.0


def test_other_towers_and_non_runs_are_refused(frozen, causal_cfg, tmp_path):
    want = "model.safetensors: has no encoder.query_tower.proj.weight; give retriever_init a run trained with"
    with pytest.raises(RalmError, match=re.escape(want)):
        _build(causal_cfg(retriever_init=str(frozen[0]), proj_dim=8))
    with pytest.raises(RalmError, match="not a `ralm pretrain` run with a finished checkpoint"):
        _build(causal_cfg(retriever_init=str(tmp_path)))
