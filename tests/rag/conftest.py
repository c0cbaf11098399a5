"""A tiny random chat LM (Llama, ChatML template, byte-level BPE) for the RAG tests."""

from __future__ import annotations

import pytest
import torch
from rag_ref import chat_tokenizer


@pytest.fixture(scope="session")
def chat_lm_dir(tmp_path_factory):
    """A random 2-layer Llama (hidden 32) on `chat_tokenizer`, saved as a HF directory."""
    from transformers import LlamaConfig, LlamaForCausalLM

    d = tmp_path_factory.mktemp("rag") / "chat-llama"
    tok = chat_tokenizer()
    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=len(tok),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        architectures=["LlamaForCausalLM"],
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
        bos_token_id=tok.bos_token_id,
        tie_word_embeddings=True,
    )
    LlamaForCausalLM(cfg).save_pretrained(d)
    tok.save_pretrained(d)
    return d


@pytest.fixture(scope="session")
def chat_lm(chat_lm_dir):
    from ralm.frozen.lm import load_frozen_lm

    torch.set_num_threads(1)
    return load_frozen_lm(chat_lm_dir, device="cpu", autocast="off")
