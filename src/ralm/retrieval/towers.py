"""One encoder tower of a dual encoder: a Hugging Face backbone, pooling, projection, normalisation.

`EncoderConfig` says how token vectors become one vector (mean or [CLS] pooling, an optional
projection to `proj_dim`, optional L2 norm) and how query/doc vectors are scored; `Tower` applies
it to one backbone (input_ids (B, L) -> (B, d)) and saves/loads itself as a full Hugging Face
model directory, with the sentence-transformers module files that make `SentenceTransformer(dir)`
give the same vectors. `InputTemplate` reads how a tokenizer wraps one or two sequences, so
documents can be built from pre-tokenised title/body ids. `ralm.retrieval.encoders.DualEncoder`
pairs two towers.
"""

from __future__ import annotations

import hashlib
import inspect
import json
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from ralm.errors import RalmError
from ralm.models.decoder_body import is_decoder_body, last_token, load_decoder_body, mask_positions
from ralm.models.encoder import encoder_dir, load_encoder
from ralm.models.names import is_decoder_spec
from ralm.models.quiet import quiet_transformers
from ralm.models.tokenizers import load_tokenizer

__all__ = ["EncoderConfig", "InputTemplate", "Tower", "write_sentence_transformers_modules"]

PROJECTION_FILE = "projection.safetensors"
POOLINGS = ("mean", "cls", "last")  # last: the last real token (decoder-only LMs)
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
    # decoder-only LM towers (Gemma-3, Llama, Qwen; as Qwen3-Embedding, EmbeddingGemma, NV-Embed):
    bidirectional: bool = False  # rebuild with use_bidirectional_attention (Gemma-family configs)
    query_instruction: str = ""  # prefixed to every query text (e.g. "query: "); docs get none
    train_embeddings: bool = False  # a decoder tower's token embeddings stay frozen unless set

    def __post_init__(self) -> None:
        if self.pooling not in POOLINGS:
            raise RalmError(f"pooling {self.pooling!r}: choose {', '.join(POOLINGS)}")
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
class Tower(nn.Module):
    """One encoder: HF backbone -> pooling ("cls" | "mean" | "last") -> optional projection -> optional
    L2 norm. A decoder-only LM's body counts its positions from the attention mask (any padding
    side gives the same vectors) and keeps its token embeddings frozen unless `train_embeddings`."""

    def __init__(self, model: nn.Module, tokenizer, config: EncoderConfig) -> None:
        super().__init__()
        self.model = model
        self.tokenizer = tokenizer
        self.pooling = config.pooling
        self.normalize = config.normalize
        self.max_length = config.max_length
        self.query_instruction = config.query_instruction
        self.hidden_size = int(model.config.hidden_size)
        self.proj = nn.Linear(self.hidden_size, config.proj_dim, bias=False) if config.proj_dim else None
        self.uses_token_types = "token_type_ids" in inspect.signature(model.forward).parameters
        self.template = InputTemplate(tokenizer)
        self.decoder = is_decoder_body(model.config)
        if self.decoder and not config.train_embeddings:
            model.get_input_embeddings().weight.requires_grad_(False)

    @property
    def dim(self) -> int:
        return self.proj.out_features if self.proj is not None else self.hidden_size

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        token_type_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        pool_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """(B, T) ids and mask -> (B, dim) vectors (float32 unless the weights are half precision).

        position_ids: optional (B, T) positions (e.g. a suffix embedded at its absolute positions
        in the sentence, as SUREALM does); None = 0..T-1.
        pool_mask: optional (B, T) positions that mean pooling averages (the encoder still reads
        every position of `attention_mask`); None = `attention_mask`.
        """
        kw = (
            {"token_type_ids": token_type_ids}
            if (token_type_ids is not None and self.uses_token_types)
            else {}
        )
        if position_ids is None and self.decoder:
            position_ids = mask_positions(attention_mask)
        if position_ids is not None:
            kw["position_ids"] = position_ids
        h = self.model(
            input_ids=input_ids, attention_mask=attention_mask, **kw
        ).last_hidden_state  # (B, T, H)
        if self.pooling == "cls":
            v = h[:, 0]
        elif self.pooling == "last":
            v = last_token(h, attention_mask)
        else:
            m = (attention_mask if pool_mask is None else pool_mask).unsqueeze(-1).to(h.dtype)  # (B, T, 1)
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
            if self.decoder:  # sentence-transformers counts positions 0..T-1: pad on the right
                self.tokenizer.padding_side = "right"
            self.tokenizer.save_pretrained(str(d))
        if self.proj is not None:
            w = self.proj.weight.detach().to("cpu", torch.float32).contiguous()
            save_file({"weight": w}, str(d / PROJECTION_FILE))
        write_sentence_transformers_modules(d, self)

    @classmethod
    def load(cls, path, config: EncoderConfig, projection: bool = False) -> Tower:
        """A tower from a model dir; `projection`: read projection.safetensors there (a saved tower).
        A decoder-only LM (gemma3, smollm2, a .gguf file, a causal LM directory) gives its body,
        with bidirectional attention when `config.bidirectional`."""
        if is_decoder_spec(path):
            model, tokenizer = load_decoder_body(path, bidirectional=config.bidirectional, what="encoder")
            return cls(model, tokenizer, config)
        d = encoder_dir(path)
        if not any((d / f).is_file() for f in TOKENIZER_FILES):
            raise RalmError(
                f"{d}: could not load a tokenizer (none of {', '.join(TOKENIZER_FILES)}); "
                "copy the tokenizer files of the model it was trained from into it"
            )
        model = load_encoder(d)
        if config.bidirectional != bool(getattr(model.config, "use_bidirectional_attention", False)):
            raise RalmError(
                f"{d}: saved with{'out' if config.bidirectional else ''} bidirectional attention; "
                f"{'drop' if config.bidirectional else 'pass'} --bidirectional"
            )
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
            "pooling_mode_lasttoken": tower.pooling == "last",
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
            "prompts": {"query": tower.query_instruction} if tower.query_instruction else {},
            "default_prompt_name": None,
            "similarity_fn_name": "cosine" if tower.normalize else "dot",
        },
    )
