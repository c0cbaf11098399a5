"""Dual encoders for dense retrieval: a query tower and a document tower, scored by inner product.

REALM (Guu et al., 2020): BERT-style towers, the [CLS] vector projected to d=128, score q.d.
BRENT (sec. 3.1): separate query and document encoders, score q.d / sqrt(h).
Both join a document as `[CLS] title [SEP] body [SEP]`; the title is optional here.

    enc = DualEncoder.from_pretrained(None, EncoderConfig(pooling="cls", proj_dim=128))
    q = enc.encode_queries(["who wrote the iliad"])            # (1, 128) float32
    d = enc.encode_docs(["Iliad"], ["The Iliad is an epic ..."])
    enc.score(torch.from_numpy(q), torch.from_numpy(d))        # (1, 1)
    enc.save("retriever/")   # retriever/query and retriever/doc load in AutoModel / SentenceTransformer

A saved encoder directory holds `ralm_encoder.json` (the EncoderConfig and fingerprints) and
one full Hugging Face model directory per tower (config.json, model.safetensors, tokenizer
files, sentence-transformers modules; a projection as projection.safetensors and 2_Dense).
When the towers are one (`shared`) or still identical (a fresh encoder from a plain model),
only query/ is written: doc is a relative symlink `doc -> query` (no doc at all where the
filesystem has no symlinks) and the json says `"doc": "query"`; loading then builds the doc
tower from query/ as its own module (one module when shared), so training can separate them.
`fingerprint()` hashes the tensors themselves (names, dtypes, shapes, bytes) plus the config
fields that change the vectors, so an in-memory encoder and its saved copy agree and an
index can tell which doc tower made it. Left out: hub model ids (no downloads), TF/Flax
weights, tokenizers without a fast (tokenizers-library) backend.
"""

from __future__ import annotations

import contextlib
import hashlib
import inspect
import json
import os
import shutil
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from ralm.backbones import load_tokenizer, resolve_model_dir
from ralm.errors import RalmError

ENCODER_FILE = "ralm_encoder.json"
TOWER_DIRS = ("query", "doc")  # values of the json's "doc" field: where the doc tower is stored
FORMAT = "ralm-dual-encoder"
FORMAT_VERSION = 1
PROJECTION_FILE = "projection.safetensors"
TOKENIZER_FILES = ("tokenizer.json", "vocab.txt", "vocab.json", "tokenizer.model", "spiece.model")


@dataclass
class EncoderConfig:
    """How the towers turn token vectors into one vector and how query/doc vectors are scored."""

    pooling: str = "mean"  # "mean" (the bundled MiniLM was trained with it) | "cls" (REALM, BRENT)
    proj_dim: int | None = None  # linear h -> proj_dim without bias; REALM: 128; None = no projection
    scale_by_sqrt_dim: bool = False  # BRENT: score = q.d / sqrt(d), d = output dim; REALM: plain q.d
    shared: bool = False  # one tower for queries and docs; REALM/BRENT keep them separate
    max_length: int = 128  # max tokens of a query or a doc incl. special tokens (BRENT chunks: 128)
    normalize: bool = False  # L2-normalise outputs (score = cosine); REALM/BRENT do not
    # multiplies q.d (after the optional 1/sqrt(d)): a contrastively trained encoder stores 1/temperature
    # here, so p(z|x) = softmax(score) in REALM and open-QA fine-tuning is as sharp as in training
    score_scale: float = 1.0

    def __post_init__(self) -> None:
        if self.pooling not in ("mean", "cls"):
            raise RalmError(f"pooling {self.pooling!r}: choose 'mean' or 'cls'")
        if self.proj_dim is not None and self.proj_dim < 1:
            raise RalmError(f"proj_dim {self.proj_dim}: must be a positive integer or None")
        if not self.score_scale > 0:
            raise RalmError(f"score_scale {self.score_scale}: must be > 0")
        if self.max_length < 4:
            raise RalmError(f"max_length {self.max_length}: too small; use at least 4 tokens")

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> EncoderConfig:
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})


