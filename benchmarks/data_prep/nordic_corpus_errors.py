"""The one error of nordic_corpus.py and its parts."""


class NordicCorpusError(RuntimeError):
    """A package, file or language the corpus cannot be built from."""
