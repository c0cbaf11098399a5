"""Export a run's reader (and retriever) as ordinary Hugging Face directories.

BRENT §4 extracts the reader after retrieval-augmented pre-training and fine-tunes it as a plain
LM. `export_reader(run, out)` writes a directory that `AutoModelForMaskedLM.from_pretrained` (and
`AutoTokenizer`) load, with safetensors weights, giving the same logits as the reader inside the
run; for a causal reader, `AutoModelForCausalLM` (LoRA adapters merged), which `ralm rag --lm` takes. `export_retriever(run, out)` writes the two towers as a `DualEncoder` directory (``query/``
and ``doc/`` are themselves Hugging Face / sentence-transformers model directories), which
`ralm index build --encoder`, `ralm search` and `ralm pretrain --retriever` take as they are.
Both write into a temporary directory first and rename it into place, with a model card
(README.md with the Hub's YAML header: `ralm.model_card`) saying what the model is and how to load it.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from ralm.atomic import replace_dir, temp_sibling
from ralm.errors import RalmError
from ralm.model_card import model_card, write_model_card
from ralm.models.quiet import quiet_transformers
from ralm.realm.training.run import LoadedRun

__all__ = ["export_reader", "export_retriever"]

_TAGS = ["ralm", "realm", "brent", "retrieval-augmented"]
_MINILM = "sentence-transformers/all-MiniLM-L6-v2"  # the Hub id of the bundled default backbone


_HUB_IDS = {
    None: _MINILM,
    "minilm": _MINILM,
    "smollm2": "HuggingFaceTB/SmolLM2-135M-Instruct",
    "gemma3": "google/gemma-3-270m",
}


def _base_model(path: str | None) -> str | None:
    """The Hub id of a run's backbone when it is a bundled one (a local path is no Hub id)."""
    return _HUB_IDS.get(path)


def _details(run: LoadedRun) -> dict[str, str]:
    cfg = run.cfg
    return {
        "trained by": "ralm `pretrain`",
        "mode": f"{cfg.mode} ({'retrieve-then-predict' if cfg.mode == 'realm' else 'masked LM only, no retrieval'})",
        "step": str(run.state.get("step")),
        "corpus": f"`{Path(cfg.docstore).name}` ({len(run.store)} chunks)",
        "backbone": f"`{cfg.reader or 'minilm'}`",
        "masking": cfg.masking.strategy,
    }


def _reader_card(run: LoadedRun, out: Path) -> str:
    return model_card(
        f"{out.name}: a REALM/BRENT reader",
        "The reader (a BERT-style masked LM) extracted from a retrieval-augmented pre-training run made "
        "with ralm, as BRENT does before fine-tuning it without retrieval. It predicts masked tokens from "
        "its input alone; inside the run it read retrieved passages beside the input.",
        library_name="transformers",
        pipeline_tag="fill-mask",
        tags=_TAGS,
        base_model=_base_model(run.cfg.reader),
        details=_details(run),
        usage=f"""
from transformers import AutoModelForMaskedLM, AutoTokenizer

tokenizer = AutoTokenizer.from_pretrained("{out.name}")
model = AutoModelForMaskedLM.from_pretrained("{out.name}")
""",
    )


def _causal_reader_card(run: LoadedRun, out: Path) -> str:
    terms = (
        " Gemma-3 weights: the Gemma Terms of Use apply (not an OSI licence)."
        if run.cfg.reader == "gemma3"
        else ""
    )
    return model_card(
        f"{out.name}: a REALM/BRENT causal reader",
        "A causal LM extracted from a retrieval-augmented pre-training run made with ralm: inside the run "
        "it generated masked spans of a text after a retrieved passage (REALM's marginal likelihood over the "
        "retrieved passages trained it and the retriever). On its own it is an ordinary causal LM; "
        f"`ralm rag --lm` takes this directory as the generator.{terms}",
        library_name="transformers",
        pipeline_tag="text-generation",
        tags=[*_TAGS, "causal-lm"],
        base_model=_base_model(run.cfg.reader),
        details=_details(run),
        usage=f"""
from transformers import AutoModelForCausalLM, AutoTokenizer

tokenizer = AutoTokenizer.from_pretrained("{out.name}")
model = AutoModelForCausalLM.from_pretrained("{out.name}")
""",
    )


