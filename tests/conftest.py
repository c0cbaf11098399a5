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
