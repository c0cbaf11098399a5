"""A tiny random chat LM (Llama, ChatML template, byte-level BPE) for the RAG tests."""

from __future__ import annotations

import pytest
import torch
from rag_ref import chat_tokenizer

from testkit import chat_llama


@pytest.fixture(scope="session")
def chat_lm_dir(tmp_path_factory):
    """A random 2-layer Llama (hidden 32) on `chat_tokenizer`, saved as a HF directory."""
    d = tmp_path_factory.mktemp("rag") / "chat-llama"
    tok = chat_tokenizer()
    chat_llama(tok).save_pretrained(d)
    tok.save_pretrained(d)
    return d


@pytest.fixture(scope="session")
def chat_lm(chat_lm_dir):
    from ralm.frozen.lm import load_frozen_lm

    torch.set_num_threads(1)
    return load_frozen_lm(chat_lm_dir, device="cpu", autocast="off")
