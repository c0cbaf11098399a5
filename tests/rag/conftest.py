"""A tiny random chat LM (Llama, ChatML template, byte-level BPE) for the RAG tests."""

from __future__ import annotations

import pytest
from rag_ref import chat_tokenizer

from testkit import chat_llama, cpu_frozen_lm, save_model


@pytest.fixture(scope="session")
def chat_lm_dir(tmp_path_factory):
    """A random 2-layer Llama (hidden 32) on `chat_tokenizer`, saved as a HF directory."""
    tok = chat_tokenizer()
    return save_model(tmp_path_factory.mktemp("rag") / "chat-llama", chat_llama(tok), tok)


@pytest.fixture(scope="session")
def chat_lm(chat_lm_dir):
    return cpu_frozen_lm(chat_lm_dir)
