"""Task heads on decoder-only LMs (Gemma-3, Llama, Qwen, SmolLM2) for `ralm finetune`.

BRENT fine-tunes its reader as an ordinary encoder. ralm's causal readers (`ralm pretrain` with
a Gemma-3 reader, `ralm export-reader`) are decoder-only LMs, and transformers has no
token-classification or QA class for several of them (Gemma-3). `CausalTaskModel` puts one
linear head on the LM's body (its `base_model`; the next-token output layer is dropped):

* ``ner`` / ``pos``: logits (B, L, C) on every position; the adapter labels each word's first
  sub-token, as for an encoder;
* ``classify``: logits (B, C) from the last real token (``pooling="last"``, whichever side the
  padding is on) or the mean over real tokens (``"mean"``);
* ``extractive-qa``: start and end logits (B, L).

Position ids are counted from the attention mask, so left and right padding give the same
outputs. Without ``bidirectional`` a position reads only its left context (a causal LM's
attention): such rows are not comparable with a bidirectional encoder's. ``bidirectional=True``
rebuilds the model with the config's ``use_bidirectional_attention`` (Gemma, Gemma-2, Gemma-3);
configs without that switch are refused in one line. The token-embedding matrix is frozen by
default (168M of Gemma-3-270M's 268M parameters); ``lora_r > 0`` trains LoRA adapters (peft)
instead of the body's weights, folded back in before saving.

A saved task model is a directory that `AutoModel.from_pretrained` loads (the body: config.json,
model.safetensors, the tokenizer) plus ``head.safetensors`` (the head's state dict) and
``ralm_task.json`` (task, labels, pooling, attention). `load_saved_task_model` reloads it for
ralm; the README.md model card shows the transformers route.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ralm.errors import RalmError
from ralm.models.decoder_body import last_token, load_decoder_body, mask_positions
from ralm.models.names import is_decoder_spec

__all__ = [
    "TASK_FILE",
    "CausalTaskModel",
    "TaskOutput",
    "is_causal_backbone",
    "is_saved_task_model",
    "load_causal_task_model",
    "load_saved_task_model",
]

TASK_FILE = "ralm_task.json"
HEAD_FILE = "head.safetensors"
POOLINGS = ("last", "mean")


@dataclass
class TaskOutput:
    """What the adapters read: `logits` (tagging (B, L, C), classification (B, C)) or
    `start_logits` / `end_logits` (B, L) for extractive QA."""

    logits: torch.Tensor | None = None
    start_logits: torch.Tensor | None = None
    end_logits: torch.Tensor | None = None


class CausalTaskModel(nn.Module):
    """A decoder LM body (B, L) -> hidden (B, L, H) with a linear task head (see the module doc).

    body: the LM without its output layer (e.g. `Gemma3TextModel`); task: ner, pos, classify or
    extractive-qa; num_labels: classes (QA: ignored, 2 outputs); pooling: last | mean
    (classification only).
    """

    base_model_prefix = "body"
    words_by_offsets = True  # tagging: words found by character offsets (`encode_words_by_offsets`)

    def __init__(self, body: nn.Module, task: str, num_labels: int, pooling: str = "last"):
        super().__init__()
        if pooling not in POOLINGS:
            raise RalmError(f"pooling {pooling!r}: choose last or mean")
        self.body = body
        self.task = task
        self.pooling = pooling
        self.config = body.config
        out = 2 if task == "extractive-qa" else int(num_labels)
        self.head = nn.Linear(int(body.config.hidden_size), out)
        nn.init.normal_(self.head.weight, std=0.02)
        nn.init.zeros_(self.head.bias)

    @property
    def bidirectional(self) -> bool:
        return bool(getattr(self.config, "use_bidirectional_attention", False))

    def forward(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None, **_: Any
    ) -> TaskOutput:
        """input_ids, attention_mask: (B, L), padded on either side."""
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        mask = attention_mask.long()
        h = self.body(
            input_ids=input_ids, attention_mask=mask, position_ids=mask_positions(mask)
        ).last_hidden_state
        real = mask.bool()
        if self.task == "classify":
            if self.pooling == "last":
                pooled = last_token(h, mask)
            else:
                z = h.masked_fill(~real[..., None], 0.0)
                pooled = z.sum(1) / real.sum(1, keepdim=True).clamp(min=1).to(h.dtype)
            return TaskOutput(logits=self.head(pooled))
        logits = self.head(h.masked_fill(~real[..., None], 0.0))
        if self.task == "extractive-qa":
            return TaskOutput(start_logits=logits[..., 0], end_logits=logits[..., 1])
        return TaskOutput(logits=logits)

    # -- saving
    def save_pretrained(
        self, out: str | os.PathLike, safe_serialization: bool = True, tokenizer=None
    ) -> Path:
        """Write the body (AutoModel directory), head.safetensors, ralm_task.json and a model card
        into `out` atomically; LoRA adapters are folded into the body first."""
        from safetensors.torch import save_file, save_model

        from ralm.atomic import staged_dir
        from ralm.model_card import write_model_card
        from ralm.models.lora import merge_lora

        with staged_dir(out) as tmp:
            merge_lora(self.body)
            cfg = self.body.config
            cfg._name_or_path = ""
            cfg.to_json_file(str(tmp / "config.json"))
            save_model(self.body, str(tmp / "model.safetensors"))
            save_file(
                {k: v.detach().contiguous().cpu() for k, v in self.head.state_dict().items()},
                str(tmp / HEAD_FILE),
            )
            meta = {
                "task": self.task,
                "pooling": self.pooling,
                "bidirectional": self.bidirectional,
                "labels": [cfg.id2label[i] for i in range(len(cfg.id2label))]
                if self.task != "extractive-qa"
                else None,
                "head": {"in": self.head.in_features, "out": self.head.out_features},
            }
            (tmp / TASK_FILE).write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
            if tokenizer is not None:
                tokenizer.save_pretrained(str(tmp))
            write_model_card(tmp, model_card(meta, type(self.body).__name__))
        return Path(out)


def model_card(meta: dict, body_class: str) -> str:
    """README.md of a saved task model: what it is, and how to load it with transformers alone."""
    attention = (
        "bidirectional attention (the config's `use_bidirectional_attention`)"
        if meta["bidirectional"]
        else "causal attention: each position reads only its left context, so the scores are not "
        "comparable with a bidirectional encoder's"
    )
    how = {
        "ner": "logits = head(hidden)  # (B, L, C); a word's tag is read at its first sub-token",
        "pos": "logits = head(hidden)  # (B, L, C); a word's tag is read at its first sub-token",
        "classify": (
            "logits = head(hidden[range(B), last_real_token])  # (B, C)"
            if meta["pooling"] == "last"
            else "logits = head(masked_mean(hidden))  # (B, C)"
        ),
        "extractive-qa": "start_logits, end_logits = head(hidden).unbind(-1)  # (B, L) each",
    }[meta["task"]]
    return f"""# ralm fine-tuned {meta["task"]} model on a decoder-only LM ({body_class})

