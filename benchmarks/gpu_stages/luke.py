"""Stage 5: DaLUKE, entity-aware against word-only NER, at 10x the CPU pre-training steps (`luke_ner.py`).

The committed CPU table (`luke_ner.py`: 300 pre-training steps x 16 chunks of the 128-token enwiki
sample; WNUT-17 with 1,000 training sentences, 3 epochs, the first 300 test sentences; 5 seeds)
had every entity-aware row below the word-only MiniLM tagger (+ent 44.5, +auto+ent 42.9, word-only
53.5 F1). Here one entity-aware row, +auto+ent (DaLUKE's full recipe: links + auto-annotation,
entity width l = 120; the only rows whose masked-entity loss fell on the CPU), pre-trained 3,000
steps (10x) with the CPU run's batch, sequence length, seed and corpus, then fine-tuned on WNUT-17
exactly as there, against the word-only row; 3 seeds each (CPU: 5). Left out: Baseline, +auto,
+ent and the no-pre-training control. Metric: gpu_luke_minus_word_f1 = mean test entity F1 of
+auto+ent minus that of word-only: one row fixed in advance, not the best of several after the fact.

GPU time, estimated from the ops a step dispatches (profiled on the CPU), not measured on a card:
a pre-training step is launch-bound (~2,800 ops, ~3 ms of batch building on the CPU, host syncs),
~22 ms, so 3,000 steps ~65 s; one checkpoint, at the end (--checkpoint-every 0; the CPU run saved
one every 100 steps). NER per seed (375 steps, 3 dev and 1 test evaluations of 300 sentences):
~10 s for +auto+ent, ~4 s word-only, ~40 s for 3 seeds of both; process starts and loads
(this script, pretrain, 2 x NER, table) ~20 s. About 130 s in all, hence BUDGET_S. A stopped run
says how far pre-training got, its step time and which NER rows finished.

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

from gpu_stages.context import ROOT, StageContext, StageTimeout, run_progress

NAME = "luke"
TITLE = "DaLUKE +auto+ent (3,000 pre-training steps, 10x the CPU run) vs word-only MiniLM, WNUT-17 entity F1"
BUDGET_S = 150.0
MIN_S = 130.0
TARGETS = {"gpu_luke_minus_word_f1": "> 0"}

ROW = "auto+ent"
WNUT17 = ROOT.parent / "shared" / "data" / "wnut17"
FULL = {
    "chunk": 128, "articles": None, "steps": 3000, "batch": 16, "seeds": "1,2,3",
    "train_limit": 1000, "max_eval": 300, "epochs": 3, "max_span": 5,
}  # fmt: skip
TINY = {
    "chunk": 64, "articles": 1, "steps": 2, "batch": 2, "seeds": "1",
    "train_limit": 16, "max_eval": 6, "epochs": 1, "max_span": 3,
}  # fmt: skip


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
    shutil.copytree(ctx.inputs / "corpus", work / "corpus")  # luke_ner.py reuses work/corpus
    try:
        ctx.python(
            "luke_ner.py", "--work", work, "--data", ctx.inputs / "ner", "--rows", f"{ROW},word-only",
            "--pretrain-steps", s["steps"], "--pretrain-batch", s["batch"], "--seq", s["chunk"],
            "--checkpoint-every", 0, "--speed-repeats", 0, "--seeds", s["seeds"],
            "--train-limit", s["train_limit"], "--max-eval", s["max_eval"], "--epochs", s["epochs"],
            "--max-span-length", s["max_span"], "--name", "gpu_luke",
        )  # fmt: skip
    except StageTimeout as exc:  # say how far it got, for the next budget
        done = [r for r in (ROW, "word-only") if (work / "ner" / r / "results.json").is_file()]
        pre = run_progress(work / "pretrain" / ROW)
        raise StageTimeout(f"{exc} (pretrain {pre}; NER rows done: {', '.join(done) or 'none'})") from None
    m = ctx.read_result("gpu_luke")["metrics"]
    ent, word = m[f"{ROW}/f1_mean"], m["word-only/f1_mean"]
    out = {"gpu_luke_minus_word_f1": ent - word, "gpu_luke_auto_ent_f1": ent, "gpu_luke_word_f1": word}
    for key, name in (
        (f"{ROW}/f1_std", "auto_ent_f1_std"), ("word-only/f1_std", "word_f1_std"),
        (f"{ROW}/seeds", "seeds"), (f"{ROW}/steps", "pretrain_steps"), (f"{ROW}/seconds", "pretrain_seconds"),
        (f"{ROW}/seconds_per_step", "pretrain_seconds_per_step"),
        (f"{ROW}/mlm_loss_first20", "mlm_loss_first20"), (f"{ROW}/mlm_loss_last20", "mlm_loss_last20"),
        (f"{ROW}/mep_loss_first20", "mep_loss_first20"), (f"{ROW}/mep_loss_last20", "mep_loss_last20"),
        (f"{ROW}/ner_seconds", "auto_ent_ner_seconds"), ("word-only/ner_seconds", "word_ner_seconds"),
    ):  # fmt: skip
        if isinstance(m.get(key), int | float):
            out[f"gpu_luke_{name}"] = m[key]
    return out
