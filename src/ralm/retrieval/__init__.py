"""Retrieval over a DocStore: dual encoders, FAISS indexes, BM25, ICT warm start, evaluation.

The top level holds what a search needs (encoders and towers, embedding, BM25 and its analysis,
hybrid fusion, late interaction, `Retriever`, `search`); three subpackages hold the rest:

    training/  `ralm retriever train` (DPR, contrastive, ICT), hard negatives, dev evaluation
    index/     FAISS indexes, index directories, shards and distributed search
    eval/      `ralm eval-retrieval`, rank measures, retriever comparisons

Modules moved into the subpackages keep their old import paths (`ralm.retrieval.train_data`,
`ralm.retrieval.index_io`, ...) for one release: importing one warns (DeprecationWarning) and
returns the module at its new path.
"""

import os as _os

# bm25s (BM25, stopword lists) imports JAX where it is installed and runs a top-k at import: on a GPU
# machine XLA then reserves 75% of the GPU's memory in every ralm process that touches BM25, and
# the PyTorch models beside it run out of memory (seen on an H200: XLA held 105 GiB and a Gemma-3
# DPR run could not move its towers onto the card). ralm never uses bm25s's JAX path, so JAX here
# allocates on demand; a value the user set stays.
_os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")


# ----------------------------------------------------------------------------- old module paths
import importlib as _importlib
import importlib.abc as _abc
import importlib.util as _util
import sys as _sys
import warnings as _warnings

MOVED = {
    "retriever_train": "training.recipes",
    "train_batches": "training.batches",
    "train_cli": "training.cli",
    "train_data": "training.data",
    "train_run": "training.run",
    "negatives": "training.negatives",
    "contrastive": "training.contrastive",
    "dev_eval": "training.dev_eval",
    "views": "training.views",
    "ict": "training.ict",
    "index_build": "index.build",
    "index_cli": "index.cli",
    "index_dir": "index.directory",
    "index_faiss": "index.kinds",
    "index_io": "index.io",
    "index_plan": "index.plan",
    "shard_build": "index.shard_build",
    "shard_merge": "index.shard_merge",
    "sharded": "index.sharded",
    "dist_search": "index.dist_search",
    "evaluate": "eval.evaluate",
    "eval_cli": "eval.cli",
    "measures": "eval.measures",
    "compare": "eval.compare",
}


class _MovedLoader(_abc.Loader):
    """Gives the module at its new path for an old one (the same module object, not a copy)."""

    def __init__(self, new: str) -> None:
        self.new = new

    def create_module(self, spec):  # noqa: ANN001
        _warnings.warn(
            f"{spec.name} moved to {self.new}; the old path goes in the next release",
            DeprecationWarning,
            stacklevel=2,
        )
        return _importlib.import_module(self.new)

    def exec_module(self, module) -> None:  # noqa: ANN001
        pass


class _MovedFinder(_abc.MetaPathFinder):
    def find_spec(self, fullname: str, path=None, target=None):  # noqa: ANN001
        prefix, _, leaf = fullname.rpartition(".")
        if prefix != __name__ or leaf not in MOVED:
            return None
        return _util.spec_from_loader(fullname, _MovedLoader(f"{__name__}.{MOVED[leaf]}"))


if not any(isinstance(f, _MovedFinder) for f in _sys.meta_path):
    _sys.meta_path.append(_MovedFinder())
