"""Export a LUKE model to Hugging Face's LUKE format (l == L), and the weight mapping in both directions.

`export_model(run, out)` takes a `ralm luke pretrain` run directory (its `model/`, saved by
`ralm.luke.io.save_model`, and its `entity_vocab.tsv`) or a model directory itself, and writes
    config.json          transformers' LukeConfig: model_type "luke", use_entity_aware_attention true,
                         architectures LukeForMaskedLM, LukeForEntitySpanClassification (id2label from
                         the model's saved "classes" or "labels", else LABEL_i) or LukeModel
    model.safetensors    HF parameter names (`luke.` prefix; lm_head / entity_predictions / classifier)
    tokenizer files      the word tokenizer saved with the model, else the backbone's (AutoTokenizer loads it)
    entity_vocab.json    {title: id}, as LukeTokenizer reads it, when the run has a vocabulary
    ralm_export.json     where it came from
that `LukeModel`, `LukeForMaskedLM` and `LukeForEntitySpanClassification` load with the outputs of
the ralm model. With l < L the directory holds ralm's own format instead (HF's LukeConfig has one
hidden_size for words and entities) and the export says so.

The mapping is a renaming (ralm.luke.model uses HF's names) except for word positions: ralm's are
BERT's 0..T-1, HF LUKE's RoBERTa-style `create_position_ids_from_input_ids` numbers the non-padding
tokens from pad_token_id + 1. The exported word position table is ours shifted down by that offset
(max_position_embeddings grows by it), so an input right-padded with pad_token_id gets the same
vectors without passing position_ids. The entity position table is indexed by raw word positions in
both. HF's pooler has no counterpart here and is left out (transformers initialises it and says so),
as are the MLM decoder and entity decoder copies, which HF stores untied and we tie.
Left out: writing HF's LukeTokenizer (it needs a RoBERTa BPE vocabulary; the word tokenizer is the
backbone's), and importing pre-trained HF LUKE checkpoints beyond `from_hf` for tests.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import torch
from torch import Tensor, nn

from ralm.atomic import temp_sibling
from ralm.errors import RalmError
from ralm.luke.config import LukeConfig
from ralm.luke.io import (
    CLASSES,
    TOKENIZER_FILES,
    is_model_dir,
    load_model,
    read_model_info,
    save_model,
    write_safetensors,
)
from ralm.luke.model import EntityAwareModel, LukeForPretraining, LukeForSpanClassification
from ralm.model_card import model_card, write_model_card

__all__ = ["export_model", "find_model_dir", "hf_config", "to_hf_state_dict", "from_hf"]

WORD_POS = "embeddings.position_embeddings.weight"
ENTITY_POS = "entity_embeddings.position_embeddings.weight"
ENTITY_TABLE = "entity_embeddings.entity_embeddings.weight"
HF_CLASS = {
    EntityAwareModel: "LukeModel",
    LukeForPretraining: "LukeForMaskedLM",
    LukeForSpanClassification: "LukeForEntitySpanClassification",
}


def position_offset(pad_token_id: int) -> int:
    """Where HF LUKE's word positions start: pad_token_id + 1 (BERT's pad 0 -> 1)."""
    return pad_token_id + 1


def hf_config(cfg: LukeConfig, num_labels: int | None = None, labels: list[str] | None = None):
    """transformers.LukeConfig of the exported model (l == L only)."""
    from transformers import LukeConfig as HFLukeConfig

    kw = {}
    if num_labels is not None:
        names = (
            labels
            if labels is not None and len(labels) == num_labels
            else [f"LABEL_{i}" for i in range(num_labels)]
        )
        kw = {"id2label": dict(enumerate(names)), "label2id": {n: i for i, n in enumerate(names)}}
    return HFLukeConfig(
        vocab_size=cfg.vocab_size,
        entity_vocab_size=cfg.entity_vocab_size,
        hidden_size=cfg.hidden_size,
        entity_emb_size=cfg.entity_emb_size,
        num_hidden_layers=cfg.num_hidden_layers,
        num_attention_heads=cfg.num_attention_heads,
        intermediate_size=cfg.intermediate_size,
        hidden_act=cfg.hidden_act,
        hidden_dropout_prob=cfg.hidden_dropout_prob,
        attention_probs_dropout_prob=cfg.attention_probs_dropout_prob,
        max_position_embeddings=cfg.max_position_embeddings + position_offset(cfg.pad_token_id),
        type_vocab_size=cfg.type_vocab_size,
        initializer_range=cfg.initializer_range,
        layer_norm_eps=cfg.layer_norm_eps,
        use_entity_aware_attention=True,
        pad_token_id=cfg.pad_token_id,
        bos_token_id=None,
        eos_token_id=None,
        tie_word_embeddings=True,
        **kw,
    )


def _encoder_to_hf(sd: dict[str, Tensor], cfg: LukeConfig) -> dict[str, Tensor]:
    """EntityAwareModel state dict -> HF LukeModel state dict (no prefix)."""
    off, P = position_offset(cfg.pad_token_id), cfg.max_position_embeddings
    out = {k: v.clone() for k, v in sd.items()}
    for key in (WORD_POS, ENTITY_POS):
        table = sd[key].new_zeros(P + off, sd[key].shape[1])
        if key == WORD_POS:
            table[off:] = sd[key]  # HF row p + off = our row p
        else:
            table[:P] = sd[key]  # entity positions are raw word indices in both
        out[key] = table
    return out


def _encoder_from_hf(sd: dict[str, Tensor], cfg: LukeConfig) -> dict[str, Tensor]:
    """HF LukeModel state dict (no prefix, pooler dropped) -> EntityAwareModel state dict."""
    off, P = position_offset(cfg.pad_token_id), cfg.max_position_embeddings
    out = {
        k: v.clone() for k, v in sd.items() if not k.startswith("pooler.") and not k.endswith("position_ids")
    }
    out[WORD_POS] = sd[WORD_POS][off : off + P].clone()
    out[ENTITY_POS] = sd[ENTITY_POS][:P].clone()
    return out


def to_hf_state_dict(model: nn.Module) -> dict[str, Tensor]:
    """Full HF state dict of LukeModel (EntityAwareModel), LukeForMaskedLM or LukeForEntitySpanClassification."""
    cfg = model.config
    if not cfg.hf_luke:
        raise RalmError(cfg.why_not_hf())
    if isinstance(model, EntityAwareModel):
        return _encoder_to_hf(model.state_dict(), cfg)
    enc = _encoder_to_hf(model.luke.state_dict(), cfg)
    out = {f"luke.{k}": v for k, v in enc.items()}
    for k, v in model.state_dict().items():
        if not k.startswith("luke."):
            out[k] = v.clone()
    if isinstance(model, LukeForPretraining):
        out["lm_head.decoder.weight"] = enc["embeddings.word_embeddings.weight"].clone()
        out["lm_head.decoder.bias"] = out["lm_head.bias"].clone()
        out["entity_predictions.decoder.weight"] = enc[ENTITY_TABLE].clone()
    return out


def _ralm_config_of(hc) -> LukeConfig:
    off = position_offset(hc.pad_token_id)
    return LukeConfig(
        vocab_size=hc.vocab_size,
        hidden_size=hc.hidden_size,
        entity_hidden_size=hc.hidden_size,
        entity_vocab_size=hc.entity_vocab_size,
        entity_emb_size=hc.entity_emb_size,
        num_hidden_layers=hc.num_hidden_layers,
        num_attention_heads=hc.num_attention_heads,
        intermediate_size=hc.intermediate_size,
        entity_intermediate_size=hc.intermediate_size,
        max_position_embeddings=hc.max_position_embeddings - off,
        type_vocab_size=hc.type_vocab_size,
        hidden_act=hc.hidden_act,
        layer_norm_eps=hc.layer_norm_eps,
        hidden_dropout_prob=hc.hidden_dropout_prob,
        attention_probs_dropout_prob=hc.attention_probs_dropout_prob,
        pad_token_id=hc.pad_token_id,
        initializer_range=hc.initializer_range,
        entity_attention="joint",  # Hugging Face's LukeModel: one softmax over words and entities
    )


def from_hf(hf_model: nn.Module) -> nn.Module:
    """The ralm model with the weights of an HF LukeModel / LukeForMaskedLM / LukeForEntitySpanClassification.

    The HF model must use entity-aware attention and its positions must fit the shift above.
    """
    hc = hf_model.config
    if not hc.use_entity_aware_attention:
        raise ValueError("from_hf: the HF model does not use entity-aware attention")
    cfg = _ralm_config_of(hc)
    name = type(hf_model).__name__
    sd = hf_model.state_dict()
    if name == "LukeModel":
        model: nn.Module = EntityAwareModel(cfg)
        model.load_state_dict(_encoder_from_hf(sd, cfg))
        return model
    enc = _encoder_from_hf({k[5:]: v for k, v in sd.items() if k.startswith("luke.")}, cfg)
    rest = {k: v.clone() for k, v in sd.items() if not k.startswith("luke.")}
    if name == "LukeForMaskedLM":
        model = LukeForPretraining(cfg)
        for k in ("lm_head.decoder.weight", "lm_head.decoder.bias", "entity_predictions.decoder.weight"):
            rest.pop(k)
    elif name == "LukeForEntitySpanClassification":
        model = LukeForSpanClassification(cfg, hc.num_labels)
    else:
        raise ValueError(f"from_hf: unsupported HF class {name}")
    model.load_state_dict({**{f"luke.{k}": v for k, v in enc.items()}, **rest})
    return model


def find_model_dir(run: str | os.PathLike) -> Path:
    """The ralm LUKE model directory of `run`: `run` itself or `run/model`; RalmError otherwise."""
    p = Path(run)
    if not p.exists():
        raise RalmError(f"{p}: no such run or model directory")
    if is_model_dir(p):
        return p
    if is_model_dir(p / "model"):
        return p / "model"
    if (p / "config.json").is_file():
        read_model_info(p)  # raises the precise reason (corrupt, foreign, invalid config)
    raise RalmError(
        f"{p}: neither a ralm LUKE model directory nor a run with one in model/; "
        "pass a `ralm luke pretrain` run directory or its model/"
    )


def _entity_vocab(run: Path, model_dir: Path) -> Path | None:
    from ralm.luke.vocab import VOCAB_FILE

    for cand in (run / VOCAB_FILE, model_dir / VOCAB_FILE, model_dir.parent / VOCAB_FILE):
        if cand.is_file():
            return cand
    return None


def _check_out(out: Path, overwrite: bool) -> None:
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        if not overwrite:
            raise RalmError(f"{out}: exists; choose another output directory or pass --overwrite")
        if not out.is_dir() or not (out / "config.json").is_file():
            raise RalmError(f"{out}: exists and is not an exported model; refusing to overwrite it")


def export_model(
    run: str | os.PathLike,
    out: str | os.PathLike,
    *,
    overwrite: bool = False,
    log: Callable[[str], None] = print,
) -> Path:
    """Write the run's model to `out` (HF LUKE for l == L, ralm's format for l < L); returns `out`."""
    from ralm.atomic import replace_dir

    run, out = Path(run), Path(out)
    model_dir = find_model_dir(run)
    _check_out(out, overwrite)
    info = read_model_info(model_dir)
    cfg: LukeConfig = info["config"]
    model = load_model(model_dir, cls=CLASSES[info["model_class"]])
    vocab_path = _entity_vocab(run, model_dir)
    vocab = None if vocab_path is None else _read_entity_vocab(vocab_path, cfg)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_sibling(out)
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        if cfg.hf_luke and not getattr(model, "words_only", False):
            _write_hf(model, tmp, info)
            what = f"Hugging Face LUKE ({HF_CLASS[type(model)]})"
            if isinstance(model, LukeForPretraining) and cfg.hidden_act != "gelu":
                log(
                    f"note: HF's LukeLMHead always uses gelu, this model's MLM head {cfg.hidden_act}; "
                    "LukeForMaskedLM logits will differ (LukeModel's outputs do not)"
                )
        else:
            save_model(model, tmp)  # ralm's own format, tokenizer files included
            what = "ralm's own format (config.json + model.safetensors; load with ralm.luke.io.load_model)"
            log(f"note: {cfg.why_not_hf()}; {out} holds ralm's own safetensors + config instead")
        if not any((tmp / f).is_file() for f in TOKENIZER_FILES):
            src = _tokenizer_dir(model_dir, info)
            if src is None:
                log(f"note: no word tokenizer files found for {model_dir}; copy them into {out} by hand")
            else:
                for f in TOKENIZER_FILES:
                    if (src / f).is_file():
                        shutil.copyfile(src / f, tmp / f)
        if vocab is not None:
            _write_entity_vocab(vocab, vocab_path, tmp)
        else:
            log(f"note: no entity_vocab.tsv beside {model_dir}; the export has no entity vocabulary")
        write_model_card(tmp, _card(out, run, model, cfg, what, vocab))
        prov = {"exported_from": str(model_dir.resolve()), "model_class": info["model_class"], "format": what}
        (tmp / "ralm_export.json").write_text(json.dumps(prov, indent=2) + "\n", encoding="utf-8")
        replace_dir(tmp, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    log(f"wrote {out}: {what}")
    return out


def _card(out: Path, run: Path, model: nn.Module, cfg: LukeConfig, what: str, vocab) -> str:
    """README.md model card of an export: what the model is, its sizes, how to load it."""
    ner = isinstance(model, LukeForSpanClassification)
    hf = cfg.hf_luke and not getattr(model, "words_only", False)
    cls = HF_CLASS[type(model)] if hf else type(model).__name__
    usage = (
        f'from transformers import {cls}, AutoTokenizer\n\nmodel = {cls}.from_pretrained("{out.name}")\n'
        f'tokenizer = AutoTokenizer.from_pretrained("{out.name}")'
        if hf
        else f'from ralm.luke.io import load_model\n\nmodel = load_model("{out.name}")'
    )
    return model_card(
        f"{out.name}: a LUKE-style entity-aware model trained with ralm",
        "A BERT-style encoder with entity embeddings and entity-aware self-attention (LUKE; DaLUKE's "
        "reduced entity dimension when l < L)"
        + (
            ", fine-tuned for named-entity recognition by span classification."
            if ner
            else ", pre-trained on masked words and masked entities."
        ),
        library_name="transformers" if hf else "ralm",
        pipeline_tag="token-classification" if ner else "fill-mask",
        tags=["ralm", "luke", "entity-aware"] + (["ner"] if ner else []),
        details={
            "trained by": f"ralm (run `{run.name}`)",
            "format": what,
            "hidden size L / entity size l": f"{cfg.hidden_size} / {cfg.entity_hidden_size}",
            "entity vocabulary": "none" if vocab is None else f"{len(vocab)} entities",
        },
        usage=usage,
    )


def _tokenizer_dir(model_dir: Path, info: dict) -> Path | None:
    for cand in (model_dir, (info.get("extra") or {}).get("backbone")):
        if cand and (Path(cand) / "tokenizer_config.json").is_file():
            return Path(cand)
    return None


def _write_hf(model: nn.Module, tmp: Path, info: dict) -> None:
    cfg: LukeConfig = model.config
    tmp.mkdir(parents=True)
    labels = None
    if isinstance(model, LukeForSpanClassification):
        extra = info.get("extra") or {}
        # the label names, index-aligned with the classifier ("classes" as `ralm luke ner` saves them)
        names = extra.get("classes", extra.get("labels"))
        labels = names if isinstance(names, list) else None
        hc = hf_config(cfg, model.num_labels, [str(x) for x in labels] if labels else None)
    else:
        hc = hf_config(cfg)
    hc.architectures = [HF_CLASS[type(model)]]
    with torch.no_grad():
        tensors = {k: v.detach().to("cpu").contiguous() for k, v in to_hf_state_dict(model).items()}
    write_safetensors(tensors, tmp / "model.safetensors")
    hc.to_json_file(str(tmp / "config.json"))


def _read_entity_vocab(path: Path, cfg: LukeConfig):
    from ralm.luke.vocab import EntityVocabulary

    vocab = EntityVocabulary.load(path)
    if len(vocab) != cfg.entity_vocab_size:
        raise RalmError(
            f"{path}: {len(vocab)} entities, but the model's entity table has {cfg.entity_vocab_size} rows; "
            "the vocabulary belongs to another run"
        )
    return vocab


def _write_entity_vocab(vocab, path: Path, tmp: Path) -> None:
    from ralm.luke.vocab import VOCAB_FILE

    ids = {vocab.title(i): i for i in range(len(vocab))}  # [PAD], [UNK], [MASK] first
    (tmp / "entity_vocab.json").write_text(
        json.dumps(ids, ensure_ascii=False, indent=0) + "\n", encoding="utf-8"
    )
    shutil.copyfile(path, tmp / VOCAB_FILE)
