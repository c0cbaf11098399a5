"""Corpus ingestion: `ralm corpus build` throughput, memory and chunking speed."""
