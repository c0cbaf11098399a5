"""Importing ralm's BM25 leaves JAX (which bm25s imports where installed) allocating GPU memory on
demand instead of reserving 75% of the card, and keeps a value the user set."""

import os
import subprocess
import sys

CODE = "import os, ralm.retrieval.bm25; print(os.environ.get('XLA_PYTHON_CLIENT_PREALLOCATE'))"


def _run(env: dict) -> str:
    out = subprocess.run([sys.executable, "-c", CODE], env=env, capture_output=True, text=True, check=True)
    return out.stdout.strip()


def test_bm25_import_turns_off_xla_preallocation():
    env = {k: v for k, v in os.environ.items() if k != "XLA_PYTHON_CLIENT_PREALLOCATE"}
    assert _run(env) == "false"


def test_a_users_setting_stays():
    assert _run({**os.environ, "XLA_PYTHON_CLIENT_PREALLOCATE": "true"}) == "true"
