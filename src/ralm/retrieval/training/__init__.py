"""Training the dual encoder: `ralm retriever train ict|contrastive|dpr` and what they share.

recipes      the three recipes' configs and loops (train_ict, train_contrastive, train_dpr)
run          one training run's folder: config, metrics.jsonl, checkpoints, resume
data         (question, positive, negatives) pairs from QA files over a DocStore
batches      in-batch and hard-negative batches, gradient caching
negatives    BM25 / dense hard-negative mining
contrastive  Contriever-style crops of unlabelled chunks
ict          the Inverse Cloze Task (REALM's warm start)
views        the two views of one chunk that unsupervised recipes contrast
dev_eval     recall and rank measures on dev questions during training
cli          the `ralm retriever train` commands (`ralm ict` is an alias of `... train ict`)
"""