def _retriever_card(run: LoadedRun, out: Path) -> str:
    return model_card(
        f"{out.name}: a REALM/BRENT retriever",
        "The query and document towers of a retrieval-augmented pre-training run made with ralm (a dual "
        "encoder: score = query vector . document vector). `query/` and `doc/` are each a Hugging Face "
        "and sentence-transformers model directory; ralm takes the whole directory "
        "(`ralm index build --encoder`, `ralm pretrain --retriever`).",
        library_name="sentence-transformers",
        pipeline_tag="sentence-similarity",
        tags=[*_TAGS, "dense-retrieval"],
        base_model=_base_model(run.cfg.retriever or run.cfg.reader),
        details=_details(run),
        usage=f"""
from sentence_transformers import SentenceTransformer

queries = SentenceTransformer("{out.name}/query")
docs = SentenceTransformer("{out.name}/doc")
scores = queries.encode(["a question"]) @ docs.encode(["a passage"]).T
""",
    )


def _check_out(out: Path, overwrite: bool) -> None:
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        if not overwrite:
            raise RalmError(f"{out}: exists; choose another output directory or pass --overwrite")
        if out.is_dir() and not (out / "config.json").is_file() and not (out / "ralm_encoder.json").is_file():
            raise RalmError(f"{out}: exists and is not an exported model; refusing to overwrite it")


def export_reader(run: LoadedRun, out: str | os.PathLike, *, overwrite: bool = False) -> Path:
    """Write the reader as an AutoModelForMaskedLM directory at `out` (with a model card), or, for a
    causal reader, as an AutoModelForCausalLM directory (LoRA adapters merged); returns it."""
    out = Path(out)
    _check_out(out, overwrite)
    if run.model.causal:
        from ralm.models.lora import merge_lora
        from ralm.models.save import save_causal_lm

        lm = merge_lora(run.model.reader.lm)
        with quiet_transformers():
            saved = save_causal_lm(lm, run.model.reader.tokenizer, out, card=_causal_reader_card(run, out))
        info = {
            "exported_from": str(Path(run.cfg.out).resolve()),
            "checkpoint": run.checkpoint.name,
            "step": run.state.get("step"),
            "mode": run.cfg.mode,
            "reader_kind": "causal",
        }
        (saved / "ralm_export.json").write_text(json.dumps(info, indent=2) + "\n", encoding="utf-8")
        return saved
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_sibling(out)
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        mlm = run.model.reader.mlm
        with quiet_transformers():
            mlm.save_pretrained(str(tmp), safe_serialization=True)
            run.tokenizer.save_pretrained(str(tmp))
        info = {
            "exported_from": str(Path(run.cfg.out).resolve()),
            "checkpoint": run.checkpoint.name,
            "step": run.state.get("step"),
            "mode": run.cfg.mode,
        }
        (tmp / "ralm_export.json").write_text(json.dumps(info, indent=2) + "\n", encoding="utf-8")
        write_model_card(tmp, _reader_card(run, out))
        replace_dir(tmp, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def export_retriever(run: LoadedRun, out: str | os.PathLike, *, overwrite: bool = False) -> Path:
    """Write the query and document towers as a saved `DualEncoder` at `out` (with a model card); returns it."""
    if run.model.encoder is None:
        raise RalmError(f"{run.cfg.out}: an MLM-only run has no retriever to export")
    out = Path(out)
    _check_out(out, overwrite)
    if out.exists() and overwrite:
        shutil.rmtree(out)
    saved = run.model.encoder.save(out)
    write_model_card(saved, _retriever_card(run, out))
    return saved
