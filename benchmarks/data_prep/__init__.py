"""Data preparation, not measurements: the Danish/Norwegian Debian corpora (`nordic_corpus.py`)."""
