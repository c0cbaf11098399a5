"""What each pre-training setting means and which values it takes, without importing torch.

`HELP` (one phrase per `PretrainConfig` field) and `CHOICES` feed `ralm pretrain --help` and the
config checks; the CLI parser is built on every `ralm` command, so this module stays light.
"""

from __future__ import annotations

MODES = ("realm", "mlm")
NULL_DOCS = ("empty", "zeros", "logit", "none")
MARGINALS = ("joint", "span")
RETRIEVER_TRAIN = ("both", "query", "none")
READER_TRAIN = ("train", "freeze")
RETRIEVER_LOSSES = ("marginal", "distill", "answer")
ANSWER_NEGATIVES = ("own", "in_batch", "in_batch_zero")
ANSWER_SPANS = ("all", "salient")
SCORE_SCALES = ("fixed", "learned")
QUERY_MASKS = ("hide", "keep")
INDEX_KINDS = (
    "flat",
    "ivf-flat",
    "hnsw",
    "sq8",
    "ivf-pq",
    "sq6",
    "sq4",
    "auto",
)  # ralm.retrieval.index.plan.KINDS + auto

CHOICES: dict[str, tuple[str, ...]] = {
    "mode": MODES,
    "null_doc": NULL_DOCS,
    "score_scale": SCORE_SCALES,
    "marginal": MARGINALS,
    "retriever_train": RETRIEVER_TRAIN,
    "reader_train": READER_TRAIN,
    "retriever_loss": RETRIEVER_LOSSES,
    "reader_layout": ("doc_first", "query_first"),
    "answer_negatives": ANSWER_NEGATIVES,
    "answer_spans": ANSWER_SPANS,
    "query_masks": QUERY_MASKS,
    "pooling": ("mean", "cls"),
    "schedule": ("cosine", "linear", "constant"),
    "autocast": ("auto", "bf16", "off"),
    "candidates": ("dense", "hybrid"),
    "refresh_mode": ("sync", "async"),
    "index_kind": INDEX_KINDS,
    "index_sharding": ("none", "rank"),
    "reader_kind": ("auto", "mlm", "causal"),
    "reader_embeddings": ("auto", "train", "freeze"),
}

