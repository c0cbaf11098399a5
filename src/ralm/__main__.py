"""`python -m ralm` is the same as the `ralm` console script (and what torchrun launches)."""

from ralm.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