# ----------------------------------------------------------------------------- precision helpers
def cpu_has_native_bf16() -> bool:
    """True when the CPU has bf16 matrix instructions (AVX512_BF16 or AMX-BF16).

    `torch.backends.cpu.get_cpu_capability()` only says "AVX512" (Skylake has that too, and
    emulates bf16 slowly), so this reads the Linux /proc/cpuinfo flags; elsewhere it is False.
    """
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("flags"):
                    flags = set(line.split(":", 1)[1].split())
                    return bool(flags & {"avx512_bf16", "amx_bf16"})
    except OSError:
        pass
    return False


_BF16_FASTER: bool | None = None


def cpu_bf16_is_faster() -> bool:
    """Whether bf16 matrix products run faster than float32 on this CPU, timed once per process.

    The flags are not enough: with AVX512_BF16 a Zen 5 multiplies in bf16 ~3.9x faster than in
    fp32, while a Xeon with the same flag measured 0.5x here (torch 2.13, 2 threads). So "auto"
    times a 512 x 512 product in both dtypes (well under a second, best of 3) on CPUs with the flag,
    and takes bf16 only when it is at least 1.2x faster.
    """
    global _BF16_FASTER
    if _BF16_FASTER is None:
        _BF16_FASTER = cpu_has_native_bf16() and _matmul_speedup(torch.bfloat16) >= 1.2
    return _BF16_FASTER


def _matmul_speedup(dtype: torch.dtype, n: int = 512, reps: int = 4) -> float:
    import time

    a32, b32 = torch.randn(n, n), torch.randn(n, n)
    a, b = a32.to(dtype), b32.to(dtype)

    def best(x, y) -> float:
        times = []
        for _ in range(3):
            t0 = time.perf_counter()
            for _ in range(reps):
                x @ y
            times.append(time.perf_counter() - t0)
        return min(times)

    best(a, b)  # warm-up (kernel selection)
    return best(a32, b32) / max(best(a, b), 1e-9)


def autocast_dtype(
    device: torch.device, autocast: str | bool | None, param_dtype: torch.dtype
) -> torch.dtype | None:
    """The autocast dtype to run under: "auto" -> bf16 on CUDA with bf16 / CPUs where bf16 products
    are faster than fp32 (`cpu_bf16_is_faster`).

    autocast: "auto" | "bf16" ("bfloat16", True) | "off" ("none", None, False). A model whose
    weights are already half precision runs as it is (None).
    """
    a = (
        {None: "off", False: "off", True: "bf16"}[autocast]
        if autocast in (None, False, True)
        else str(autocast)
    )
    a = a.lower()
    if a in ("off", "none", "false", "fp32", "float32"):
        return None
    if a not in ("auto", "bf16", "bfloat16"):
        raise RalmError(f"autocast {autocast!r}: choose auto, bf16 or off")
    if param_dtype != torch.float32:
        return None
    if a == "auto":
        if device.type == "cuda":
            return torch.bfloat16 if torch.cuda.is_bf16_supported() else None
        return torch.bfloat16 if device.type == "cpu" and cpu_bf16_is_faster() else None
    return torch.bfloat16


def autocast_context(device: torch.device, dtype: torch.dtype | None):
    """torch.autocast for `device` at `dtype`, or a no-op context when dtype is None."""
    if dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=dtype)


@contextlib.contextmanager
def eval_on(module: nn.Module, device: torch.device | None):
    """Run `module` in eval mode (on `device` if given); restore each submodule's mode and the device."""
    modes = [(m, m.training) for m in module.modules()]
    old = next(module.parameters()).device
    module.eval()
    if device is not None and device != old:
        module.to(device)
    try:
        yield
    finally:
        if device is not None and device != old:
            module.to(old)
        for m, training in modes:
            m.training = training


def resolve_device(device: str | torch.device | None, module: nn.Module) -> torch.device:
    """`"auto"` or None: the device `module`'s parameters are on; else `torch.device(device)`."""
    if device is None or str(device) == "auto":
        return next(module.parameters()).device
    return torch.device(device)


