"""Fault injection and fuzzing of the `ralm` CLI (`faults.py` and its parts)."""
