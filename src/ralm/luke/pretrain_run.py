"""A `ralm luke pretrain` run before its first step: what it reads, and its run directory.

`prepare(cfg)` opens the DocStore, reads the entity spans of the run's sources, builds the entity
vocabulary and the model (`ralm.luke.init.from_bert`), and so meets every error the inputs can
cause (no entity spans for the sources, a backbone whose tokenizer is not the store's, l > L)
before anything is written. `open_run` (rank 0, under the run's writer lock) then checks --out
for --resume/--overwrite, compares a resumed run's config.toml and entity_vocab.tsv with what
was prepared, deletes an overwritten run only now, and writes config.toml and entity_vocab.tsv.
`corpus_stats` is `--stats-only`: the store's entity annotations per 1,000 words.
"""

from __future__ import annotations

from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ralm.corpus.docstore import DocStore
from ralm.errors import RalmError
from ralm.locks import writer_lock
from ralm.luke.annotations import EntitySpans, annotation_stats, open_store
from ralm.luke.data import WordTokens
from ralm.luke.pretrain_config import CONFIG_FILE, RESUME_FIELDS, LukePretrainConfig
from ralm.luke.vocab import VOCAB_FILE, EntityVocabulary
from ralm.train.run import check_start, reached_steps, remove_run, resume_point, setting_differences

__all__ = [
    "MODEL_DIR",
    "Prepared",
    "COMMAND",
    "check_resume",
    "corpus_stats",
    "is_finished",
    "open_run",
    "prepare",
    "read_run_config",
]

MODEL_DIR = "model"  # RUN/model: the trained LukeForPretraining (ralm.luke.io)
COMMAND = "ralm luke pretrain"


@dataclass
class Prepared:
    """What a run reads before it writes anything: the store, spans, vocabulary, tokenizer, model."""

    store: DocStore
    spans: EntitySpans
    vocab: EntityVocabulary
    tok: WordTokens
    model: Any  # LukeForPretraining
    backbone: Path


def read_run_config(run: str | Path) -> LukePretrainConfig:
    """The config.toml of a `ralm luke pretrain` run directory."""
    p = Path(run) / CONFIG_FILE
    if not p.is_file():
        raise RalmError(f"{run}: not a `ralm luke pretrain` run (no {CONFIG_FILE}); give its --out directory")
    return LukePretrainConfig.from_toml(p)


def prepare(cfg: LukePretrainConfig) -> Prepared:
    """Open the store, read its entity spans, build the vocabulary and the model; nothing is written.

    RalmError (one line) for a store with no entity spans for the sources, a backbone whose
    tokenizer is not the store's, a model config the backbone cannot take (l > L, ...).
    """
    from ralm.luke.init import from_bert
    from ralm.models.names import resolve_model_dir
    from ralm.models.tokenizers import load_tokenizer
    from ralm.realm.training.build import check_reader_tokenizer

    store = open_store(cfg.docstore)
    spans = EntitySpans.from_docstore(store, cfg.entity_sources, words=True)
    spans.require_spans()
    vocab = EntityVocabulary.from_counts(spans.title_counts(), cfg.entity_vocab_size, cfg.entity_min_mentions)
    backbone = resolve_model_dir(cfg.backbone)
    tokenizer = load_tokenizer(backbone)
    check_reader_tokenizer(store, tokenizer, backbone)
    model = from_bert(
        backbone,
        entity_vocab_size=len(vocab),
        entity_hidden_size=cfg.entity_hidden_size,
        entity_emb_size=cfg.entity_emb_size,
        max_mention_length=cfg.max_mention_length,
        seed=cfg.seed,
        entity_attention=cfg.entity_attention,
    )
    if cfg.max_seq_length > model.config.max_position_embeddings:
        raise RalmError(
            f"max_seq_length={cfg.max_seq_length}: the backbone {backbone} has only "
            f"{model.config.max_position_embeddings} positions; lower max_seq_length"
        )
    return Prepared(store, spans, vocab, WordTokens.from_tokenizer(tokenizer), model, backbone)


def corpus_stats(cfg: LukePretrainConfig) -> dict[str, Any]:
    """Entity annotations of the config's DocStore (`--stats-only`): words, tokens, spans per source,
    entities per 1,000 words and tokens with links alone and with auto-annotation, and with the run's sources."""
    spans = EntitySpans.from_docstore(open_store(cfg.docstore), cfg.entity_sources, words=True)
    st = annotation_stats(spans)
    return {
        "docstore": cfg.docstore,
        **st.as_dict(),
        "sources": list(cfg.entity_sources),
        "run_entities_per_1k_words": st.per_1k_words(cfg.entity_sources),
    }


# ----------------------------------------------------------------------------- one step


def check_resume(run: Path, cfg: LukePretrainConfig, vocab: EntityVocabulary) -> None:
    saved = read_run_config(run)
    diff = setting_differences(saved, cfg, RESUME_FIELDS)
    if diff:
        f = diff[0]
        raise RalmError(
            f"{run}: was started with {f}={getattr(saved, f)!r}, not {getattr(cfg, f)!r}; "
            "resume it with its own config.toml"
        )
    path = run / VOCAB_FILE
    diff = EntityVocabulary.load(path).difference(vocab)
    if diff is not None:
        raise RalmError(
            f"{path} does not match the entity vocabulary of {cfg.docstore} with sources "
            f"{', '.join(cfg.entity_sources)} ({diff}); resume on the run's own corpus or start over with --overwrite"
        )


def is_finished(run: Path, cfg: LukePretrainConfig) -> bool:
    """Whether `run` holds this very run (its fixed settings), trained to cfg.steps or further and
    its model saved: rerunning its command has nothing to do."""
    if not (run / MODEL_DIR / "config.json").is_file() or not reached_steps(run, CONFIG_FILE, cfg.steps):
        return False
    return not setting_differences(read_run_config(run), cfg, RESUME_FIELDS)


def open_run(
    run: Path, cfg: LukePretrainConfig, prep: Prepared, held: ExitStack, resume: bool, overwrite: bool
) -> str | None:
    """Rank 0: lock, check, clear or create --out (`ralm.train.run`); returns the checkpoint to
    resume, or None."""
    held.enter_context(writer_lock(run))
    ckpt = None
    if check_start(run, CONFIG_FILE, COMMAND, resume=resume, overwrite=overwrite):
        check_resume(run, cfg, prep.vocab)
        ckpt = resume_point(run, COMMAND)
    elif overwrite:  # after every check passed
        remove_run(run, CONFIG_FILE, COMMAND)
    run.mkdir(parents=True, exist_ok=True)
    cfg.save(run)
    prep.vocab.save(run / VOCAB_FILE)
    return str(ckpt) if ckpt is not None else None
