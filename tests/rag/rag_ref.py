"""Helpers of the RAG tests: a byte-level BPE with ChatML special tokens and template."""

from __future__ import annotations

CHATML = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def chat_tokenizer():
    """Byte-level BPE with <|im_start|>/<|im_end|> and a ChatML template (SmolLM2's layout)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    text = [
        "Answer the question with a short answer, using the passages. Passage 1: Question:",
        "Abraham Lincoln was the 16th president of the United States.",
        "Oslo er hovedstaden i Norge. Det bor mange mennesker der.",
        "København er Danmarks hovedstad og største by.",
    ] * 20
    tok.train_from_iterator(
        text,
        trainers.BpeTrainer(
            vocab_size=300,
            special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        ),
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|im_end|>",
        bos_token="<|im_start|>",
        chat_template=CHATML,
    )


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
