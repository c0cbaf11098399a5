"""Retrieval over a DocStore: dual encoders, FAISS indexes, BM25, ICT warm start, evaluation.

The top level holds what a search needs (encoders and towers, embedding, BM25 and its analysis,
hybrid fusion, late interaction, `Retriever`, `search`); three subpackages hold the rest:

    training/  `ralm retriever train` (DPR, contrastive, ICT), hard negatives, dev evaluation
    index/     FAISS indexes, index directories, shards and distributed search
    eval/      `ralm eval-retrieval`, rank measures, retriever comparisons
"""

import os as _os

# bm25s (BM25, stopword lists) imports JAX where it is installed and runs a top-k at import: on a GPU
# machine XLA then reserves 75% of the GPU's memory in every ralm process that touches BM25, and
# the PyTorch models beside it run out of memory (seen on an H200: XLA held 105 GiB and a Gemma-3
# DPR run could not move its towers onto the card). ralm never uses bm25s's JAX path, so JAX here
# allocates on demand; a value the user set stays.
_os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
