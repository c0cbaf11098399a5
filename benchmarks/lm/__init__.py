"""Language models: n-gram speed against nltk.lm and KenLM, the LM ladder, frozen causal LMs with retrieval."""
