"""LUKE / DaLUKE: entity-aware self-attention, pre-training on a DocStore, NER by span
classification, Hugging Face export."""