# ----------------------------------------------------------------------------- input templates
class InputTemplate:
    """How a tokenizer wraps one or two token-id sequences, read off its post-processor.

    BERT: single `[CLS] A [SEP]` (types 0 0 0), pair `[CLS] A [SEP] B [SEP]` (types 0 0 0 1 1).
    Items are ("tok", id, type) for special tokens and ("A"/"B", None, type) for the sequences.
    """

    def __init__(self, tokenizer) -> None:
        from tokenizers import Tokenizer

        backend = Tokenizer.from_str(tokenizer.backend_tokenizer.to_str())
        backend.no_truncation()
        backend.no_padding()
        self.single = self._read(backend.encode("a"))
        self.pair = self._read(backend.encode("a", "b"))
        self.n_single = sum(k == "tok" for k, _, _ in self.single)
        self.n_pair = sum(k == "tok" for k, _, _ in self.pair)
        pad = tokenizer.pad_token_id
        self.pad_id = int(pad) if pad is not None else 0

    @staticmethod
    def _read(enc) -> list[tuple[str, int | None, int]]:
        items: list[tuple[str, int | None, int]] = []
        for tok, seq, typ in zip(enc.ids, enc.sequence_ids, enc.type_ids, strict=True):
            if seq is None:
                items.append(("tok", tok, typ))
            elif not items or items[-1][0] != "AB"[seq]:
                items.append(("AB"[seq], None, typ))
        return items

    def fit(self, n_title: np.ndarray | int, n_text: np.ndarray | int, max_length: int):
        """Token counts kept of (title, text): the text is cut first, the title keeps >= half the room.

        Works elementwise on arrays. A zero-length title means the single-sequence form.
        Example (BERT, max_length 10: room 7 with a title): fit(3, 9, 10) -> (3, 4).
        """
        n_title, n_text = np.asarray(n_title), np.asarray(n_text)
        room = np.where(n_title > 0, max_length - self.n_pair, max_length - self.n_single)
        t = np.minimum(n_title, np.maximum(room - n_text, room // 2))
        return t, np.minimum(n_text, room - t)

    def length(self, n_title, n_text, max_length: int) -> np.ndarray:
        """Total input length incl. special tokens after `fit`."""
        t, x = self.fit(n_title, n_text, max_length)
        return t + x + np.where(t > 0, self.n_pair, self.n_single)

    def build(self, title: np.ndarray | None, text: np.ndarray, max_length: int) -> tuple[list, list]:
        """(ids, type ids) of one doc: `[CLS] title [SEP] text [SEP]`, or `[CLS] text [SEP]` untitled."""
        n_title = 0 if title is None else len(title)
        t, x = self.fit(n_title, len(text), max_length)
        parts = {"A": title[: int(t)], "B": text[: int(x)]} if t > 0 else {"A": text[: int(x)]}
        ids: list = []
        types: list = []
        for kind, tok, typ in self.pair if t > 0 else self.single:
            seq = [tok] if kind == "tok" else parts[kind]
            ids.extend(seq)
            types.extend([typ] * len(seq))
        return ids, types

    def collate(self, rows: list[tuple[list, list]], with_types: bool) -> dict[str, torch.Tensor]:
        """Right-padded (B, T) int64 tensors from `build` outputs."""
        width = max(len(ids) for ids, _ in rows)
        ids = np.full((len(rows), width), self.pad_id, dtype=np.int64)
        mask = np.zeros((len(rows), width), dtype=np.int64)
        types = np.zeros((len(rows), width), dtype=np.int64)
        for r, (row_ids, row_types) in enumerate(rows):
            ids[r, : len(row_ids)] = row_ids
            mask[r, : len(row_ids)] = 1
            types[r, : len(row_types)] = row_types
        out = {"input_ids": torch.from_numpy(ids), "attention_mask": torch.from_numpy(mask)}
        if with_types:
            out["token_type_ids"] = torch.from_numpy(types)
        return out


# ----------------------------------------------------------------------------- towers
@contextlib.contextmanager
def quiet_transformers():
    """Silence transformers' warnings and its load/save progress bars inside the block."""
    from transformers.utils import logging as hf_logging

    verbosity, bars = hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled()
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        hf_logging.set_verbosity(verbosity)
        if bars:
            hf_logging.enable_progress_bar()


def _check_model_dir(path) -> Path:
    d = resolve_model_dir(path)
    if not (d / "config.json").is_file():
        raise RalmError(
            f"{d}: not a Hugging Face model directory (no config.json); pass a directory written by "
            "save_pretrained or by DualEncoder.save"
        )
    return d


def load_backbone(path) -> nn.Module:
    """AutoModel from a local directory in float32, without BERT's pooler (unused; DDP needs grads)."""
    from transformers import AutoModel

    d = _check_model_dir(path)
    with quiet_transformers():
        try:
            try:
                model = AutoModel.from_pretrained(
                    str(d), local_files_only=True, dtype=torch.float32, add_pooling_layer=False
                )
            except TypeError:  # the architecture has no pooler argument
                model = AutoModel.from_pretrained(str(d), local_files_only=True, dtype=torch.float32)
        except (OSError, ValueError, KeyError) as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise RalmError(
                f"{d}: could not load a model ({first}); pass a Hugging Face model directory with weights"
            ) from None
    return model


class Tower(nn.Module):
    """One encoder: HF backbone -> pooling ("cls" | "mean") -> optional projection -> optional L2 norm."""

    def __init__(self, model: nn.Module, tokenizer, config: EncoderConfig) -> None:
        super().__init__()
        self.model = model
        self.tokenizer = tokenizer
        self.pooling = config.pooling
        self.normalize = config.normalize
        self.max_length = config.max_length
        self.hidden_size = int(model.config.hidden_size)
        self.proj = nn.Linear(self.hidden_size, config.proj_dim, bias=False) if config.proj_dim else None
        self.uses_token_types = "token_type_ids" in inspect.signature(model.forward).parameters
        self.template = InputTemplate(tokenizer)

    @property
    def dim(self) -> int:
        return self.proj.out_features if self.proj is not None else self.hidden_size

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        token_type_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """(B, T) ids and mask -> (B, dim) vectors (float32 unless the weights are half precision).

        position_ids: optional (B, T) positions (e.g. a suffix embedded at its absolute positions
        in the sentence, as SUREALM does); None = 0..T-1.
        """
        kw = (
            {"token_type_ids": token_type_ids}
            if (token_type_ids is not None and self.uses_token_types)
            else {}
        )
        if position_ids is not None:
            kw["position_ids"] = position_ids
        h = self.model(
            input_ids=input_ids, attention_mask=attention_mask, **kw
        ).last_hidden_state  # (B, T, H)
        if self.pooling == "cls":
            v = h[:, 0]
        else:
            m = attention_mask.unsqueeze(-1).to(h.dtype)  # (B, T, 1)
            v = (h * m).sum(1) / m.sum(1).clamp(min=1e-9)
        if self.proj is not None:
            v = self.proj(v)
        v = v.float()  # bf16 under autocast -> float32 out
        if self.normalize:
            v = F.normalize(v, dim=-1)
        return v

    def tensor_hash(self, h) -> None:
        """Feed names, dtypes, shapes and bytes of every tensor into hashlib object `h`."""
        for name, t in sorted(self.state_dict().items()):
            t = t.detach().to("cpu").contiguous().reshape(-1)
            h.update(f"{name}|{t.dtype}|{tuple(t.shape)}|".encode())
            h.update(t.view(torch.uint8).numpy())

    def same_as(self, other: Tower) -> bool:
        """True when saving `other` would write what saving this tower writes (tensors, model
        config, tokenizer); paths the two were loaded from do not count."""
        if other is self:
            return True

        def tensors(t: Tower) -> str:
            h = hashlib.sha256()
            t.tensor_hash(h)
            return h.hexdigest()

        def model_config(t: Tower) -> dict:
            return {k: v for k, v in t.model.config.to_dict().items() if not k.startswith("_")}

        def tokenizer(t: Tower) -> tuple:
            tok = t.tokenizer
            kw = {k: repr(v) for k, v in tok.init_kwargs.items() if k != "name_or_path" and "file" not in k}
            backend = json.loads(tok.backend_tokenizer.to_str())
            for k in ("truncation", "padding"):  # per-call state that encoding leaves behind
                backend.pop(k, None)
            return type(tok).__name__, backend, sorted(kw.items())

        return (
            (self.proj is None) == (other.proj is None)
            and model_config(self) == model_config(other)
            and tokenizer(self) == tokenizer(other)
            and tensors(self) == tensors(other)
        )

    # -- saving
    def save(self, d: Path, config: EncoderConfig) -> None:
        """A full HF model dir at `d`: weights, tokenizer, projection, sentence-transformers modules."""
        from safetensors.torch import save_file

        d.mkdir(parents=True, exist_ok=True)
        with quiet_transformers():
            self.model.save_pretrained(str(d))
            self.tokenizer.save_pretrained(str(d))
        if self.proj is not None:
            w = self.proj.weight.detach().to("cpu", torch.float32).contiguous()
            save_file({"weight": w}, str(d / PROJECTION_FILE))
        write_sentence_transformers_modules(d, self)

    @classmethod
    def load(cls, path, config: EncoderConfig, projection: bool = False) -> Tower:
        """A tower from a model dir; `projection`: read projection.safetensors there (a saved tower)."""
        d = _check_model_dir(path)
        if not any((d / f).is_file() for f in TOKENIZER_FILES):
            raise RalmError(
                f"{d}: could not load a tokenizer (none of {', '.join(TOKENIZER_FILES)}); "
                "copy the tokenizer files of the model it was trained from into it"
            )
        model = load_backbone(d)
        tokenizer = load_tokenizer(d)
        vocab = getattr(model.config, "vocab_size", None)
        if vocab is not None and len(tokenizer) > vocab:
            raise RalmError(
                f"{d}: tokenizer has {len(tokenizer)} tokens but the model only {vocab} embeddings; "
                "pass the tokenizer the model was trained with"
            )
        tower = cls(model, tokenizer, config)
        if projection and tower.proj is not None:
            from safetensors.torch import load_file

            p = d / PROJECTION_FILE
            if not p.is_file():
                raise RalmError(f"{p}: missing projection weights; re-save the encoder")
            w = load_file(str(p))["weight"]
            if tuple(w.shape) != tuple(tower.proj.weight.shape):
                raise RalmError(
                    f"{p}: projection shape {tuple(w.shape)} does not match proj_dim {config.proj_dim}"
                )
            with torch.no_grad():
                tower.proj.weight.copy_(w)
        return tower


def _dump(path: Path, obj) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj, indent=2) + "\n", encoding="utf-8")


