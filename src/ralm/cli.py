"""The `ralm` command: one entry point; each subcommand is a thin call into the library.

Subpackages register their own subcommands through a `register(subparsers)` function in
their `cli.py`; each registered parser sets `func(args) -> int`. A `RalmError` raised
anywhere ends with one `ralm: error: ...` line on stderr and exit code 2.
"""

from __future__ import annotations

import argparse
import os
import sys

from ralm import __version__
from ralm.errors import RalmError


def build_parser() -> argparse.ArgumentParser:
    """The full argument parser, with every subcommand registered."""
    parser = argparse.ArgumentParser(
        prog="ralm",
        description="Retrieval-augmented and knowledge-enhanced language models: corpora, "
        "retrievers, REALM/BRENT pre-training, SUREALM, DaLUKE and the classic LM baselines.",
    )
    parser.add_argument("--version", action="version", version=f"ralm {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    from ralm.corpus import cli as corpus_cli

    corpus_cli.register(sub)
    from ralm.retrieval import cli as retrieval_cli

    retrieval_cli.register(sub)
    from ralm.realm import cli as realm_cli

    realm_cli.register(sub)
    from ralm.surealm import cli as surealm_cli

    surealm_cli.register(sub)
    from ralm.tasks import cli as tasks_cli

    tasks_cli.register(sub)
    from ralm.frozen import cli as frozen_cli

    frozen_cli.register(sub)
    from ralm.luke import cli as luke_cli

    luke_cli.register(sub)
    from ralm.serve import cli as serve_cli

    serve_cli.register(sub)
    from ralm.rag import cli as rag_cli

    rag_cli.register(sub)
    from ralm.worlds import cli as worlds_cli

    worlds_cli.register(sub)
    try:  # the lecture's LMs; optional while that subpackage is being built
        from ralm.lm import cli as lm_cli
    except ImportError:
        lm_cli = None
    if lm_cli is not None:
        lm_cli.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; returns the process exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)  # what a relaunch (torchrun) repeats
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except RalmError as exc:
        print(f"ralm: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("ralm: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `ralm corpus show ... | head -1`: the reader left; stop quietly
        _silence_stdout()
        return 141  # 128 + SIGPIPE, what a shell reports for a writer whose pipe closed
    except Exception as exc:
        full = disk_full(exc)
        if full is None:
            raise
        print(f"ralm: error: {full}", file=sys.stderr)
        return 2


def disk_full(exc: BaseException) -> str | None:
    """One line for a full disk or quota anywhere in `exc`'s chain (an OSError with ENOSPC/EDQUOT,
    or a library error that wraps one in its message, as safetensors does), else None."""
    import errno

    from ralm.errors import exception_chain

    for e in exception_chain(exc):
        text = str(e)
        if isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EDQUOT):
            where = f" writing {e.filename}" if e.filename else ""
            what = "no space left on device" if e.errno == errno.ENOSPC else "disk quota exceeded"
            return f"{what}{where}; free space and rerun (an interrupted build resumes or leaves the old one intact)"
        if "No space left on device" in text or "os error 28" in text or "Disk quota exceeded" in text:
            return (
                f"no space left on device ({type(e).__name__}); free space and rerun "
                "(an interrupted build resumes or leaves the old one intact)"
            )
    return None


def _silence_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's final flush does not raise again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):
        pass


if __name__ == "__main__":
    raise SystemExit(main())
