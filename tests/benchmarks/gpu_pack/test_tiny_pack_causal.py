"""benchmarks/gpu/gpu_pack.py end to end at toy scale (--tiny) on the CPU: the causal REALM stages
(SmolLM2 and Gemma-3 themselves, the longest)."""

from __future__ import annotations

from pathlib import Path

from tests.benchmarks.gpu_pack.tiny_pack import run_tiny_pack


def test_tiny_pack_causal_stages(tmp_path: Path) -> None:
    run_tiny_pack(tmp_path, ["causal_en", "causal_nb"], also_prep=("brent_en",))  # causal_en reads its corpus
