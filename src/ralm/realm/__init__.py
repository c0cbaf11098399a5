"""REALM and BRENT: retrieval-augmented masked-LM pre-training and what a trained run answers.

Layers, each importing only from below (an import-linter contract, run by `make test`):
`cli`; `inference` (evaluation, fills, gold tables, diagnosis, export, plots); `training` (building
a run, its folder, the loop and its extra objectives); `refresh` (the MIPS index during training);
`modeling` (the model: prior, marginal, candidates, the answer target); `readers` (masked-LM and
causal); `masking` (what a query hides). `config`, `options` and `data` are shared by all of them.
"""
