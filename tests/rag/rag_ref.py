"""Helpers of the RAG tests: a ChatML byte-level BPE, a run killed at a checkpoint."""

from __future__ import annotations


def chat_tokenizer():
    """testkit.chatml_tokenizer trained on a few English and Scandinavian sentences."""
    from testkit import chatml_tokenizer

    text = [
        "Answer the question with a short answer, using the passages. Passage 1: Question:",
        "Abraham Lincoln was the 16th president of the United States.",
        "Oslo er hovedstaden i Norge. Det bor mange mennesker der.",
        "København er Danmarks hovedstad og største by.",
    ] * 20
    return chatml_tokenizer(text)


def sigkill_at_checkpoint(argv: list[str], out, step: int = 10, timeout: float = 120.0) -> None:
    """Run `ralm ARGV` (one torch thread) in a child process and SIGKILL it as soon as its run folder
    `out` holds checkpoints/step-STEP; AssertionError when the run ends (or times out) first."""
    import os
    import signal
    import subprocess
    import sys
    import time
    from pathlib import Path

    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join(sys.path)}
    code = (
        "import sys, torch; torch.set_num_threads(1); from ralm.cli import main; sys.exit(main(sys.argv[1:]))"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code, *map(str, argv)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    ckpt = Path(out) / "checkpoints" / f"step-{step:07d}"
    deadline = time.monotonic() + timeout
    while not ckpt.is_dir():
        assert proc.poll() is None and time.monotonic() < deadline, f"the run ended before {ckpt.name}"
        time.sleep(0.002)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
