"""RAG QA with a generator (SmolLM2, Gemma-3) on NorQuAD-open and trivia, on the CPU and a lent GPU."""
