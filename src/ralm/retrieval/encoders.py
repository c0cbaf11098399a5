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
import json
import os
import shutil
from dataclasses import asdict
from pathlib import Path

import numpy as np
import torch
from torch import nn

from ralm.atomic import replace_dir, temp_sibling
from ralm.errors import RalmError
from ralm.models.names import is_decoder_spec, resolve_model_dir
from ralm.models.precision import autocast_context, autocast_dtype, eval_on
from ralm.retrieval.towers import EncoderConfig, Tower

__all__ = ["ENCODER_FILE", "DualEncoder", "EncoderConfig", "Tower"]

ENCODER_FILE = "ralm_encoder.json"
TOWER_DIRS = ("query", "doc")  # values of the json's "doc" field: where the doc tower is stored
FORMAT = "ralm-dual-encoder"
FORMAT_VERSION = 1


def module_device(device: str | torch.device | None, module: nn.Module) -> torch.device:
    """`"auto"` or None: the device `module`'s parameters are on; else `torch.device(device)`."""
    if device is None or str(device) == "auto":
        return next(module.parameters()).device
    return torch.device(device)


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
        config = config or EncoderConfig()
        d = path if is_decoder_spec(path) else resolve_model_dir(path)
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
            for f in ("proj_dim", "shared", "pooling", "normalize", "bidirectional", "query_instruction"):
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
        if c.bidirectional or c.query_instruction:  # only then, so older fingerprints stay valid
            h.update(f"bidirectional={c.bidirectional}|instruction={c.query_instruction}|".encode())
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
        tmp = temp_sibling(out)
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
            replace_dir(tmp, out)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        return out

    # -- tokenization
    def tokenize_queries(self, texts: list[str]) -> dict[str, torch.Tensor]:
        """`[CLS] text [SEP]` batches for the query tower, truncated to max_length, right-padded."""
        tok = self.query_tower.tokenizer
        if self.config.query_instruction:
            texts = [self.config.query_instruction + t for t in texts]
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

        dev = module_device(device, tower)
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
