"""Prefix and suffix embeddings with a frozen sentence transformer, at absolute positions.

SUREALM splits a sentence W = w_1..w_N (language-model tokens) at every word w_i into the
prefix p_i = w_1..w_{i-1} and the suffix s_i = w_{i+1}..w_{i+m} (the current word left out,
the suffix truncated to m tokens) and embeds both with a sentence transformer. "To preserve
positional information" both keep the positions they have in W: a suffix is fed as
``[CLS] s_i [SEP]`` with position ids ``0, a, a+1, ..., b, b+1`` where a..b are the suffix
tokens' positions in ``[CLS] W [SEP]``.

The language model and the sentence transformer may use different tokenizers (SmolLM2's BPE
and MiniLM's WordPiece): the split points are character offsets of the LM tokens, and the
encoder's own tokens of W are assigned by offsets: to the prefix when they end before w_i
starts, to the suffix when they start after w_i ends and end before w_{i+m} does. An encoder
token that overlaps w_i belongs to neither (the current word stays excluded). With one
tokenizer for both, this is the plain split.

The suffix can also be encoded as the SUREALM authors' code does it (`Aligned.suffix_whole`): the
encoder reads the whole rest of the sentence w_{i+1}..w_N, and only the vectors of the encoder
tokens inside the first m LM tokens are mean-pooled, so they carry the context that follows them.

Pooling and normalisation are read from the sentence-transformers files next to the model
(``1_Pooling/config.json``, a ``Normalize`` module in ``modules.json``); a plain Hugging Face
encoder gets mean pooling without normalisation.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from ralm.errors import RalmError
from ralm.models.precision import autocast_context, autocast_dtype, eval_on
from ralm.retrieval.embed import plan_batches
from ralm.retrieval.encoders import EncoderConfig, Tower

__all__ = ["Aligned", "SpanEmbedder", "sentence_transformer_pooling"]

# (encoder token ids without specials, their position ids[, how many of the first tokens to pool])
Row = tuple[list[int], list[int]] | tuple[list[int], list[int], int]


def sentence_transformer_pooling(path: str | os.PathLike) -> tuple[str, bool]:
    """(pooling, normalize) from a sentence-transformers directory; ("mean", False) without one."""
    d = Path(path)
    pooling, normalize = "mean", False
    try:
        cfg = json.loads((d / "1_Pooling" / "config.json").read_text(encoding="utf-8"))
        if cfg.get("pooling_mode_cls_token") and not cfg.get("pooling_mode_mean_tokens"):
            pooling = "cls"
    except (OSError, json.JSONDecodeError):
        pass
    try:
        modules = json.loads((d / "modules.json").read_text(encoding="utf-8"))
        normalize = any(str(m.get("type", "")).endswith("Normalize") for m in modules)
    except (OSError, json.JSONDecodeError, AttributeError):
        pass
    return pooling, normalize


@dataclass
class Aligned:
    """One sentence's encoder tokens and where the LM tokens split it (character offsets).

    enc_ids / enc_start / enc_end: (M,) encoder token ids (no specials) and their character spans.
    lm_start / lm_end: (N,) character spans of the LM tokens w_1..w_N.
    """

    enc_ids: np.ndarray
    enc_start: np.ndarray
    enc_end: np.ndarray
    lm_start: np.ndarray
    lm_end: np.ndarray

    def prefix(self, length: int) -> Row:
        """Encoder tokens of w_1..w_length (length 0..N) at positions 1.. (after [CLS])."""
        cut = self.lm_start[length] if length < len(self.lm_start) else np.iinfo(np.int64).max
        keep = np.flatnonzero(self.enc_end <= cut)
        return self.enc_ids[keep].tolist(), (keep + 1).tolist()

    def suffix(self, i: int, m: int, *, include_current: bool = False) -> Row:
        """Encoder tokens of s_i = w_{i+1}..w_{i+m} (i is 1-based, 1 <= i < N) at their absolute positions.

        include_current: the paper's §5 variant, s_i = w_i..w_{i+m-1} (still m tokens, the current
        word first).
        """
        n = len(self.lm_start)
        if include_current:
            lo = self.lm_start[i - 1]
            hi = self.lm_end[min(i + m - 1, n) - 1]
        else:
            lo = self.lm_end[i - 1]
            hi = self.lm_end[min(i + m, n) - 1]
        keep = np.flatnonzero((self.enc_start >= lo) & (self.enc_end <= hi))
        return self.enc_ids[keep].tolist(), (keep + 1).tolist()

    def suffix_whole(self, i: int, m: int) -> Row:
        """The rest of the sentence w_{i+1}..w_N at its absolute positions, with the number of its
        first encoder tokens that lie inside w_{i+1}..w_{i+m} (the ones to pool).

        Example: LM words "a b c d", i = 1, m = 2 -> the tokens of "b c d", pooling those of "b c".
        """
        n = len(self.lm_start)
        lo = self.lm_end[i - 1]
        hi = self.lm_end[min(i + m, n) - 1]
        keep = np.flatnonzero(self.enc_start >= lo)
        pooled = int((self.enc_end[keep] <= hi).sum())
        return self.enc_ids[keep].tolist(), (keep + 1).tolist(), pooled


class SpanEmbedder:
    """A frozen sentence transformer that embeds token spans at given positions.

    path: a sentence-transformers or Hugging Face encoder directory (None = the bundled MiniLM).
    `embed(rows)` -> (n, d) float32; `align(text, lm_offsets)` -> `Aligned`.
    """

    def __init__(
        self,
        path: str | os.PathLike | None = None,
        *,
        device: str | torch.device = "cpu",
        autocast: str = "auto",
        max_length: int = 256,
    ) -> None:
        from ralm.models.names import resolve_model_dir

        self.path = resolve_model_dir(path)
        pooling, normalize = sentence_transformer_pooling(self.path)
        self.tower = Tower.load(
            self.path, EncoderConfig(pooling=pooling, normalize=normalize, max_length=512)
        )
        self.tokenizer = self.tower.tokenizer
        self.device = torch.device(device)
        self.tower.to(self.device).eval()
        self.autocast = autocast_dtype(self.device, autocast, torch.float32)
        self.max_positions = int(getattr(self.tower.model.config, "max_position_embeddings", 512))
        self.max_length = min(max_length, self.max_positions)
        self.cls_id = (
            self.tokenizer.cls_token_id
            if self.tokenizer.cls_token_id is not None
            else self.tokenizer.bos_token_id
        )
        self.sep_id = (
            self.tokenizer.sep_token_id
            if self.tokenizer.sep_token_id is not None
            else self.tokenizer.eos_token_id
        )
        self.pad_id = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        if self.cls_id is None or self.sep_id is None:
            raise RalmError(
                f"{self.path}: the tokenizer has no [CLS]/[SEP] (or BOS/EOS) token to frame spans"
            )
        self._fingerprint: str | None = None

    @property
    def dim(self) -> int:
        return self.tower.dim

    @property
    def fingerprint(self) -> str:
        """sha256 of the encoder's tensors, pooling and normalisation: a data store records it."""
        if self._fingerprint is None:
            h = hashlib.sha256(f"surealm-span-embedder|{self.tower.pooling}|{self.tower.normalize}|".encode())
            self.tower.tensor_hash(h)
            self._fingerprint = h.hexdigest()
        return self._fingerprint

    def align(self, text: str, lm_offsets: np.ndarray) -> Aligned:
        """Tokenize `text` with the encoder and pair it with the LM tokens' (N, 2) character offsets."""
        enc = self.tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
        off = np.asarray(enc["offset_mapping"], dtype=np.int64).reshape(-1, 2)
        ids = np.asarray(enc["input_ids"], dtype=np.int64)
        limit = self.max_length - 2  # room for [CLS] and [SEP]
        ids, off = ids[:limit], off[:limit]
        lm = np.asarray(lm_offsets, dtype=np.int64).reshape(-1, 2)
        return Aligned(ids, off[:, 0], off[:, 1], lm[:, 0], lm[:, 1])

    def collate(self, rows: list[Row]) -> dict[str, torch.Tensor]:
        """``[CLS] span [SEP]`` rows with their position ids, right-padded: (B, T) tensors; a row with a
        pool count c also sets pool_mask to its first c span tokens (all of it when c is 0)."""
        T = max(len(r[0]) for r in rows) + 2
        B = len(rows)
        ids = torch.full((B, T), self.pad_id, dtype=torch.long)
        pos = torch.zeros((B, T), dtype=torch.long)
        mask = torch.zeros((B, T), dtype=torch.long)
        pool = None
        for b, row in enumerate(rows):
            tok, p = row[0], row[1]
            n = len(tok)
            last = (p[-1] + 1) if n else 1
            ids[b, : n + 2] = torch.tensor([self.cls_id, *tok, self.sep_id])
            pos[b, : n + 2] = torch.tensor([0, *p, min(last, self.max_positions - 1)])
            mask[b, : n + 2] = 1
            if len(row) == 3:
                if pool is None:
                    pool = mask.clone()
                c = int(row[2])
                pool[b] = 0
                pool[b, 1 : c + 1] = 1
                if c == 0:
                    pool[b, : n + 2] = 1
            elif pool is not None:
                pool[b] = mask[b]
        out = {"input_ids": ids, "attention_mask": mask, "position_ids": pos}
        if pool is not None:
            out["pool_mask"] = pool
        return out

    @torch.inference_mode()
    def embed(self, rows: list[Row], batch_size: int = 256) -> np.ndarray:
        """(len(rows), dim) float32 embeddings of the spans (length-sorted batches)."""
        out = np.empty((len(rows), self.dim), dtype=np.float32)
        if not rows:
            return out
        lengths = np.asarray([len(r[0]) for r in rows])
        with eval_on(self.tower, self.device):
            for pos in plan_batches(lengths, batch_size):
                batch = self.collate([rows[i] for i in pos])
                with autocast_context(self.device, self.autocast):
                    pool = batch.get("pool_mask")
                    v = self.tower(
                        batch["input_ids"].to(self.device),
                        batch["attention_mask"].to(self.device),
                        position_ids=batch["position_ids"].to(self.device),
                        pool_mask=None if pool is None else pool.to(self.device),
                    )
                out[pos] = v.float().cpu().numpy()
        return out
