"""Fixtures shared by the index tests."""

from __future__ import annotations

import pytest

from testkit import one_thread_of


@pytest.fixture(scope="module")
def one_faiss_thread():
    """These indexes are tiny: OpenMP threads only add overhead (a lot on a busy machine)."""
    import faiss

    with one_thread_of(faiss.omp_get_max_threads, faiss.omp_set_num_threads):
        yield
