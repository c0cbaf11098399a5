"""A tiny GGUF causal LM for the backend, cache and conversion tests: the first 400 tokens of
SmolLM2's byte-level BPE (its 17 special tokens, the 256 bytes and the first 127 merges, copied
from its GGUF metadata) on a random 2-layer llama body (hidden 64), written with the gguf package,
so that transformers and llama.cpp load the same small file in a second or two (the whole 49,152-
token vocabulary alone takes transformers ~30 s to convert)."""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np

HIDDEN, FFN, LAYERS, HEADS, KV_HEADS, CONTEXT = 64, 128, 2, 4, 2, 512
N_VOCAB = 400  # SmolLM2's specials (17) and bytes (256), then one token per merge, in merge order


def write_tiny_gguf(path: Path, seed: int = 0) -> Path:
    """A llama GGUF at `path` with the start of SmolLM2's vocabulary and random float32 weights (std 0.2)."""
    import gguf

    w = gguf.GGUFWriter(str(path), "llama")
    w.add_name("tiny-llama")
    w.add_context_length(CONTEXT)
    w.add_embedding_length(HIDDEN)
    w.add_block_count(LAYERS)
    w.add_feed_forward_length(FFN)
    w.add_head_count(HEADS)
    w.add_head_count_kv(KV_HEADS)
    w.add_rope_dimension_count(HIDDEN // HEADS)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_file_type(int(gguf.LlamaFileType.ALL_F32))
    for name, value, vtype, sub in _tokenizer_fields():
        w.add_key_value(name, value, vtype, sub)
    n_vocab = N_VOCAB
    rng = np.random.default_rng(seed)

    def rand(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape) * 0.2).astype(np.float32)

    w.add_tensor("token_embd.weight", rand(n_vocab, HIDDEN))
    w.add_tensor("output_norm.weight", (1 + rand(HIDDEN) * 0.1).astype(np.float32))
    head = HIDDEN // HEADS
    for i in range(LAYERS):
        b = f"blk.{i}."
        w.add_tensor(b + "attn_norm.weight", (1 + rand(HIDDEN) * 0.1).astype(np.float32))
        w.add_tensor(b + "attn_q.weight", rand(HIDDEN, HIDDEN))
        w.add_tensor(b + "attn_k.weight", rand(KV_HEADS * head, HIDDEN))
        w.add_tensor(b + "attn_v.weight", rand(KV_HEADS * head, HIDDEN))
        w.add_tensor(b + "attn_output.weight", rand(HIDDEN, HIDDEN))
        w.add_tensor(b + "ffn_norm.weight", (1 + rand(HIDDEN) * 0.1).astype(np.float32))
        w.add_tensor(b + "ffn_gate.weight", rand(FFN, HIDDEN))
        w.add_tensor(b + "ffn_up.weight", rand(FFN, HIDDEN))
        w.add_tensor(b + "ffn_down.weight", rand(HIDDEN, FFN))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


@functools.lru_cache(maxsize=1)
def _tokenizer_fields() -> tuple:
    """(key, value, type, sub-type) of SmolLM2's tokenizer metadata, cut to N_VOCAB tokens (reading
    its GGUF takes seconds: once a process)."""
    import gguf

    from ralm.models.names import resolve_lm

    d, name = resolve_lm("smollm2")
    base = gguf.GGUFReader(str(d / name))
    cut = {
        "tokenizer.ggml.tokens": N_VOCAB,
        "tokenizer.ggml.token_type": N_VOCAB,
        "tokenizer.ggml.merges": N_VOCAB - 273,
    }
    out = []
    for field in base.fields.values():
        if field.name.startswith("tokenizer."):
            vtype = field.types[0]
            sub = field.types[-1] if vtype == gguf.GGUFValueType.ARRAY else None
            if field.name in cut:  # the first entries alone (contents() of the whole array is slow)
                parts = [field.parts[i] for i in field.data[: cut[field.name]]]
                strings = sub == gguf.GGUFValueType.STRING
                value = [bytes(p).decode("utf-8") if strings else int(p[0]) for p in parts]
            else:
                value = field.contents()
            out.append((field.name, value, vtype, sub))
    return tuple(out)
