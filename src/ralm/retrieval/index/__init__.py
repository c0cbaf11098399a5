"""Indexes over chunk embeddings: FAISS MIPS, index directories, shards, distributed search.

dense        DenseIndex: one FAISS index whose row i is chunk i (flat, ivf, hnsw, sq*, ivf-pq)
kinds        the FAISS index kinds and their parameters
plan         which kind fits a corpus (auto_kind, memory estimates)
io           saving and loading index files and manifests
directory    `ralm index build`'s folder: encoder, embeddings, index, BM25, manifest; read_index_dir
build        building that folder from a DocStore and an encoder
open         its dense side for search (DenseSearcher, open_dense); the whole folder opens
             through ralm.retrieval.searchers and ralm.Retriever
sharded      ShardedIndex: contiguous chunk ranges, one DenseIndex each
shard_build  building shards on many hosts; shard_merge: merging their top-k lists
dist_search  searching shards held by several processes
cli          the `ralm index` commands
"""
