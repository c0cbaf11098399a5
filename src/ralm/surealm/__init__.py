"""SUREALM (Wang & Tam): a causal LM that retrieves training sentences with similar prefixes and
attends to their prefix (key) and suffix (value) embeddings; data store, model, training,
perplexity, generation, and the kNN-LM baseline."""
