"""What SUREALM's model settings take, without importing torch (the CLI parser reads them)."""

from __future__ import annotations

__all__ = ["DEFAULT_PATHWAY", "NEIGHBOURS", "PATHWAYS"]

PATHWAYS = ("cross", "self")
# The one default of `pathway`, read by SurealmConfig, `TrainConfig` and `ralm surealm train`: the
# gated cross-attention starts inert, so a model starts as its backbone. A config saved before the
# cross pathway existed has no `pathway` and is "self" (`SurealmConfig.from_dict`).
DEFAULT_PATHWAY = "cross"
NEIGHBOURS = ("retrieved", "random", "null")
