"""LUKE / DaLUKE: entity-aware self-attention over word and entity tokens (being built)."""
