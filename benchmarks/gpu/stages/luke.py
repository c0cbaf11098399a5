"""Stage 6: LUKE where entities help (issue 47), 3,000 pre-training steps (`luke_entities.py`).

The new defaults at 10x the CPU run's pre-training: separate softmaxes with the word-to-entity gate
from 0, the entity side first for half the steps at 1e-3, entities with >= 3 mentions, links +
auto-annotation, at l = L and l = 120; then WNUT-17 NER with 3 seeds and the CPU run's budget
(1,000 training sentences, 3 epochs, the first 300 test sentences), threshold decoding on 1 - P(O)
tuned on dev: the LUKE row, the reduced-entity row, the words-only span classifier on the LUKE
encoder, and the word-only MiniLM token tagger. Plus the probe at initialisation and the masked-entity
accuracy before and after.

GPU time, estimated from the ops a step dispatches (profiled on the CPU), not measured on a card: a
pre-training step is launch-bound, ~25 ms, so 2 x 3,000 steps ~150 s; NER ~10 s a LUKE seed, ~4 s a
word-only one, ~100 s for the 4 rows x 3 seeds; probe and loads ~20 s. Hence BUDGET_S.

prep builds the enwiki-sample corpus on the CPU (`ralm corpus build --sample enwiki --chunk-size
128`, 8 MB: the GPU machine has no gensim) and copies WNUT-17 (0.8 MB) from ../shared/data.
--tiny: a 1-article corpus of 64-token chunks; for NER, the first 20 words of 36 of its chunks,
tagged B-link/I-link where a Wikipedia link covers a word (a toy task, not NER); 2 pre-training
steps of 2 chunks, 1 seed, 16 training sentences.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from benchmarks.common import ROOT
from benchmarks.gpu.stages.context import StageContext, StageTimeout, run_progress

NAME = "luke"
TITLE = (
    "LUKE (new defaults, 3,000 pre-training steps) vs words-only span and token taggers, WNUT-17 entity F1"
)
BUDGET_S = 300.0
MIN_S = 150.0
TARGETS = {"gpu_luke_minus_word_f1": "> 0", "gpu_luke_init_word_cosine": ">= 0.99"}

WNUT17 = ROOT.parent / "shared" / "data" / "wnut17"
FULL = {
    "chunk": 128,
    "articles": None,
    "steps": 3000,
    "batch": 16,
    "seeds": "1,2,3",
    "train_limit": 1000,
    "max_eval": 300,
    "epochs": 3,
    "max_span": 5,
    "mep_chunks": 256,
}
TINY = {
    "chunk": 64,
    "articles": 1,
    "steps": 2,
    "batch": 2,
    "seeds": "1",
    "train_limit": 16,
    "max_eval": 6,
    "epochs": 1,
    "max_span": 3,
    "mep_chunks": 8,
}


def _settings(ctx: StageContext) -> dict:
    return TINY if ctx.tiny else FULL


def prep(ctx: StageContext) -> None:
    s = _settings(ctx)
    ctx.inputs.mkdir(parents=True, exist_ok=True)
    corpus = ctx.inputs / "corpus"
    shutil.rmtree(corpus, ignore_errors=True)
    more = ["--max-articles", s["articles"]] if s["articles"] else []
    ctx.ralm(
        "corpus", "build", "--sample", "enwiki", "--chunk-size", s["chunk"], "--out", corpus, "--quiet", *more
    )
    data = ctx.inputs / "ner"
    shutil.rmtree(data, ignore_errors=True)
    if ctx.tiny:
        link_tagged(corpus, data)
    else:
        data.mkdir()
        for f in WNUT17.iterdir():  # plain copies: the shared files are read-only
            shutil.copyfile(f, data / f.name)


def link_tagged(corpus: Path, out: Path, n: int = 36, max_words: int = 20) -> None:
    """train/dev/test CoNLL files (4:1:1) of the first `max_words` words of the corpus's first `n`
    chunks with a link, each word tagged B-link/I-link where a Wikipedia link covers it, else O."""
    import pyarrow.parquet as pq

    rows = []
    for part in sorted((corpus / "chunks").glob("*.parquet")):
        rows += pq.read_table(part, columns=["text", "links"]).to_pylist()
    sents = []
    for r in rows:
        words = list(re.finditer(r"\w+|[^\w\s]", r["text"]))[:max_words]
        if not words or not r["links"]:
            continue
        tags = []
        for w in words:
            link = next((x for x in r["links"] if x["start"] <= w.start() and w.end() <= x["end"]), None)
            inside = link is not None and tags and tags[-1] != "O" and link["start"] < w.start()
            tags.append("O" if link is None else "I-link" if inside else "B-link")
        if "B-link" in tags:
            sents.append("".join(f"{w.group()}\t{t}\n" for w, t in zip(words, tags, strict=True)))
        if len(sents) == n:
            break
    out.mkdir(parents=True)
    k = len(sents) // 6
    for name, part in (("train", sents[2 * k :]), ("dev", sents[:k]), ("test", sents[k : 2 * k])):
        (out / f"{name}.conll").write_text("\n".join(part), encoding="utf-8")


def run(ctx: StageContext) -> dict:
    s = _settings(ctx)
    work = ctx.work / "luke"
    shutil.rmtree(work, ignore_errors=True)
    try:
        ctx.python(
            "benchmarks.luke.luke_entities",
            "--work",
            work,
            "--corpus",
            ctx.inputs / "corpus",
            "--data",
            ctx.inputs / "ner",
            "--pretrain-steps",
            s["steps"],
            "--pretrain-batch",
            s["batch"],
            "--seq",
            s["chunk"],
            "--seeds",
            s["seeds"],
            "--train-limit",
            s["train_limit"],
            "--max-eval",
            s["max_eval"],
            "--epochs",
            s["epochs"],
            "--max-span-length",
            s["max_span"],
            "--mep-chunks",
            s["mep_chunks"],
            "--name",
            "gpu_luke_entities",
            "--metric-prefix",
            "gpu_",
        )
    except StageTimeout as exc:  # say how far it got, for the next budget
        done = [
            r
            for r in ("luke", "luke-reduced", "words-only-span", "token")
            if (work / "ner" / r / "results.json").is_file()
        ]
        pre = "; ".join(run_progress(work / "pretrain" / r) for r in ("luke", "luke-reduced"))
        raise StageTimeout(f"{exc} (pretrain {pre}; NER rows done: {', '.join(done) or 'none'})") from None
    m = ctx.read_result("gpu_luke_entities")["metrics"]
    out = {k: float(v) for k, v in m.items() if isinstance(v, int | float)}
    if "gpu_luke_ner_f1" in out and "gpu_word_only_token_ner_f1" in out:
        out["gpu_luke_minus_word_f1"] = out["gpu_luke_ner_f1"] - out["gpu_word_only_token_ner_f1"]
    return out
