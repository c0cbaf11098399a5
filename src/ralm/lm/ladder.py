"""The lecture's ladder of LMs on one held-out text: n-gram models up to a small transformer.

`run_ladder(source, LadderConfig(...))` reads documents, splits them (by document, seeded)
into train / valid / test, cuts documents into sentences (`ralm.corpus.sentences`) and words
(`word_tokenize`, lower-cased by default), builds ONE vocabulary from the training words
(capped by frequency, `<unk>` for the rest) and fits every model on the same training
sentences:

    add-one unigram, add-one bigram, Katz trigram, interpolated KN trigram,
    modified KN trigram and 5-gram (`ralm.lm.NGramLM`),
    fixed-window feed-forward, LSTM and transformer (`ralm.lm.neural`).

All are scored on the same test sentences with the same OOV mapping: a word outside the
vocabulary becomes `<unk>` for the neural models and the stand-in word `<oov>` for the n-gram
models (ralm's n-gram `<unk>` is a zero-count type that cannot appear in training text), so
both predict exactly the same token stream; every token incl. `</s>` is predicted, `<s>`
never. The n-gram vocabulary is therefore the neural one plus its own unused `<unk>`, one
type more (it takes a negligible share of the smoothed mass). Sentences longer than
`max_sentence_tokens` words are cut into pieces for all models alike (the transformer has
a fixed number of positions).

Sources: "lee" (gensim's lee_background.cor: 300 news stories, one per line; the default),
"enwiki" (gensim's shortened English Wikipedia dump), a DocStore directory (chunks grouped
into articles), or a text/JSONL/wiki file (`ralm.corpus.readers.iter_articles`; a text file
is one document per line). Left out: hyper-parameter search (the configs are fixed, sized
for a CPU), document-level context for the neural models, repeated runs with error bars.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from ralm.errors import RalmError
from ralm.lm.counts import Vocab
from ralm.lm.ngram import NGramLM
from ralm.text import word_tokenize

NGRAM_ROWS: tuple[tuple[str, int, str], ...] = (
    ("add-one unigram", 1, "laplace"),
    ("add-one bigram", 2, "laplace"),
    ("Katz trigram", 3, "katz"),
    ("interpolated KN trigram", 3, "kn"),
    ("modified KN trigram", 3, "mkn"),
    ("modified KN 5-gram", 5, "mkn"),
)
NEURAL_ROWS: dict[str, str] = {
    "ffnn": "fixed-window FFNN (Bengio 2003)",
    "lstm": "LSTM",
    "transformer": "transformer (pre-LN)",
}
OOV_STANDIN = "<oov>"


@dataclass
class LadderConfig:
    """What `run_ladder` fits and how."""

    max_tokens: int | None = None  # keep only the first N training words (None: all)
    vocab_size: int | None = 10_000  # cap incl. <unk>, <s>, </s> (most frequent words)
    min_count: int = 2  # rarer training words become <unk>, so <unk> is learnt
    lowercase: bool = True  # lower-case before tokenising (small corpora)
    split: tuple[float, float, float] = (0.8, 0.1, 0.1)  # train / valid / test shares of documents
    seed: int = 0  # document shuffle, initialisation, batch order
    max_sentence_tokens: int = 100  # longer sentences are cut into pieces (all models alike)
    ngrams: bool = True  # the n-gram rows
    neural: tuple[str, ...] = ("ffnn", "lstm", "transformer")  # the neural rows, in order
    epochs: int = 20  # max epochs per neural model
    time_budget_s: float | None = None  # per neural model
    batch_tokens: int = 2048  # padded tokens per training step
    autocast: str = "auto"  # bf16 autocast where native ("auto"), "bf16" or "off"
    model_overrides: dict[str, dict] = field(default_factory=dict)  # kind -> config fields
    train_overrides: dict[str, dict] = field(default_factory=dict)  # kind -> TrainConfig fields


# Per-kind training settings that differ from TrainConfig's defaults (found on lee; see the benchmark).
TRAIN_DEFAULTS: dict[str, dict] = {
    "ffnn": {"lr": 2e-3, "weight_decay": 0.1, "patience": 3},
    "lstm": {"lr": 3e-3, "weight_decay": 0.01},
    "transformer": {"lr": 1e-3, "weight_decay": 0.1, "patience": 3},
}


# ----------------------------------------------------------------------------- data
def load_documents(source: str) -> list[str]:
    """Document texts of a sample name, a DocStore directory or a corpus file (see the module doc)."""
    from ralm.corpus.readers import iter_articles
    from ralm.samples import SAMPLES, sample_path

    path = Path(source)
    if source == "lee":
        lines = sample_path("lee").read_text(encoding="utf-8").splitlines()
        return [ln.strip() for ln in lines if ln.strip()]
    if source == "enwiki":
        return [a.text for a in iter_articles(sample_path("enwiki"), "wiki") if a.text.strip()]
    if source in SAMPLES:
        raise RalmError(f"sample {source!r} is not running text; use lee, enwiki, a DocStore or a text file")
    if path.is_dir() and (path / "manifest.json").is_file():
        from ralm.corpus.docstore import DocStore

        store = DocStore(path)
        by_article: dict[int, list[str]] = {}
        for batch in store.iter_batches(1024, ["article", "text"]):
            for a, t in zip(batch["article"], batch["text"], strict=True):
                by_article.setdefault(a, []).append(t)
        return [" ".join(parts) for _, parts in sorted(by_article.items())]
    if not path.exists():
        raise RalmError(f"{source}: no such file, DocStore or sample (lee, enwiki)")
    return [a.text for a in iter_articles(path, "auto", text_mode="line") if a.text.strip()]


def split_documents(
    docs: Sequence[str], shares: Sequence[float], seed: int
) -> tuple[list[str], list[str], list[str]]:
    """Seeded shuffle of whole documents, then train / valid / test by `shares` (each >= 1 doc)."""
    if len(shares) != 3 or any(s <= 0 for s in shares):
        raise RalmError(f"split {tuple(shares)}: give three positive shares (train, valid, test)")
    if len(docs) < 3:
        raise RalmError(f"need at least 3 documents to split into train/valid/test, got {len(docs)}")
    order = np.random.default_rng(seed).permutation(len(docs))
    total = float(sum(shares))
    n_valid = max(1, round(len(docs) * shares[1] / total))
    n_test = max(1, round(len(docs) * shares[2] / total))
    n_train = len(docs) - n_valid - n_test
    if n_train < 1:
        raise RalmError(f"{len(docs)} documents are too few for split {tuple(shares)}")
    parts = np.split(order, [n_train, n_train + n_valid])
    return tuple([docs[i] for i in p] for p in parts)  # type: ignore[return-value]


def sentences_of(docs: Sequence[str], lowercase: bool, max_len: int) -> list[list[str]]:
    """Sentences of the documents as word lists; ones longer than max_len are cut into pieces.

    Example: `sentences_of(["A cat. A dog sat."], True, 2)` -> `[['a', 'cat'], ['.'], ['a', 'dog'], ['sat', '.']]`.
    """
    from ralm.corpus.sentences import split_sentences

    out: list[list[str]] = []
    for d in docs:
        for s, e in split_sentences(d):
            words = word_tokenize(d[s:e], lowercase)
            out.extend(words[i : i + max_len] for i in range(0, len(words), max_len))
    return out


@dataclass
class LadderData:
    """The shared split: word sentences per part and the one vocabulary."""

    train: list[list[str]]
    valid: list[list[str]]
    test: list[list[str]]
    vocab: Vocab

    def mapped(self, sentences: list[list[str]]) -> list[list[str]]:
        """Sentences with out-of-vocabulary words replaced by OOV_STANDIN (for the n-gram models)."""
        known = self.vocab.token_to_id
        return [[w if w in known else OOV_STANDIN for w in s] for s in sentences]

    def summary(self) -> dict:
        def words(part: list[list[str]]) -> int:
            return sum(len(s) for s in part)

        def oov(part: list[list[str]]) -> float:
            n = words(part)
            return sum(w not in self.vocab.token_to_id for s in part for w in s) / max(1, n)

        return {
            "vocab_size": len(self.vocab),
            **{
                f"{name}_{what}": value
                for name, part in (("train", self.train), ("valid", self.valid), ("test", self.test))
                for what, value in (
                    ("sentences", len(part)),
                    ("words", words(part)),
                    ("predicted_tokens", words(part) + len(part)),
                    ("oov_rate", round(oov(part), 4)),
                )
            },
        }


def prepare_data(source: str | Sequence[str], config: LadderConfig) -> LadderData:
    """Read, split, sentence-split, tokenise, truncate to max_tokens and build the vocabulary."""
    from ralm.lm.neural import build_capped_vocab

    docs = load_documents(source) if isinstance(source, str) else list(source)
    tr, va, te = split_documents(docs, config.split, config.seed)
    n = config.max_sentence_tokens
    train = sentences_of(tr, config.lowercase, n)
    valid = sentences_of(va, config.lowercase, n)
    test = sentences_of(te, config.lowercase, n)
    if config.max_tokens is not None:
        if config.max_tokens < 1:
            raise RalmError(f"--max-tokens {config.max_tokens}: must be >= 1")
        cum = np.cumsum([len(s) for s in train])
        train = train[: max(1, int(np.searchsorted(cum, config.max_tokens, side="right")))]
    for name, part in (("train", train), ("valid", valid), ("test", test)):
        if not part:
            raise RalmError(f"the {name} part has no sentences; use a larger text")
    for part in (train, valid, test):
        for s in part:
            if OOV_STANDIN in s:
                raise RalmError(f"the text contains the token {OOV_STANDIN!r}, reserved by the ladder")
    vocab = build_capped_vocab(train, config.vocab_size, config.min_count)
    return LadderData(train, valid, test, vocab)


# ----------------------------------------------------------------------------- the ladder
def run_ladder(
    source: str | Sequence[str] = "lee",
    config: LadderConfig | None = None,
    log: Callable[[str], None] | None = None,
    save_dir: str | Path | None = None,
    on_data: Callable[[str, dict], None] | None = None,
    on_row: Callable[[dict], None] | None = None,
) -> dict:
    """Fit every model of the ladder on one split and score it; returns {"data", "config", "rows"}.

    `source`: a name or path (see the module docstring) or a list of document strings.
    Each row: model, kind, params (trainable weights; n-grams: stored n-gram entries),
    train_seconds, valid_ppl, test_ppl (+ epochs, steps, stopped_by for the neural models).
    `save_dir`: write each neural model there (`save_lm`, one folder per kind).
    `on_data(source_label, data_summary)` is called once the split is made, `on_row(row)` as
    each model finishes (the CLI prints the table as it grows).
    """
    import torch

    from ralm.lm import neural, neural_models

    cfg = config or LadderConfig()
    say = log or (lambda _m: None)
    data = prepare_data(source, cfg)
    summary = data.summary()
    label = source if isinstance(source, str) else f"{len(source)} documents"
    if on_data is not None:
        on_data(label, summary)
    emit = on_row or (lambda _r: None)
    say(
        f"data: {summary['train_words']} train / {summary['valid_words']} valid / "
        f"{summary['test_words']} test words, vocabulary {len(data.vocab)}, "
        f"test OOV rate {summary['test_oov_rate']:.2%}"
    )
    rows: list[dict] = []
    if cfg.ngrams:
        train_m, valid_m, test_m = (data.mapped(p) for p in (data.train, data.valid, data.test))
        for name, order, est in NGRAM_ROWS:
            t0 = time.perf_counter()
            lm = NGramLM.fit(train_m, order=order, estimator=est)
            seconds = time.perf_counter() - t0
            row = {
                "model": name,
                "kind": f"ngram:{est}",
                "order": order,
                "params": int(sum(lm.sizes)),
                "train_seconds": round(seconds, 3),
                "valid_ppl": round(lm.perplexity(valid_m), 3),
                "test_ppl": round(lm.perplexity(test_m), 3),
            }
            rows.append(row)
            emit(row)
            say(f"{name}: test ppl {row['test_ppl']:.2f}")
    enc = {
        name: neural.encode_sentences(data.vocab, part)
        for name, part in (("train", data.train), ("valid", data.valid), ("test", data.test))
    }
    for kind in cfg.neural:
        if kind not in neural_models.MODELS:
            raise RalmError(f"unknown neural LM {kind!r}; choose from {', '.join(neural_models.MODELS)}")
        overrides = dict(cfg.model_overrides.get(kind, {}))
        if kind == "transformer":
            overrides.setdefault("max_len", cfg.max_sentence_tokens + 1)
        model = neural_models.build_model(kind, vocab_size=len(data.vocab), seed=cfg.seed, **overrides)
        tcfg = neural.TrainConfig(
            max_epochs=cfg.epochs,
            time_budget_s=cfg.time_budget_s,
            batch_tokens=cfg.batch_tokens,
            seed=cfg.seed,
            autocast=cfg.autocast,
            **{**TRAIN_DEFAULTS.get(kind, {}), **cfg.train_overrides.get(kind, {})},
        )
        say(f"{NEURAL_ROWS[kind]}: {neural_models.n_params(model):,} parameters, training ...")
        result = neural.train_lm(
            model, enc["train"], enc["valid"], tcfg, log=lambda m, k=kind: say(f"  {k} {m}")
        )
        with torch.no_grad():
            test_ppl = neural.perplexity(model, enc["test"])
        row = {
            "model": NEURAL_ROWS[kind],
            "kind": kind,
            "params": neural_models.n_params(model),
            "train_seconds": round(result.seconds, 3),
            "valid_ppl": round(float(result.best_valid_ppl), 3),
            "test_ppl": round(test_ppl, 3),
            "epochs": result.epochs,
            "steps": result.steps,
            "stopped_by": result.stopped_by,
            "config": asdict(model.config),
        }
        rows.append(row)
        emit(row)
        say(f"{NEURAL_ROWS[kind]}: test ppl {test_ppl:.2f} ({result.seconds:.0f} s, {result.stopped_by})")
        if save_dir is not None:
            neural.save_lm(model, data.vocab, Path(save_dir) / kind)
    return {
        "source": label,
        "data": summary,
        "config": {k: v for k, v in asdict(cfg).items()},
        "rows": rows,
    }


HEAD = ("model", "params", "train s", "valid ppl", "test ppl")
MIN_WIDTHS = (0, 13, 8, 10, 10)  # fixed minimums, so rows printed as they finish line up


def planned_models(config: LadderConfig) -> list[str]:
    """The model names `run_ladder` will produce for `config`, in order."""
    names = [name for name, _, _ in NGRAM_ROWS] if config.ngrams else []
    return names + [NEURAL_ROWS.get(kind, kind) for kind in config.neural]


def table_widths(names: Sequence[str], rows: Sequence[dict] = ()) -> list[int]:
    """Column widths for a table of these model names (and rows, if any are wider)."""
    cells = [_cells(r) for r in rows]
    return [
        max([MIN_WIDTHS[j], len(HEAD[j]), *(len(n) for n in names if j == 0), *(len(c[j]) for c in cells)])
        for j in range(len(HEAD))
    ]


def _cells(r: dict) -> tuple[str, ...]:
    return (
        r["model"],
        f"{r['params']:,}",
        f"{r['train_seconds']:.1f}",
        f"{r['valid_ppl']:.2f}" if math.isfinite(r["valid_ppl"]) else "inf",
        f"{r['test_ppl']:.2f}" if math.isfinite(r["test_ppl"]) else "inf",
    )


def format_line(cells: Sequence[str], widths: Sequence[int]) -> str:
    first = cells[0].ljust(widths[0])
    return "  ".join([first, *(c.rjust(w) for c, w in zip(cells[1:], widths[1:], strict=True))])


def format_row(row: dict, widths: Sequence[int]) -> str:
    """One table line for a result row."""
    return format_line(_cells(row), widths)


def format_head(source: str, data: dict, widths: Sequence[int]) -> list[str]:
    """Caption, rule, column names, rule."""
    caption = (
        f"{source}: {data['train_words']:,} train / {data['valid_words']:,} valid / "
        f"{data['test_words']:,} test words; vocabulary {data['vocab_size']:,} (test OOV "
        f"{data['test_oov_rate']:.2%}); ppl over {data['test_predicted_tokens']:,} test tokens incl. </s>"
    )
    rule = "-" * len(format_line(HEAD, widths))
    return [caption, rule, format_line(HEAD, widths), rule]


def format_table(result: dict) -> str:
    """The ladder as one plain-text table (model, params, train seconds, valid and test ppl)."""
    rows = result["rows"]
    widths = table_widths([r["model"] for r in rows], rows)
    head = format_head(result["source"], result["data"], widths)
    return "\n".join([*head, *(format_row(r, widths) for r in rows), head[1]])


def write_json(result: dict, path: str | Path) -> None:
    """Write the ladder result as JSON (n-gram params are n-gram entries, neural ones weights)."""
    from ralm.atomic import write_json_atomic

    write_json_atomic(path, result)
