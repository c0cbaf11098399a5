"""Stages of the GPU evidence pack (benchmarks/gpu/gpu_pack.py), in priority order; see context.py."""

ORDER = ("brent_en", "causal_en", "causal_nb", "surealm", "serve", "luke")
