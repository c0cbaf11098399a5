"""Evaluating retrievers on QA files: `ralm eval-retrieval`, and comparisons between retrievers.

evaluate  answer recall@k, rank measures and hubness of one retriever on (question, answers)
measures  rank measures through ir-measures (nDCG@10, RR@10, ...) and hubness
compare   several retrievers on one question set, with pooled judgments
cli       the `ralm eval-retrieval` command
"""
