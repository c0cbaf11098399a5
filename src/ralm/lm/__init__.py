"""Language models of the lecture: n-gram LMs (`ralm.lm.ngram`), small neural LMs
(`ralm.lm.neural`, the perplexity ladder in `ralm.lm.ladder`) and query-likelihood retrieval
(`ralm.retrieval.query_likelihood`: chunks ranked by their smoothed unigram LM's likelihood of the query).

Importing this package pulls in numpy only (the CLI imports it on every `ralm` call).
"""

from ralm.lm.counts import Vocab, count_ngrams
from ralm.lm.ngram import ESTIMATORS, NGramLM
from ralm.text import word_tokenize

__all__ = ["ESTIMATORS", "NGramLM", "Vocab", "count_ngrams", "word_tokenize"]
