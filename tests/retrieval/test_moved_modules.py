"""The modules moved into retrieval/training, index and eval keep their old import paths for one
release: the old path warns and gives the very module at the new path."""

import importlib
import sys
import warnings

import pytest

from ralm.retrieval import MOVED


@pytest.mark.parametrize("old", sorted(MOVED))
def test_old_path_warns_and_is_the_new_module(old):
    new = importlib.import_module(f"ralm.retrieval.{MOVED[old]}")
    sys.modules.pop(f"ralm.retrieval.{old}", None)
    with pytest.warns(DeprecationWarning, match=f"ralm.retrieval.{old} moved to ralm.retrieval.{MOVED[old]}"):
        mod = importlib.import_module(f"ralm.retrieval.{old}")
    assert mod is new


def test_dense_index_names_stay_under_the_index_package():
    from ralm.retrieval.index import DenseIndex, dense

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the package's own names: no warning
        from ralm.retrieval.index import auto_kind
    assert DenseIndex is dense.DenseIndex and auto_kind is dense.auto_kind
    with pytest.raises(ImportError):
        from ralm.retrieval.index import no_such_name  # noqa: F401
