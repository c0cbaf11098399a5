"""Shared fixtures: offline mode, the bundled MiniLM tokenizer, a byte-level BPE tokenizer."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import pytest  # noqa: E402


@pytest.fixture(scope="session")
def minilm_dir():
    from ralm.backbones import default_backbone_path

    return default_backbone_path()


@pytest.fixture(scope="session")
def bert_tokenizer(minilm_dir):
    from ralm.backbones import load_tokenizer

    return load_tokenizer(minilm_dir)


@pytest.fixture(scope="session")
def bpe_tokenizer():
    """A small byte-level BPE (GPT-2 style, no special tokens added to a sequence), trained here."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    text = [
        "Abraham Lincoln was the 16th president of the United States.",
        "Oslo er hovedstaden i Norge. Det bor mange mennesker der.",
        "København er Danmarks hovedstad og største by.",
    ] * 20
    tok.train_from_iterator(
        text, trainers.BpeTrainer(vocab_size=400, initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    )
    return PreTrainedTokenizerFast(tokenizer_object=tok)


TOKENIZER_FILES = ("vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory, minilm_dir):
    """A random 2-layer BERT (hidden 64) on the MiniLM vocabulary, as a HF model directory."""
    import shutil

    import torch
    from transformers import BertConfig, BertModel

    d = tmp_path_factory.mktemp("tiny") / "bert"
    torch.manual_seed(0)
    cfg = BertConfig(
        vocab_size=30522,
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=128,
        max_position_embeddings=128,
    )
    BertModel(cfg, add_pooling_layer=False).save_pretrained(d)
    for f in TOKENIZER_FILES:
        shutil.copy(minilm_dir / f, d / f)
    return d


@pytest.fixture(scope="module")
def one_thread():
    """Tiny models: one torch thread is faster, and much faster when another process holds a core."""
    import torch

    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)
