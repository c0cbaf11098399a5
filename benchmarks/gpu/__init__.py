"""The GPU evidence pack (issue 38): `gpu_pack.py` and its stages (`stages/`)."""