def write_sentence_transformers_modules(d: Path, tower: Tower) -> None:
    """The files that make tower dir `d` load in `SentenceTransformer(d)` with the same outputs.

    Transformer -> Pooling (cls | mean) -> Dense (the projection, no bias, identity) -> Normalize,
    written with the long-standing `sentence_transformers.models.*` names (sentence-transformers >= 2).
    """
    from safetensors.torch import save_file

    st = "sentence_transformers.models."
    modules = [("", "Transformer"), ("1_Pooling", "Pooling")]
    _dump(d / "sentence_bert_config.json", {"max_seq_length": tower.max_length, "do_lower_case": False})
    _dump(
        d / "1_Pooling" / "config.json",
        {
            "word_embedding_dimension": tower.hidden_size,
            "pooling_mode_cls_token": tower.pooling == "cls",
            "pooling_mode_mean_tokens": tower.pooling == "mean",
            "pooling_mode_max_tokens": False,
            "pooling_mode_mean_sqrt_len_tokens": False,
        },
    )
    if tower.proj is not None:
        w = tower.proj.weight.detach().to("cpu", torch.float32).contiguous()
        cfg = {"in_features": tower.hidden_size, "out_features": tower.dim, "bias": False}
        _dump(
            d / "2_Dense" / "config.json", {**cfg, "activation_function": "torch.nn.modules.linear.Identity"}
        )
        save_file({"linear.weight": w}, str(d / "2_Dense" / "model.safetensors"))
        modules.append(("2_Dense", "Dense"))
    if tower.normalize:
        (d / "3_Normalize").mkdir(exist_ok=True)
        modules.append(("3_Normalize", "Normalize"))
    _dump(
        d / "modules.json",
        [
            {"idx": i, "name": str(i), "path": path, "type": st + kind}
            for i, (path, kind) in enumerate(modules)
        ],
    )
    _dump(
        d / "config_sentence_transformers.json",
        {
            "__version__": {"pytorch": torch.__version__},
            "prompts": {},
            "default_prompt_name": None,
            "similarity_fn_name": "cosine" if tower.normalize else "dot",
        },
    )


