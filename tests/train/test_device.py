"""ralm.train.device.resolve_device: the one place a --device value becomes a torch device."""

from __future__ import annotations

import pytest
import torch

from ralm.errors import RalmError
from ralm.train.device import resolve_device


def test_resolve_device():
    assert resolve_device("cpu") == torch.device("cpu")
    assert resolve_device("auto") == torch.device("cuda" if torch.cuda.is_available() else "cpu")
    with pytest.raises(RalmError, match=r"^device 'tpu7': use auto, cpu, cuda or cuda:N$"):
        resolve_device("tpu7")
    if not torch.cuda.is_available():
        for name in ("cuda", "cuda:1"):
            with pytest.raises(RalmError, match=rf"^device '{name}': no CUDA GPU is available here"):
                resolve_device(name)


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a CUDA GPU")
def test_frozen_lm_on_a_missing_gpu_is_one_error(causal_dirs):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from ralm.frozen.lm import FrozenLM

    d = causal_dirs["llama"]
    model, tok = AutoModelForCausalLM.from_pretrained(d), AutoTokenizer.from_pretrained(d)
    with pytest.raises(RalmError, match="no CUDA GPU is available here; use --device cpu"):
        FrozenLM(model, tok, device="cuda")
