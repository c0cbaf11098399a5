"""REALM/BRENT retrieval-augmented language-model pre-training: masking (salient spans) and batching."""

from ralm.realm.masking import (
    BERT_REPLACE,
    MaskedExample,
    MaskingCollator,
    MaskingConfig,
    eligible_ids,
    mask_example,
    sample_span_lengths,
    span_length_pmf,
)

__all__ = [
    "BERT_REPLACE",
    "MaskedExample",
    "MaskingCollator",
    "MaskingConfig",
    "eligible_ids",
    "mask_example",
    "sample_span_lengths",
    "span_length_pmf",
]
