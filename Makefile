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

.PHONY: setup demo test lint bench clean

setup: $(STAMP)

$(STAMP): pyproject.toml Makefile
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet "$(TORCH_SPEC)"
	$(BIN)/python -m pip install --quiet -e ".[all,dev]"
	$(BIN)/python -m ralm.samples fetch-triviaqa
	touch $(STAMP)

# The main job on the bundled sample: build a DocStore from the gensim English Wikipedia
# sample with the bundled MiniLM tokenizer, then print its summary and one chunk.
demo: setup
	$(BIN)/ralm corpus build --sample enwiki --out runs/demo/corpus --overwrite
	$(BIN)/ralm corpus info runs/demo/corpus
	$(BIN)/ralm corpus show runs/demo/corpus 42

test: setup
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/python -m pytest -q

lint: setup
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/ruff format --check src tests benchmarks

bench: setup
	$(BIN)/python benchmarks/ingest.py

clean:
	rm -rf runs .pytest_cache
