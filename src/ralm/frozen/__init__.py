"""Retrieval for frozen causal LMs: perplexity with In-Context RALM and REPLUG.

The LM is never trained: retrieved text goes into its context.

* `ralm.frozen.lm`: load a frozen HF causal LM (SmolLM2, any local causal-LM directory, GGUF),
  refuse encoders; batched log-probabilities of chosen tokens.
* `ralm.frozen.text`: the evaluated text, its LM tokens with character offsets and its words.
* `ralm.frozen.windows`: the sliding-window grid (HF's perplexity recipe) and its blocks of
  `stride` tokens, with the context each block is scored with and the tokens of its query.
* `ralm.frozen.exclusion`: which corpus articles hold the evaluated text (never retrieved).
* `ralm.frozen.retrieve`: one batched search for all blocks; retrieved chunks as LM tokens.
* `ralm.frozen.evaluate`: the modes none / in-context (with LM reranking) / replug.
* `ralm.frozen.backends`: where greedy decoding runs (torch, torch-int8, llama.cpp, auto).
* `ralm.frozen.to_gguf`: a trained causal LM as a GGUF file for llama.cpp.
* `ralm.frozen.cli`: `ralm lm-eval`, `ralm lm-datastore`, `ralm convert-gguf`.
"""