# ----------------------------------------------------------------------------- dual encoder
class DualEncoder(nn.Module):
    """Query and document towers (one shared module when `config.shared`) and their score."""

    def __init__(self, query_tower: Tower, doc_tower: Tower, config: EncoderConfig) -> None:
        super().__init__()
        self.config = config
        self.query_tower = query_tower
        self.doc_tower = doc_tower
        if query_tower.dim != doc_tower.dim:
            raise RalmError(f"query dim {query_tower.dim} != doc dim {doc_tower.dim}; use one proj_dim")

    @property
    def dim(self) -> int:
        """Output vector size d (proj_dim, else the backbone's hidden size)."""
        return self.doc_tower.dim

    def score(self, q: torch.Tensor, d: torch.Tensor) -> torch.Tensor:
        """(B, d) queries x (N, d) docs -> (B, N) = q @ d.T, scaled (see `scale_scores`)."""
        return self.scale_scores(q @ d.T)

    def scale_scores(self, s: torch.Tensor) -> torch.Tensor:
        """Inner products -> scores: divided by sqrt(d) if `scale_by_sqrt_dim`, times `score_scale`."""
        if self.config.scale_by_sqrt_dim:
            s = s / (self.dim**0.5)
        return s * self.config.score_scale if self.config.score_scale != 1.0 else s

    # -- construction
    @classmethod
    def from_pretrained(
        cls, path: str | os.PathLike | None = None, config: EncoderConfig | None = None
    ) -> DualEncoder:
        """From a saved DualEncoder directory, or from any local HF encoder (None = bundled MiniLM).

        From a plain encoder both towers start from its weights (REALM/BRENT start both from one
        warm-started BERT); the projections, if any, start equal so queries and docs share a space.
        Loading a saved DualEncoder, `config` may change max_length, scale_by_sqrt_dim and
        score_scale, but
        not proj_dim, shared, pooling or normalize (the weights were trained with those).
        Returned in eval mode, as Hugging Face models are; call `.train()` before training.
        """
        if path is not None and (Path(path).expanduser() / ENCODER_FILE).is_file():
            return cls._load_saved(Path(path).expanduser(), config).eval()
        d = resolve_model_dir(path)
        config = config or EncoderConfig()
        q = Tower.load(d, config)
        if config.shared:
            return cls(q, q, config).eval()
        doc = Tower.load(d, config)
        if q.proj is not None:
            with torch.no_grad():
                doc.proj.weight.copy_(q.proj.weight)
        return cls(q, doc, config).eval()

    @classmethod
    def _load_saved(cls, d: Path, config: EncoderConfig | None) -> DualEncoder:
        try:
            meta = json.loads((d / ENCODER_FILE).read_text(encoding="utf-8"))
            saved = EncoderConfig.from_dict(meta["config"])
        except (json.JSONDecodeError, KeyError, TypeError, UnicodeDecodeError) as exc:
            raise RalmError(f"{d / ENCODER_FILE}: unreadable ({exc}); re-save the encoder") from None
        if meta.get("format") != FORMAT:
            raise RalmError(f"{d / ENCODER_FILE}: not a {FORMAT} file; re-save the encoder")
        if config is not None:
            for f in ("proj_dim", "shared", "pooling", "normalize"):
                if getattr(config, f) != getattr(saved, f):
                    raise RalmError(
                        f"{d}: saved with {f}={getattr(saved, f)!r}, asked for {getattr(config, f)!r}; "
                        "load it without that setting or start from a plain encoder"
                    )
        cfg = config or saved
        stored = meta.get("doc", "doc")  # older versions: no field, doc/ a full directory
        if stored not in TOWER_DIRS:
            raise RalmError(
                f"{d / ENCODER_FILE}: \"doc\" is {stored!r}, expected 'query' or 'doc'; re-save the encoder"
            )
        q = Tower.load(d / "query", cfg, projection=True)
        # stored as query: doc/ is a symlink to query/ or absent; a separate module all the same
        doc = q if cfg.shared else Tower.load(d / stored, cfg, projection=True)
        return cls(q, doc, cfg)

    # -- saving
    def fingerprint(self, part: str = "all") -> str:
        """sha256 of the tensors and vector-shaping config of "all", the "query" or the "doc" tower."""
        h = hashlib.sha256()
        c = self.config
        h.update(f"{FORMAT}|{c.pooling}|{c.proj_dim}|{c.max_length}|{c.normalize}|".encode())
        if part in ("all", "query"):
            h.update(b"query|")
            self.query_tower.tensor_hash(h)
        if part in ("all", "doc"):
            h.update(b"doc|")
            self.doc_tower.tensor_hash(h)
        if part == "all":
            h.update(f"{c.shared}|{c.scale_by_sqrt_dim}".encode())
            if c.score_scale != 1.0:  # encoders saved before the field hash as they did
                h.update(f"|{c.score_scale}".encode())
        elif part not in ("query", "doc"):
            raise ValueError(f"part {part!r}: choose all, query or doc")
        return h.hexdigest()

    def save(self, path: str | os.PathLike) -> Path:
        """Write `path/` (query/, doc/, ralm_encoder.json) atomically: a temp dir, then a rename.

        Tied (`shared`) or identical towers are written once: doc is then a relative symlink to
        query/ (left out where symlinks fail) and ralm_encoder.json has `"doc": "query"`.
        """
        out = Path(path)
        if out.exists() and not (out.is_dir() and ((out / ENCODER_FILE).is_file() or not any(out.iterdir()))):
            raise RalmError(
                f"{out}: exists and is not a saved encoder; refusing to overwrite it, choose another path"
            )
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.parent / f".{out.name}.tmp-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        try:
            self.query_tower.save(tmp / "query", self.config)
            one_copy = self.config.shared or self.query_tower.same_as(self.doc_tower)
            if one_copy:
                with contextlib.suppress(OSError):  # no symlinks here: the json field suffices
                    os.symlink("query", tmp / "doc", target_is_directory=True)
            else:
                self.doc_tower.save(tmp / "doc", self.config)
            meta = {
                "format": FORMAT,
                "version": FORMAT_VERSION,
                "config": asdict(self.config),
                "dim": self.dim,
                "doc": "query" if one_copy else "doc",
                "fingerprint": self.fingerprint("all"),
                "query_fingerprint": self.fingerprint("query"),
                "doc_fingerprint": self.fingerprint("doc"),
            }
            (tmp / ENCODER_FILE).write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
            old = out.parent / f".{out.name}.old-{os.getpid()}"
            if out.exists():
                os.replace(out, old)
            os.replace(tmp, out)
            shutil.rmtree(old, ignore_errors=True)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        return out

    # -- tokenization
    def tokenize_queries(self, texts: list[str]) -> dict[str, torch.Tensor]:
        """`[CLS] text [SEP]` batches for the query tower, truncated to max_length, right-padded."""
        tok = self.query_tower.tokenizer
        enc = tok(
            list(texts), truncation=True, max_length=self.config.max_length, padding=True, return_tensors="pt"
        )
        keep = ["input_ids", "attention_mask"] + (
            ["token_type_ids"] if self.query_tower.uses_token_types else []
        )
        return {k: enc[k] for k in keep if k in enc}

    def doc_rows(self, titles: list[str | None] | None, texts: list[str]) -> list[tuple[list, list]]:
        """Per doc (ids, type ids) of `[CLS] title [SEP] text [SEP]` (tokenized without specials first)."""
        tok = self.doc_tower.tokenizer
        text_ids = tok(list(texts), add_special_tokens=False)["input_ids"]
        if titles is None:
            titles = [None] * len(text_ids)
        if len(titles) != len(text_ids):
            raise RalmError(
                f"{len(titles)} titles for {len(text_ids)} texts; pass one title per text (or None)"
            )
        named = [i for i, t in enumerate(titles) if t]
        title_ids: list = [None] * len(titles)
        if named:
            for i, ids in zip(
                named, tok([titles[i] for i in named], add_special_tokens=False)["input_ids"], strict=True
            ):
                title_ids[i] = ids or None
        tpl, m = self.doc_tower.template, self.config.max_length
        return [tpl.build(t, x, m) for t, x in zip(title_ids, text_ids, strict=True)]

    def tokenize_docs(self, titles: list[str | None] | None, texts: list[str]) -> dict[str, torch.Tensor]:
        """Padded doc batches for the doc tower (see `doc_rows`)."""
        return self.doc_tower.template.collate(self.doc_rows(titles, texts), self.doc_tower.uses_token_types)

    # -- encoding (inference)
    def _encode(self, tower: Tower, batches, n: int, device, autocast, progress: bool) -> np.ndarray:
        from ralm.progress import tqdm

        dev = resolve_device(device, tower)
        dtype = autocast_dtype(dev, autocast, next(tower.parameters()).dtype)
        out = np.zeros((n, tower.dim), dtype=np.float32)
        with (
            eval_on(tower, dev),
            torch.inference_mode(),
            tqdm(total=n, disable=not progress, unit="text") as bar,
        ):
            for rows, inputs in batches:
                with autocast_context(dev, dtype):
                    v = tower(**{k: t.to(dev) for k, t in inputs.items()})
                out[rows] = v.float().cpu().numpy()
                bar.update(len(rows))
        return out

    def encode_queries(
        self, texts: list[str], batch_size: int = 64, *, device=None, autocast="off", progress: bool = False
    ) -> np.ndarray:
        """(len(texts), dim) float32 query vectors, batched in length order."""
        texts = list(texts)
        order = np.argsort([-len(t) for t in texts], kind="stable")

        def batches():
            for s in range(0, len(texts), batch_size):
                rows = order[s : s + batch_size]
                yield rows, self.tokenize_queries([texts[i] for i in rows])

        return self._encode(self.query_tower, batches(), len(texts), device, autocast, progress)

    def encode_docs(
        self,
        titles: list[str | None] | None,
        texts: list[str],
        batch_size: int = 64,
        *,
        device=None,
        autocast="off",
        progress: bool = False,
    ) -> np.ndarray:
        """(len(texts), dim) float32 doc vectors of `[CLS] title [SEP] text [SEP]` (titles optional)."""
        all_rows = self.doc_rows(titles, list(texts))
        order = np.argsort([-len(r[0]) for r in all_rows], kind="stable")
        tpl, types = self.doc_tower.template, self.doc_tower.uses_token_types

        def batches():
            for s in range(0, len(all_rows), batch_size):
                rows = order[s : s + batch_size]
                yield rows, tpl.collate([all_rows[i] for i in rows], types)

        return self._encode(self.doc_tower, batches(), len(all_rows), device, autocast, progress)
