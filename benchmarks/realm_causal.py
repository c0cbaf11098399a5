"""REALM/BRENT with a causal-LM reader (issue 35): Norwegian with Gemma-3-270M, English with SmolLM2-135M.

Stages (each skipped when its output exists in --work; training runs resume):

  towers   the NorQuAD pool and the unsupervised Norwegian DocStore (NorQuAD passages + Norwegian Debian
           text, 128 MiniLM tokens a chunk, as `retriever_train.py` builds them) and the best NorQuAD
           DPR encoder of `retriever_train.py` (dpr-cc: `ralm retriever train contrastive` on the
           unsupervised text, then `dpr` on NorQuAD train from it, batch 64 through gradient caching)

Run: python benchmarks/realm_causal.py towers [--work runs/b35]
Reads ../shared/data/norquad by path.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

ROOT = HERE.parent


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def towers(work: Path) -> Path:
    """The dpr-cc encoder of retriever_train.py (same corpus, settings and order); returns its directory."""
    from retriever_train import NORQUAD, build_stores, ralm

    pool, unsup = build_stores(work)
    contrastive = work / "contrastive"
    if not (contrastive / "results.json").is_file():
        ralm(
            "retriever", "train", "contrastive", unsup, "--out", contrastive, "--lang", "nb",
            "--steps", 600, "--batch-size", 64, "--lr", 5e-5, "--quiet",
        )  # fmt: skip
    out = work / "dpr-cc"
    if not (out / "results.json").is_file():
        ralm(
            "retriever", "train", "dpr", NORQUAD / "training_dataset_flattened.reconstructed.json",
            "--corpus", pool, "--dev", NORQUAD / "validation_dataset_flattened.json", "--lang", "nb",
            "--quiet", "--encoder", contrastive / "encoder", "--epochs", 4, "--batch-size", 64,
            "--grad-cache", 32, "--lr", 3e-5, "--out", out,
        )  # fmt: skip
    return out / "encoder"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("stage", choices=["towers"])
    ap.add_argument("--work", type=Path, default=ROOT / "runs" / "b35")
    args = ap.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    if args.stage == "towers":
        log(f"towers: {towers(args.work)}")


if __name__ == "__main__":
    main()
