"""Retrieval over a DocStore: dual encoders, FAISS indexes, BM25, ICT warm start, evaluation."""
