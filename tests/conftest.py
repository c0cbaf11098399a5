"""Shared fixtures: offline mode, the bundled MiniLM tokenizer, a byte-level BPE tokenizer."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# autocast "auto" stays float32 on every CPU, so tolerances do not depend on whether this machine's
# bf16 happens to be faster (ralm.models.precision.cpu_bf16_is_faster; tests of that probe unset it)
os.environ.setdefault("RALM_CPU_BF16", "off")
# `make test` runs the suite in two pytest-xdist workers, one a core: each worker and every process
# it starts (ralm subprocesses, torchrun ranks) keeps to one thread, so two never fight for a core
if os.environ.get("PYTEST_XDIST_WORKER"):
    for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[_var] = "1"

import pytest  # noqa: E402


@pytest.fixture(scope="session")
def minilm_dir():
    from ralm.models.names import default_backbone_path

    return default_backbone_path()


@pytest.fixture(scope="session")
def bert_tokenizer(minilm_dir):
    from ralm.models.tokenizers import load_tokenizer

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


CAUSAL_TEXT = [
    "Oslo is the capital of Norway. It was founded in 1040 by Harald Hardrada.",
    "Bergen is a city in Norway on the west coast. It was founded in 1070 by Olav Kyrre.",
    "Copenhagen is the capital of Denmark. It lies on the island of Zealand.",
    "Stockholm is the capital of Sweden. Helsinki is the capital of Finland.",
    "Oslo er hovedstaden i Norge. København er Danmarks hovedstad og største by.",
]


@pytest.fixture(scope="session")
def causal_dirs(tmp_path_factory):
    """Tiny random causal LMs saved as HF directories, on a byte-level BPE trained on CAUSAL_TEXT with
    <pad>/<bos>/<eos>: "llama" (no BOS added) and "gemma3" (adds <bos>; final-logit soft-capping,
    a sliding-window and a full-attention layer), as {name: directory}."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import (
        Gemma3ForCausalLM,
        Gemma3TextConfig,
        LlamaConfig,
        LlamaForCausalLM,
        PreTrainedTokenizerFast,
    )

    root = tmp_path_factory.mktemp("causal")
    text = CAUSAL_TEXT * 5
    out = {}
    for name in ("llama", "gemma3"):
        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        tok.train_from_iterator(
            text,
            trainers.BpeTrainer(
                vocab_size=420,
                initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                special_tokens=["<pad>", "<bos>", "<eos>"],
            ),
        )
        if name == "gemma3":
            tok.post_processor = processors.TemplateProcessing(
                single="<bos> $A", special_tokens=[("<bos>", 1)]
            )
        fast = PreTrainedTokenizerFast(
            tokenizer_object=tok, pad_token="<pad>", bos_token="<bos>", eos_token="<eos>"
        )
        common = dict(
            vocab_size=len(fast),
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            max_position_embeddings=512,
            pad_token_id=0,
            bos_token_id=1,
            eos_token_id=2,
            tie_word_embeddings=True,
        )
        torch.manual_seed(0)
        if name == "llama":
            lm = LlamaForCausalLM(LlamaConfig(architectures=["LlamaForCausalLM"], **common))
        else:
            cfg = Gemma3TextConfig(
                architectures=["Gemma3ForCausalLM"],
                head_dim=8,
                sliding_window=16,
                final_logit_softcapping=30.0,
                layer_types=["sliding_attention", "full_attention"],
                **common,
            )
            lm = Gemma3ForCausalLM(cfg)
        d = root / name
        lm.save_pretrained(d)
        fast.save_pretrained(d)
        out[name] = d
    return out