HELP: dict[str, str] = {
    "docstore": "knowledge corpus Z (a DocStore directory); also the query corpus unless queries is given",
    "out": "run directory (config.toml, metrics.jsonl, checkpoints/, index/)",
    "mode": "realm: retrieve-then-predict; mlm: the MLM-only baseline with the same reader",
    "queries": "pre-training corpus X when it is not Z (a DocStore with the same tokenizer) (default: Z)",
    "reader": "HF masked-LM or encoder directory, or a causal LM: gemma3, smollm2, a directory or a "
    ".gguf file (default: the bundled MiniLM)",
    "reader_kind": "mlm: a masked LM fills [MASK]s (REALM); causal: a decoder LM generates the masked "
    "spans after the chunk and the text; auto: causal for a decoder-only reader",
    "causal_blank": "causal reader: the sentinel that replaces masked span i in the text ({i} counts from 1)",
    "reader_embeddings": "the reader's token embeddings: auto (frozen for a causal reader, whose "
    "embeddings are tied to its output layer; trained for a masked LM), train or freeze",
    "reader_lora_r": "causal reader: LoRA rank on its linear layers (peft; merged on export); 0 = full "
    "fine-tuning",
    "reader_checkpointing": "gradient checkpointing in the reader: its layers' activations are recomputed "
    "in the backward pass instead of kept (activation memory of about one layer instead of all, for "
    "roughly a third more compute; same gradients)",
    "retriever": "saved DualEncoder (e.g. from `ralm ict`) or HF encoder (default: the reader's "
    "backbone; the bundled MiniLM for a causal reader)",
    "retriever_init": "a `ralm pretrain` run whose towers, learned score scale and null logit start this "
    "run's retriever (its newest intact checkpoint; the same `retriever`), e.g. a query tower trained on "
    "cached scores: a warm start, as REALM's ICT",
    "pooling": "pooling of a retriever started from a plain encoder: mean (MiniLM) or cls (REALM)",
    "proj_dim": "project the towers' vectors to this size, REALM: 128 (default: the backbone's size)",
    "scale_by_sqrt_dim": "score f(x, z) = q.d / sqrt(d), as BRENT does",
    "encoder_max_length": "tokens of a query or a document for the towers",
    "reader_max_length": "reader tokens of [CLS] x [SEP] title [SEP] body [SEP] (REALM: 288), or of "
    "chunk, masked text and spans for a causal reader",
    "k": "documents per query including the null document (BRENT: 8)",
    "null_doc": "the null document: empty (REALM, BRENT code), zeros (BRENT paper), logit (the mean retrieved "
    "score plus a learned offset) or none",
    "null_logit_init": "null_doc = logit: the learned offset's starting value (0: level with a typical chunk)",
    "score_scale": "fixed: p(z|x) = softmax of the towers' scores; learned: times a learned exp(s), s from 0",
    "lr_scale": "learning rate of the learned score scale and null logit (no weight decay)",
    "marginal": "joint: one marginal over documents for the whole target (today's); span: one per masked "
    "span (causal reader) or masked token (masked LM, REALM's code), summed",
    "reader_backprop_top": "score every document, but backpropagate the reader only through the top m by "
    "posterior plus the null document (the retriever's gradient is unchanged); 0 = every document",
    "retriever_train": "both towers; query: the document tower and the index stay frozen (no re-embedding); "
    "none: both towers frozen",
    "reader_train": "train: the reader learns from the marginal likelihood; freeze: it only scores the "
    "candidates (no reader gradient, one pass over the rows) and the retriever learns from its scores, "
    "a warm start of the towers from what the reader can use",
    "retriever_loss": "marginal: the retriever learns from the marginal likelihood (REALM); distill: from "
    "KL(softmax(log p(y|z,x) / tau) || p(z|x)) (Atlas's perplexity distillation); answer: the same KL with "
    "5 nats for each retrieved chunk that holds the masked span instead of log p(y|z,x) (causal reader; "
    "no reader signal; a query none of whose chunks holds its spans adds nothing)",
    "answer_queries": "masked queries a step, besides the reader's batch, that only the retriever learns "
    "from: the query tower embeds them, the index finds their k - 1 chunks, and the answer target "
    "(retriever_loss = answer's, no reader pass) trains it (causal reader; one process); 0 = none",
    "answer_negatives": "answer_queries: own (each query's softmax over its own k - 1 chunks and the null), "
    "in_batch (also the other answer queries' chunks, each checked for the query's spans) or in_batch_zero "
    "(the other queries' chunks as negatives at target 0, DPR's in-batch negatives)",
    "answer_spans": "retriever_loss = answer and answer_queries: all (every masked span counts toward a "
    "chunk's target) or salient (only the salient ones: a randomly masked word is in most chunks)",
    "answer_weight": "answer_queries: weight of their mean KL (over the queries whose chunks rank "
    "something) in the step's loss",
    "distill_tau": "retriever_loss = distill or answer: the temperature tau of the target",
    "reader_layout": "causal reader: doc_first (one row a document: [bos] z x y) or query_first (the query "
    "once, its documents and targets packed after it, each seeing the query and itself)",
    "reader_bucket_slack": "causal reader: rows run in groups of similar length while a group's padding stays "
    "within this factor of its real tokens (inf = one group)",
    "query_masks": "hide the [MASK]s from the query tower, or keep them (REALM)",
    "steps": "optimiser steps",
    "batch_size": "queries per micro-batch, over all processes",
    "grad_accum": "micro-batches per optimiser step",
    "lr_reader": "peak learning rate of the reader",
    "lr_retriever": "peak learning rate of the retriever's towers",
    "weight_decay": "AdamW weight decay (none on biases, norms and the null vector)",
    "schedule": "learning-rate decay after the warm-up",
    "warmup_steps": "steps of linear learning-rate warm-up",
    "min_lr_ratio": "final learning rate as a fraction of the peak (BRENT: 0.1)",
    "max_grad_norm": "clip the gradient norm to this; 0 = no clipping",
    "seed": "seed of the held-out split, data order, masks and dropout",
    "data_offset": "training examples skipped at the start of the data order (a run that continues "
    "from another run's reader reads queries that run did not see)",
    "device": "auto (cuda if available), cpu, cuda or cuda:N",
    "autocast": "mixed precision: auto (bf16 where the hardware has it), bf16 or off",
    "refresh_every": "re-embed the corpus and rebuild the index every N steps (BRENT: 100); 0 = never",
    "candidates": "dense: the index's top k (REALM, BRENT); hybrid: BM25 and the index fused by RRF",
    "candidate_depth": "hybrid: chunks taken from each list before fusion",
    "bm25_lang": "hybrid: BM25 stopwords and stemmer of this language, e.g. da, nb, en, or none "
    "(default: the DocStore's language)",
    "index_kind": "index: flat (exact, BRENT), another `ralm index build` kind, or auto (by corpus size)",
    "index_sharding": "none: every process holds the whole index; rank: process r builds and holds "
    "shard r (1/N of the corpus), searched together over torch.distributed",
    "initial_index": "a saved index of this corpus to start from (default: embed the corpus at step 0)",
    "refresh_mode": "sync: stop, re-embed, rebuild (BRENT); async: a builder process (REALM)",
    "builder_threads": "async: torch threads of the index builder",
    "builder_cores": "async: CPU cores to pin the builder to, e.g. [1] (default: not pinned)",
    "builder_device": "async: where the builder embeds, e.g. cuda:1",
    "dist_timeout_s": "multi-process: seconds before a stuck collective fails",
    "embed_batch_size": "chunks per batch when the corpus is embedded",
    "heldout": "chunks held out of the training queries for `ralm evaluate-mlm`",
    "checkpoint_every": "save a checkpoint every N steps; 0 = only at the end",
    "keep_checkpoints": "how many of the newest checkpoints to keep",
    "tensorboard": "write TensorBoard events to RUN/tb",
    "masking": "the [masking] table (strategy, salient_rate, ...); set one with --set masking.NAME=VALUE",
}
