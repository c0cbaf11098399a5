"""REALM's trivial retrieval has one rule on every path: a query made from a chunk of the knowledge
corpus never retrieves that chunk; a query from another DocStore (`queries = ...`) excludes nothing,
since its chunk ids are not the corpus's (issue 64: the evaluation paths used to exclude the corpus
chunk whose id equalled the query's, which in a query store aligned to the corpus is the right one)."""

from __future__ import annotations

import numpy as np
import pytest
from tests.realm.conftest import ONE_STEP

from ralm.realm.modeling.candidates import TrivialExclusion, queries_are_corpus, trivial_ids
from testkit import linked_jsonl, quiet_store

pytestmark = pytest.mark.usefixtures("one_thread")


def test_trivial_ids_keep_own_chunks_only_for_the_corpus_itself():
    assert trivial_ids(np.array([4, 9]), True).tolist() == [4, 9]
    assert trivial_ids(np.array([4, 9]), False).tolist() == [-1, -1]
    assert trivial_ids(np.array([4, 9]), False).dtype == np.int64


def test_trivial_exclusion_passes_mapped_ids_and_query_ids():
    seen = []

    def dense(q, src, k):
        seen.append(("dense", src.tolist(), k))
        return np.zeros((len(q), k), dtype=np.int64)

    class Hybrid:
        wants_query_ids = True

        def __call__(self, q, src, k, query_ids=None):
            seen.append(("hybrid", src.tolist(), query_ids.tolist()))
            return np.zeros((len(q), k), dtype=np.int64)

    q = np.zeros((2, 3), dtype=np.float32)
    TrivialExclusion(dense, same_corpus=False)(q, np.array([1, 2]), 2)
    TrivialExclusion(dense, same_corpus=True)(q, np.array([1, 2]), 2)
    hybrid = TrivialExclusion(Hybrid(), same_corpus=False)
    assert hybrid.wants_query_ids
    hybrid(q, np.array([5, 6]), 2, query_ids=np.array([[7], [8]]))
    assert seen == [("dense", [-1, -1], 2), ("dense", [1, 2], 2), ("hybrid", [-1, -1], [[7], [8]])]


@pytest.fixture(scope="module")
def aligned_queries(tmp_path_factory, realm_store, tiny_dir):
    """A query DocStore whose chunk i restates corpus chunk i (the same texts under other titles:
    another build, so another fingerprint): the layout in which excluding the query's own id from
    the corpus excludes the right chunk."""
    tmp = tmp_path_factory.mktemp("aligned")
    src = linked_jsonl(tmp / "corpus.jsonl")
    lines = src.read_text(encoding="utf-8").splitlines()
    renamed = [line.replace('"title": "', '"title": "About ', 1) for line in lines]
    (tmp / "queries.jsonl").write_text("\n".join(renamed) + "\n", encoding="utf-8")
    quiet_store([tmp / "queries.jsonl"], tmp / "store", 24, tiny_dir)
    return tmp / "store"


def _run(cfg):
    from ralm.realm.training.run import load_run
    from ralm.realm.training.trainer import pretrain

    return load_run(pretrain(cfg, progress=False))


def _query_vectors(run, ids):
    import torch

    from ralm.realm.training.heldout import heldout_batches

    batch = next(iter(heldout_batches(run, np.asarray(ids, dtype=np.int64), len(ids))))
    with torch.no_grad():
        q = run.model.embed_queries(batch).float().numpy()
    return q, batch["source_ids"].numpy(), batch


def test_separate_query_store_excludes_nothing_on_every_search(tiny_cfg, realm_store, aligned_queries):
    from ralm.corpus.docstore import DocStore

    store, qstore = DocStore(realm_store), DocStore(aligned_queries)
    assert len(store) == len(qstore) and not queries_are_corpus(store, qstore)
    assert queries_are_corpus(store, DocStore(realm_store))  # another handle on the same build
    run = _run(tiny_cfg(queries=str(aligned_queries), **ONE_STEP))
    assert not run.same_corpus
    n = len(store)
    q, src, _ = _query_vectors(run, run.heldout_ids)
    # k = every chunk: nothing may be left out (the old rule raised here: one chunk excluded a query)
    for found in (run.search(q, src, n), run.searcher(q, src, n)):
        assert [sorted(row) for row in np.asarray(found).tolist()] == [list(range(n))] * len(src)


def test_the_corpus_own_queries_never_retrieve_their_chunk(tiny_cfg):
    run = _run(tiny_cfg(**ONE_STEP))
    assert run.same_corpus
    n = len(run.store)
    q, src, _ = _query_vectors(run, run.heldout_ids)
    for found in (run.search(q, src, n - 1), run.searcher(q, src, n - 1)):
        rows = np.asarray(found).tolist()
        assert all(int(s) not in row and len(set(row)) == n - 1 for s, row in zip(src, rows, strict=True))


def test_diagnosis_of_a_separate_query_store_finds_the_aligned_chunk(causal_cfg, aligned_queries):
    """BM25 over the visible words of chunk i's restatement ranks corpus chunk i among its first two
    (an article's chunks repeat each other); the old rule excluded it from the diagnosis's BM25,
    dense and hybrid candidates alike."""
    from ralm.realm.inference.diagnose import diagnose

    run = _run(causal_cfg(queries=str(aligned_queries), **ONE_STEP, k=3))
    records = diagnose(run, None, depth=8, reader_depth=4).records
    assert len(records) == len(run.heldout_ids)
    assert all(r["chunk"] in r["candidates"]["bm25"][:2] for r in records)
    assert any(r["chunk"] in r["candidates"]["dense"] for r in records)
