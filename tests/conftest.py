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

from testkit import TINY_DECODER, byte_bpe, chat_config, chat_llama, one_thread_of, save_model, tiny_bert_dir  # noqa: E402


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
    from transformers import PreTrainedTokenizerFast

    text = [
        "Abraham Lincoln was the 16th president of the United States.",
        "Oslo er hovedstaden i Norge. Det bor mange mennesker der.",
        "København er Danmarks hovedstad og største by.",
    ] * 20
    return PreTrainedTokenizerFast(tokenizer_object=byte_bpe(text, 400))


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory, minilm_dir):
    """A random 2-layer BERT (hidden 64) on the MiniLM vocabulary, as a HF model directory."""
    return tiny_bert_dir(tmp_path_factory.mktemp("tiny") / "bert", minilm_dir)


@pytest.fixture(scope="module")
def one_thread():
    """Tiny models: one torch thread is faster, and much faster when another process holds a core."""
    import torch

    with one_thread_of(torch.get_num_threads, torch.set_num_threads):
        yield


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
    from tokenizers import processors
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig, PreTrainedTokenizerFast

    root = tmp_path_factory.mktemp("causal")
    text = CAUSAL_TEXT * 5
    out = {}
    for name in ("llama", "gemma3"):
        tok = byte_bpe(text, 420, ["<pad>", "<bos>", "<eos>"])
        if name == "gemma3":
            tok.post_processor = processors.TemplateProcessing(
                single="<bos> $A", special_tokens=[("<bos>", 1)]
            )
        fast = PreTrainedTokenizerFast(
            tokenizer_object=tok, pad_token="<pad>", bos_token="<bos>", eos_token="<eos>"
        )
        if name == "llama":
            lm = chat_llama(fast)
        else:
            torch.manual_seed(0)
            cfg = Gemma3TextConfig(
                architectures=["Gemma3ForCausalLM"],
                head_dim=8,
                sliding_window=16,
                final_logit_softcapping=30.0,
                layer_types=["sliding_attention", "full_attention"],
                vocab_size=len(fast),
                **TINY_DECODER,
                **chat_config(fast),
            )
            lm = Gemma3ForCausalLM(cfg)
        out[name] = save_model(root / name, lm, fast)
    return out


HOLD = """
import sys, time
from ralm.locks import writer_lock
with writer_lock(sys.argv[1], sys.argv[2]):
    print("locked", flush=True)
    time.sleep(120)
"""


@pytest.fixture
def lock_holder():
    """A factory of processes that hold the writer lock of a directory: `start(directory, command)`
    returns the Popen once it holds the lock (`command`: what the lock says is writing); each is
    killed at the end of the test."""
    import subprocess
    import sys

    procs = []

    def start(directory, command):
        p = subprocess.Popen(
            [sys.executable, "-c", HOLD, str(directory), command], stdout=subprocess.PIPE, text=True
        )
        procs.append(p)
        assert p.stdout.readline().strip() == "locked"
        return p

    yield start
    for p in procs:
        p.kill()
        p.wait()
