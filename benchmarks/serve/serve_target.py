"""Targets for the `ralm serve` benchmarks: the `make demo` REALM run, or one built to stand in.

DEFAULT_TARGET         runs/demo/realm (`make demo`)
build_demo_like(work)  the same shape without `make demo`'s 200 steps: the enwiki sample in
                       64-token chunks (12,285 chunks), MiniLM reader and towers, configs/demo.toml
                       at 2 steps (what serving costs depends on the model and corpus sizes, not on
                       how well it was trained)
build_small_realm(work) a random 2-layer BERT (hidden 64) on 40 articles, 2 steps (screenshots, quick runs)
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DEFAULT_TARGET = Path("runs/demo/realm")


def build_demo_like(work: Path) -> Path:
    """`make demo`'s REALM run at 2 steps under `work` (reused when there; see the module docstring)."""
    run = work / "demo-realm"
    if (run / "checkpoints").is_dir() and any((run / "checkpoints").iterdir()):
        return run
    work.mkdir(parents=True, exist_ok=True)
    corpus = work / "demo-corpus"
    ralm = [sys.executable, "-m", "ralm"]
    if not (corpus / "manifest.json").is_file():
        subprocess.run(
            [
                *ralm,
                "corpus",
                "build",
                "--sample",
                "enwiki",
                "--out",
                str(corpus),
                "--chunk-size",
                "64",
                "--overwrite",
            ],
            check=True,
        )
    subprocess.run(
        [
            *ralm,
            "pretrain",
            str(REPO / "configs/demo.toml"),
            "--docstore",
            str(corpus),
            "--out",
            str(run),
            "--steps",
            "2",
            "--warmup-steps",
            "1",
            "--refresh-every",
            "0",
            "--checkpoint-every",
            "0",
            "--heldout",
            "10",
            "--device",
            "cpu",
            "--overwrite",
            "--quiet",
        ],
        check=True,
    )
    return run


def tiny_bert(out: Path) -> Path:
    """A random 2-layer BERT (hidden 64) on the bundled MiniLM's vocabulary (tests/conftest.py's)."""
    import shutil

    import torch
    from transformers import BertConfig, BertModel

    from ralm.models.names import default_backbone_path

    if (out / "config.json").is_file():
        return out
    torch.manual_seed(0)
    cfg = BertConfig(
        vocab_size=30522,
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=128,
        max_position_embeddings=256,
    )
    BertModel(cfg, add_pooling_layer=False).save_pretrained(out)
    src = default_backbone_path()
    for f in ("vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        shutil.copy(src / f, out / f)
    return out


def build_small_realm(work: Path, articles: int = 40) -> Path:
    """A REALM run under `work` (reused when there): the first `articles` articles of the English
    sample in 64-token chunks, a random tiny BERT as reader and towers, 2 steps."""
    import torch

    from ralm.corpus.build import BuildConfig, build_docstore
    from ralm.realm.config import PretrainConfig
    from ralm.realm.trainer import pretrain
    from ralm.samples import sample_path

    run = work / "realm"
    if (run / "checkpoints").is_dir() and any((run / "checkpoints").iterdir()):
        return run
    work.mkdir(parents=True, exist_ok=True)
    bert = tiny_bert(work / "tiny-bert")
    store = work / "corpus"
    if not (store / "manifest.json").is_file():
        build_docstore(
            [sample_path("enwiki")],
            store,
            BuildConfig(chunk_size=64, tokenizer=str(bert), max_articles=articles),
            overwrite=True,
            progress=False,
            log=lambda m: None,
        )
    torch.manual_seed(0)
    cfg = PretrainConfig(
        docstore=str(store),
        out=str(run),
        reader=str(bert),
        steps=2,
        batch_size=2,
        k=4,
        encoder_max_length=64,
        reader_max_length=160,
        heldout=2,
        refresh_every=0,
        checkpoint_every=0,
        warmup_steps=1,
        device="cpu",
        autocast="off",
        tensorboard=False,
    )
    return pretrain(cfg, progress=False)
