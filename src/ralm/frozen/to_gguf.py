"""A trained causal LM as a GGUF file for llama.cpp (`ralm convert-gguf MODEL_DIR`).

A model a user trains in ralm (a RAG generator from `ralm rag train`, LoRA merged; a causal REALM
reader from `ralm export-reader`) starts from a GGUF checkpoint (SmolLM2, Gemma-3) and keeps its
tokenizer and architecture: only the weights change. So its GGUF is the base GGUF with the new
weights: every metadata key (architecture settings, tokenizer vocabulary, merges, special
tokens) is copied from the base, and every tensor is replaced by the trained one, mapped to the
GGUF name (gguf's `TensorNameMap`) and put into llama.cpp's layout:

* "llama" (SmolLM2, Llama): the query and key projections are stored with each head's rotary
  halves interleaved (`_interleave_heads`, the inverse of what transformers does on load);
* "gemma3": RMSNorm weights are stored as 1 + w (transformers keeps w and adds the 1 at run time).

Both rules were checked against the installed GGUFs: de-quantising SmolLM2's and Gemma-3's tensors
and applying them to the weights transformers loads gives the same numbers, bit for bit. Other
architectures are refused in one line.

2-D weights are written as Q8_0 (default: 8-bit blocks, llama.cpp's near-lossless type), F16 or
F32; norms stay F32. The file is `MODEL_DIR/ralm-model.gguf`, written beside its place and renamed,
with `ralm-model.gguf.json` recording the XXH3-128 digests of the weights and config it was made
from; `converted(MODEL_DIR)` returns it only while those still match, so a retrained model is
never answered with its old GGUF.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from ralm.atomic import atomic_path, write_json_atomic
from ralm.errors import RalmError
from ralm.integrity import digest

__all__ = ["GGUF_NAME", "QTYPES", "SUPPORTED", "convert", "converted", "fingerprint"]

GGUF_NAME = "ralm-model.gguf"
RECORD = GGUF_NAME + ".json"
SUPPORTED = ("llama", "gemma3")
QTYPES = ("q8_0", "f16", "f32")
GEMMA_NORMS = ("norm.weight",)  # every gemma3 tensor whose name ends so is a RMSNorm weight


def fingerprint(model_dir: Path) -> dict[str, str]:
    """{file: XXH3-128} of the files a conversion reads: config.json and the safetensors weights."""
    names = ["config.json", *sorted(p.name for p in model_dir.glob("*.safetensors"))]
    return {n: digest(model_dir / n) for n in names if (model_dir / n).is_file()}


def converted(model_dir: str | Path) -> Path | None:
    """MODEL_DIR's GGUF when it exists and was made from the weights the folder holds now, else None."""
    d = Path(model_dir)
    gguf, rec = d / GGUF_NAME, d / RECORD
    if not gguf.is_file() or not rec.is_file():
        return None
    try:
        recorded = json.loads(rec.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return None
    if recorded.get("source") != fingerprint(d) or recorded.get("size") != gguf.stat().st_size:
        return None
    return gguf


def _interleave_heads(w: np.ndarray, n_head: int) -> np.ndarray:
    """(n_head * head_dim, in) in transformers' rotate-half order -> llama.cpp's interleaved order."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def _base_gguf(model_dir: Path, base: str | None) -> Path:
    from ralm.models.names import resolve_lm

    if base is None:
        cfg = json.loads((model_dir / "config.json").read_text(encoding="utf-8"))
        kind, vocab = cfg.get("model_type"), cfg.get("vocab_size")
        base = {"gemma3_text": "gemma3", "gemma3": "gemma3"}.get(kind) or (
            "smollm2" if kind == "llama" and vocab == 49152 else None
        )
        if base is None:
            raise RalmError(
                f"{model_dir}: cannot tell which GGUF it was trained from; pass --base (gemma3, smollm2 or a .gguf file)"
            )
    d, name = resolve_lm(base)
    if name is None:
        raise RalmError(f"--base {base}: not a GGUF model; pass gemma3, smollm2 or a .gguf file")
    return d / name


def _field_value(field) -> tuple[Any, Any, Any]:
    """(value, type, sub-type) of a GGUFReader field, as GGUFWriter.add_key_value takes them."""
    from gguf import GGUFValueType

    vtype = field.types[0]
    sub = field.types[-1] if vtype == GGUFValueType.ARRAY else None
    return field.contents(), vtype, sub


def _check_shapes(arch: str, reader, cfg) -> None:
    got = {
        "block_count": int(cfg.num_hidden_layers),
        "embedding_length": int(cfg.hidden_size),
        "feed_forward_length": int(cfg.intermediate_size),
    }
    for key, value in got.items():
        field = reader.fields.get(f"{arch}.{key}")
        if field is not None and int(field.contents()) != value:
            raise RalmError(
                f"the model's {key} is {value}, its base GGUF's {int(field.contents())}: not the same architecture; pass the right --base"
            )


def convert(model_dir: str | Path, *, base: str | None = None, qtype: str = "q8_0", log=None) -> Path:
    """Write MODEL_DIR/ralm-model.gguf from the Hugging Face causal LM in MODEL_DIR and the GGUF it
    was trained from (`base`: gemma3, smollm2, a .gguf file; None: told by the config); returns
    the path. RalmError with one line for an architecture, shape or vocabulary that does not fit."""
    import gguf
    import torch

    from ralm.models.causal import load_causal_lm

    d = Path(model_dir)
    if qtype not in QTYPES:
        raise RalmError(f"--type {qtype}: choose one of {', '.join(QTYPES)}")
    if not (d / "config.json").is_file():
        raise RalmError(f"{d}: not a Hugging Face model directory (no config.json)")
    src = _base_gguf(d, base)
    reader = gguf.GGUFReader(str(src))
    arch = str(reader.fields["general.architecture"].contents())
    if arch not in SUPPORTED:
        raise RalmError(f"{src}: a {arch} GGUF; ralm convert-gguf writes {', '.join(SUPPORTED)} models")
    source = fingerprint(d)
    model, tok, _ = load_causal_lm(d)
    cfg = model.config
    _check_shapes(arch, reader, cfg)
    n_vocab = len(reader.fields["tokenizer.ggml.tokens"].data)
    if len(tok) != n_vocab:
        raise RalmError(
            f"{d}: its tokenizer has {len(tok)} tokens, {src.name} {n_vocab}: another vocabulary; pass the right --base"
        )
    sd = {k: v.detach().to(torch.float32).numpy() for k, v in model.state_dict().items()}
    arch_id = {v: k for k, v in gguf.MODEL_ARCH_NAMES.items()}[arch]
    names = gguf.get_tensor_name_map(arch_id, int(cfg.num_hidden_layers))
    by_gguf: dict[str, str] = {}
    for key in sd:
        g = names.get_name(key, try_suffixes=(".weight", ".bias"))
        if g is not None:
            by_gguf.setdefault(g, key)  # the GGUF name, suffix included
    want = {
        "q8_0": gguf.GGMLQuantizationType.Q8_0,
        "f16": gguf.GGMLQuantizationType.F16,
        "f32": gguf.GGMLQuantizationType.F32,
    }[qtype]
    file_type = {
        "q8_0": gguf.LlamaFileType.MOSTLY_Q8_0,
        "f16": gguf.LlamaFileType.MOSTLY_F16,
        "f32": gguf.LlamaFileType.ALL_F32,
    }[qtype]
    out = d / GGUF_NAME
    with atomic_path(out) as tmp:
        w = gguf.GGUFWriter(str(tmp), arch)
        for field in reader.fields.values():
            if field.name.startswith("GGUF.") or field.name in ("general.architecture", "general.file_type"):
                continue
            value, vtype, sub = _field_value(field)
            w.add_key_value(field.name, value, vtype, sub)
        w.add_file_type(int(file_type))
        w.add_string("ralm.source_xxh3_128", json.dumps(source, sort_keys=True))
        for t in reader.tensors:
            key = by_gguf.get(t.name)
            if key is None and t.name == "token_embd.weight":
                key = "lm_head.weight" if "lm_head.weight" in sd else None
            if key is None:
                raise RalmError(
                    f"{d}: no weight for the GGUF tensor {t.name}; not a {arch} model like {src.name}"
                )
            a = sd[key]
            if arch == "llama" and t.name.endswith("attn_q.weight"):
                a = _interleave_heads(a, int(cfg.num_attention_heads))
            elif arch == "llama" and t.name.endswith("attn_k.weight"):
                a = _interleave_heads(a, int(cfg.num_key_value_heads))
            elif arch == "gemma3" and t.name.endswith(GEMMA_NORMS):
                a = a + 1.0
            expected = tuple(int(x) for x in reversed(t.shape))
            if a.shape != expected:
                raise RalmError(
                    f"{d}: {key} has shape {a.shape}, the GGUF's {t.name} {expected}; pass the right --base"
                )
            a = np.ascontiguousarray(a, dtype=np.float32)
            if a.ndim == 1 or want == gguf.GGMLQuantizationType.F32:
                w.add_tensor(t.name, a)
            elif want == gguf.GGMLQuantizationType.F16:
                w.add_tensor(t.name, a.astype(np.float16))
            else:
                w.add_tensor(t.name, gguf.quants.quantize(a, want), raw_dtype=want)
            if log is not None:
                log(f"{t.name}: {key} {list(a.shape)}")
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
    write_json_atomic(
        d / RECORD, {"source": source, "base": str(src), "type": qtype, "size": out.stat().st_size}
    )
    return out
