"""Language models of the lecture: n-gram LMs now (`ralm.lm.ngram`); neural LMs come later.

Importing this package pulls in numpy only (the CLI imports it on every `ralm` call).
"""

from ralm.lm.counts import Vocab, count_ngrams, word_tokenize
from ralm.lm.ngram import ESTIMATORS, NGramLM

__all__ = ["ESTIMATORS", "NGramLM", "Vocab", "count_ngrams", "word_tokenize"]
