"""Retrieval: corpus embedding, dense/compressed/sharded indexes, BM25 and dense recall, trained retrievers."""
