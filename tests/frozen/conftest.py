"""Tiny frozen LMs (random Llama on a word-level vocabulary, random GPT-2 on byte-level BPE)
and a small corpus for the frozen-LM tests; reference loops and stubs live in frozen_ref.py."""

from __future__ import annotations

import pytest
import torch
from frozen_ref import ARTICLES, GRID_WORDS

from testkit import articles_store, cpu_frozen_lm, save_model, tiny_llama


def _word_tokenizer():
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words = sorted({w for t, x in ARTICLES for w in (t + " " + x).split()} | set(GRID_WORDS))
    vocab = {"[UNK]": 0, **{w: i + 1 for i, w in enumerate(words)}}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", pad_token="[UNK]")


@pytest.fixture(scope="session")
def llama_dir(tmp_path_factory):
    """A random 2-layer Llama (hidden 32) whose tokens are the whitespace-separated words."""
    tok = _word_tokenizer()
    return save_model(
        tmp_path_factory.mktemp("frozen") / "llama", tiny_llama(tok, max_position_embeddings=128), tok
    )


@pytest.fixture(scope="session")
def gpt2_dir(tmp_path_factory, bpe_tokenizer):
    """A random 2-layer GPT-2 (hidden 32, 96 positions) on the byte-level BPE of tests/conftest.py."""
    from transformers import GPT2Config, GPT2LMHeadModel

    d = tmp_path_factory.mktemp("frozen") / "gpt2"
    torch.manual_seed(0)
    cfg = GPT2Config(
        vocab_size=len(bpe_tokenizer),
        n_embd=32,
        n_layer=2,
        n_head=4,
        n_positions=96,
        bos_token_id=None,
        eos_token_id=None,
    )
    return save_model(d, GPT2LMHeadModel(cfg), bpe_tokenizer)


@pytest.fixture(scope="session")
def llama(llama_dir):
    return cpu_frozen_lm(llama_dir)


@pytest.fixture(scope="session")
def gpt2(gpt2_dir):
    from ralm.frozen.lm import load_frozen_lm

    return load_frozen_lm(gpt2_dir, device="cpu", autocast="off")


@pytest.fixture(scope="session")
def corpus(tmp_path_factory):
    """A DocStore of ARTICLES (chunks of <= 32 MiniLM tokens; the River article has several)."""
    return articles_store(ARTICLES, tmp_path_factory.mktemp("frozen-corpus"))


@pytest.fixture(scope="session")
def tiny_gguf(tmp_path_factory):
    """A tiny llama GGUF (gguf_ref.write_tiny_gguf): SmolLM2's first 400 tokens, 2 random layers."""
    from gguf_ref import write_tiny_gguf

    return write_tiny_gguf(tmp_path_factory.mktemp("gguf") / "tiny.gguf")
