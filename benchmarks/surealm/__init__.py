"""SUREALM: perplexity against the same LM without retrieval, and what the model does with its memory."""
