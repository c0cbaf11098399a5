"""Every command that prints exits quietly when its reader closes the pipe (`| head -1`)."""

from __future__ import annotations

import subprocess
import sys


def test_closed_pipe_gives_no_traceback(tmp_path):
    """`ralm ... | head -1`, with the reader gone before the writer's first flush."""
    text = tmp_path / "t.txt"
    text.write_text("".join(f"linje {i} med tekst og flere ord\\n" for i in range(20000)), encoding="utf-8")
    arpa = tmp_path / "t.arpa"
    subprocess.run(
        [sys.executable, "-m", "ralm.cli", "ngram", "train", str(text), "--out", str(arpa)],
        check=True,
        capture_output=True,
    )
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys; from ralm.cli import main; sys.exit(main(sys.argv[1:]))",
            "ngram",
            "score",
            str(arpa),
            str(text),
            "--per-sentence",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    proc.stdout.readline()
    proc.stdout.close()  # the reader leaves, as `head -1` does
    err = proc.stderr.read().decode()
    code = proc.wait()
    assert "Traceback" not in err and "BrokenPipeError" not in err
    assert code == 141
