"""ralm: retrieval-augmented and knowledge-enhanced language models in PyTorch."""

__version__ = "0.1.0"
