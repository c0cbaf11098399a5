"""Targets for the `ralm serve` benchmarks: the `make demo` REALM run, or one built to stand in.

DEFAULT_TARGET         runs/demo/realm (`make demo`)
build_demo_like(work)  the same shape without `make demo`'s 200 steps: the enwiki sample in
                       64-token chunks (12,285 chunks), MiniLM reader and towers, configs/demo.toml
                       at 2 steps (what serving costs depends on the model and corpus sizes, not on
                       how well it was trained)
build_small_realm(work) a random 2-layer BERT (hidden 64) on 40 articles, 2 steps (screenshots, quick runs)
"""

from __future__ import annotations

from pathlib import Path

from benchmarks.common import ROOT, ralm, sample_store, tiny_bert

DEFAULT_TARGET = Path("runs/demo/realm")


def build_demo_like(work: Path) -> Path:
    """`make demo`'s REALM run at 2 steps under `work` (reused when there; see the module docstring)."""
    run = work / "demo-realm"
    if (run / "checkpoints").is_dir() and any((run / "checkpoints").iterdir()):
        return run
    work.mkdir(parents=True, exist_ok=True)
    corpus = sample_store(work / "demo-corpus", "--chunk-size", 64, "--overwrite")
    ralm("pretrain", *demo_like_args(corpus, run), say=None)
    return run


def demo_like_args(corpus: Path, out: Path, device: str = "cpu") -> list:
    """`ralm pretrain`'s arguments for `make demo`'s REALM run at 2 steps (configs/demo.toml) on
    `corpus` into `out`, on `device`."""
    return [
        ROOT / "configs" / "demo.toml",
        "--docstore",
        corpus,
        "--out",
        out,
        "--steps",
        2,
        "--warmup-steps",
        1,
        "--refresh-every",
        0,
        "--checkpoint-every",
        0,
        "--heldout",
        10,
        "--device",
        device,
        "--overwrite",
        "--quiet",
    ]


def build_small_realm(work: Path, articles: int = 40) -> Path:
    """A REALM run under `work` (reused when there): the first `articles` articles of the English
    sample in 64-token chunks, a random tiny BERT as reader and towers, 2 steps."""
    import torch

    from ralm.corpus.build import BuildConfig, build_docstore
    from ralm.realm.config import PretrainConfig
    from ralm.realm.training.trainer import pretrain
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