Written by `ralm finetune`. The body is a plain transformers model; the task head is a linear
layer in `head.safetensors`; `ralm_task.json` records the task, labels and pooling. Attention:
{attention}.

transformers has no token-classification or QA class for every decoder LM (Gemma-3 has none),
so the head is saved beside the body rather than as an `*For{{Task}}` class. To load it without
ralm:

```python
import torch
from safetensors.torch import load_file
from transformers import AutoModel, AutoTokenizer

body = AutoModel.from_pretrained(DIR)
tokenizer = AutoTokenizer.from_pretrained(DIR)
head = torch.nn.Linear({meta["head"]["in"]}, {meta["head"]["out"]})
head.load_state_dict(load_file(f"{{DIR}}/head.safetensors"))
mask = batch["attention_mask"]
hidden = body(input_ids=batch["input_ids"], attention_mask=mask,
              position_ids=(mask.cumsum(-1) - 1).clamp(min=0)).last_hidden_state
{how}
```

With ralm: `ralm.tasks.causal_heads.load_saved_task_model(DIR)`, or `ralm finetune --model DIR`.
"""


# -- loading
def is_causal_backbone(spec: str | os.PathLike | None) -> bool:
    """Whether --model names a decoder-only LM (`ralm.models.names.is_decoder_spec`) or a saved
    `CausalTaskModel`."""
    if spec is None:
        return False
    return is_saved_task_model(spec) or is_decoder_spec(spec)


def is_saved_task_model(spec: str | os.PathLike) -> bool:
    return (Path(spec).expanduser() / TASK_FILE).is_file()


def load_causal_task_model(
    task: str,
    spec: str | os.PathLike,
    labels: list[str] | None,
    *,
    bidirectional: bool = False,
    pooling: str = "last",
    lora_r: int = 0,
    train_embeddings: bool = False,
) -> tuple[CausalTaskModel, Any]:
    """(CausalTaskModel, tokenizer) for `task` on the causal LM `spec` (a short name, GGUF file or
    directory; a saved task model continues from its body and head when the labels agree)."""
    if is_saved_task_model(spec):
        model, tok = load_saved_task_model(spec)
        if model.task != task:
            raise RalmError(f"{spec}: a fine-tuned {model.task} model, not {task}")
        if labels is not None and task != "extractive-qa":
            saved = [model.config.id2label[i] for i in range(len(model.config.id2label))]
            if list(labels) != saved:
                raise RalmError(f"{spec}: trained with the labels {saved}, the data has {list(labels)}")
        if bidirectional != model.bidirectional:
            raise RalmError(
                f"{spec}: saved with {'bidirectional' if model.bidirectional else 'causal'} attention; "
                f"{'pass' if model.bidirectional else 'drop'} --bidirectional"
            )
    else:
        body, tok = load_decoder_body(spec, bidirectional=bidirectional, what="fine-tuning backbone")
        if labels is not None:
            body.config.id2label = dict(enumerate(labels))
            body.config.label2id = {lab: i for i, lab in enumerate(labels)}
        model = CausalTaskModel(body, task, len(labels or []) or 2, pooling)
    if not train_embeddings:
        model.body.get_input_embeddings().weight.requires_grad_(False)
    if lora_r:
        from ralm.models.lora import add_lora

        add_lora(model.body, lora_r)
    return model, tok


def load_saved_task_model(d: str | os.PathLike) -> tuple[CausalTaskModel, Any]:
    """(CausalTaskModel in eval mode, tokenizer) from a directory `CausalTaskModel.save_pretrained` wrote."""
    from safetensors.torch import load_file

    from ralm.models.encoder import load_auto

    d = Path(d).expanduser()
    try:
        meta = json.loads((d / TASK_FILE).read_text(encoding="utf-8"))
        body = load_auto("AutoModel", d, local_files_only=True, dtype=torch.float32)
        tok = load_auto("AutoTokenizer", d, local_files_only=True)
        model = CausalTaskModel(body, meta["task"], int(meta["head"]["out"]), meta.get("pooling", "last"))
        model.head.load_state_dict(load_file(str(d / HEAD_FILE)))
    except (OSError, ValueError, KeyError, RuntimeError, json.JSONDecodeError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise RalmError(f"{d}: not a readable ralm task model ({first[:200]})") from None
    tok.padding_side = "right"
    return model.eval(), tok
