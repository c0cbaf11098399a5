"""The single-process side of the helpers both trainers share: Dist.on_main, Dist.wrap, restore_rng.

The multi-process side runs under torchrun in test_distributed.py and tests/luke.
"""

from __future__ import annotations

import pytest
import torch

from ralm.errors import RalmError
from ralm.train.checkpoint import restore_rng
from ralm.train.distributed import Dist


def test_on_main_returns_the_value_and_passes_the_one_line_error_on():
    dist = Dist()
    calls = []
    assert dist.on_main(lambda: calls.append(1) or "ckpt/step-3") == "ckpt/step-3"
    assert calls == [1]

    def bad():
        raise RalmError("runs/x: holds another run; use --overwrite")

    with pytest.raises(RalmError) as err:
        dist.on_main(bad)
    assert str(err.value) == "runs/x: holds another run; use --overwrite"


def test_on_main_does_not_catch_other_errors():
    with pytest.raises(ZeroDivisionError):
        Dist().on_main(lambda: 1 / 0)


def test_wrap_is_the_model_itself_in_one_process():
    model = torch.nn.Linear(2, 2)
    assert Dist().wrap(model) is model
    assert Dist().wrap(model, find_unused_parameters=True) is model


def test_restore_rng_replays_the_draws_after_the_saved_state():
    torch.manual_seed(7)
    torch.rand(3)
    saved = {"torch": torch.get_rng_state()}
    want = torch.rand(5)
    torch.manual_seed(123)  # anything else in between
    torch.rand(11)
    restore_rng(saved, torch.device("cpu"), world=1)
    assert torch.equal(torch.rand(5), want)
