"""benchmarks/gpu/gpu_pack.py end to end at toy scale (--tiny) on the CPU: every stage but the causal
REALM ones (tests/benchmarks/gpu_pack/test_tiny_pack_causal.py); together the two files run every stage in ORDER."""

from __future__ import annotations

from pathlib import Path

from tests.benchmarks.gpu_pack.tiny_pack import run_tiny_pack


def test_tiny_pack_other_stages(tmp_path: Path) -> None:
    from benchmarks.gpu.stages import ORDER

    rest = [s for s in ORDER if s not in ("causal_en", "causal_nb")]
    assert rest == ["brent_en", "surealm", "serve", "luke"]  # a new stage joins one of the two files
    run_tiny_pack(tmp_path, rest)
