"""One RAG QA run: a generator answers a question set in one mode, and the answers are scored.

Modes (`MODES`), each a row of a results table:
  closed-book  the question alone;
  rag          the top-k retrieved passages in the prompt (In-Context RALM / FlashRAG "standard");
  replug       one prompt per passage, next-token distributions mixed by the passage weights
               (softmax of retrieval score / `replug_temperature`) at every step;
  oracle       the question's gold passage alone; without one (data with no contexts), its
               best-ranked retrieved passage that holds an answer (questions with neither are left
               out, counted); its recall@1 is how often that passage holds an answer.
`run_rag` returns a `RagRun`: per-question records (question, answers, retrieved ids and scores,
the prompt, the answer, its scores, the passages' answer hits) and metrics in percent
(`ralm.rag.scoring.aggregate`) with seconds per question. `write_run` writes
`predictions.jsonl` and a `results.json` that `ralm table` reads.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from ralm.atomic import atomic_path, write_json_atomic
from ralm.errors import RalmError
from ralm.rag.generate import answer_text, greedy, passage_weights, replug
from ralm.rag.prompt import PromptBuilder, passage_text
from ralm.rag.scoring import aggregate, recall_hits, score_answer

__all__ = ["MODES", "RagConfig", "RagRun", "prompt_budget", "run_rag", "write_run"]

MODES = ("closed-book", "rag", "replug", "oracle")


@dataclass
class RagConfig:
    """How to prompt and decode: mode, passages per question, decoding length, batching."""

    mode: str = "rag"
    k: int = 3
    max_new_tokens: int = 20
    batch_size: int = 32
    max_prompt_tokens: int | None = None
    lang: str = "en"
    replug_temperature: float = 1.0
    chat: bool | None = None

    def check(self) -> None:
        """RalmError for a value no run can use."""
        if self.mode not in MODES:
            raise RalmError(f"--mode {self.mode}: choose one of {', '.join(MODES)}")
        if self.k < 1 or self.max_new_tokens < 1 or self.batch_size < 1:
            raise RalmError("-k, --max-new-tokens and --batch-size must be >= 1")
        if self.replug_temperature <= 0:
            raise RalmError(f"--replug-temperature {self.replug_temperature}: must be > 0")


@dataclass
class RagRun:
    """What `run_rag` produced: per-question records, metrics (percent), notes for the user."""

    records: list[dict]
    metrics: dict[str, float]
    notes: list[str] = field(default_factory=list)


def answer_bearing(question, passages: Sequence, lang: str = "en") -> str | None:
    """The text of the best-ranked passage that holds one of the question's answers, or None:
    the oracle passage of data without gold passages (the chunk an oracle retriever would give)."""
    for p in passages:
        text = passage_text(p.title, p.text)
        if recall_hits([text], question.answers, regex=question.regex, lang=lang)[0]:
            return text
    return None


def prompt_budget(lm, cfg: RagConfig) -> int:
    """Prompt tokens allowed: --max-prompt-tokens, else the LM's positions minus the answer's room."""
    if cfg.max_prompt_tokens is not None:
        return cfg.max_prompt_tokens
    limit = lm.max_positions or 2048
    return max(64, min(limit, 8192) - cfg.max_new_tokens)


def run_rag(
    lm,
    questions: Sequence,
    passages: Sequence[Sequence] | None,
    cfg: RagConfig,
    *,
    fewshot: Sequence[tuple[str, str]] = (),
    progress: bool = False,
) -> RagRun:
    """Answer `questions` (RagQuestion) with `lm` (FrozenLM) in `cfg.mode` and score the answers.

    passages: per question its ranked `Hit`s (needed by rag/replug; used for recall otherwise).
    """
    from ralm.progress import tqdm

    cfg.check()
    notes: list[str] = []
    if cfg.mode in ("rag", "replug") and passages is None:
        raise RalmError(f"--mode {cfg.mode} needs passages: pass --index or --retrieved")
    qs = list(questions)
    ps = list(passages) if passages is not None else None
    if cfg.mode == "oracle":
        golds = [
            q.gold or (answer_bearing(q, ps[i], cfg.lang) if ps is not None else None)
            for i, q in enumerate(qs)
        ]
        keep = [i for i, g in enumerate(golds) if g]
        if not keep:
            raise RalmError(
                "--mode oracle needs gold passages: a SQuAD file (its contexts) has them, or retrieved "
                "passages of which one holds the answer"
            )
        n_found = sum(1 for i in keep if not qs[i].gold)
        if n_found:
            notes.append(
                f"oracle: {n_found} questions without a gold passage use their best-ranked retrieved passage that holds an answer"
            )
        if len(keep) < len(qs):
            notes.append(f"oracle: {len(qs) - len(keep)} questions without a gold passage left out")
        qs = [replace(qs[i], gold=golds[i]) for i in keep]
        ps = [ps[i] for i in keep] if ps is not None else None
    builder = PromptBuilder(lm.tokenizer, prompt_budget(lm, cfg), chat=cfg.chat, fewshot=fewshot)
    texts = [[passage_text(p.title, p.text) for p in row[: cfg.k]] for row in ps] if ps is not None else None
    t0 = time.perf_counter()
    prompts: list[list[int]] = []
    groups: list[list[list[int]]] = []
    weights = []
    for i, q in enumerate(qs):
        if cfg.mode == "closed-book":
            prompts.append(builder.ids(q.question, []))
        elif cfg.mode == "oracle":
            prompts.append(builder.ids(q.question, [q.gold]))
        elif cfg.mode == "rag":
            prompts.append(builder.ids(q.question, texts[i]))
        else:
            group = [builder.ids(q.question, [t]) for t in texts[i]] or [builder.ids(q.question, [])]
            groups.append(group)
            scores = [p.score for p in ps[i][: cfg.k]] or [0.0]
            weights.append(passage_weights(scores, cfg.replug_temperature))
            prompts.append(group[0])
    prompt_seconds = time.perf_counter() - t0
    if builder.truncated:
        notes.append(
            f"{builder.truncated} prompts had their passages cut to fit {builder.max_prompt_tokens} tokens"
        )
    with tqdm(total=len(qs), disable=not progress, unit="question", desc=cfg.mode) as bar:
        t1 = time.perf_counter()
        kw = {"max_new_tokens": cfg.max_new_tokens, "batch_size": cfg.batch_size, "progress": bar.update}
        if cfg.mode == "replug":
            gen = replug(lm, groups, weights, **kw)
        else:  # the answer is the first line: decoding stops there (the same answer, fewer tokens)
            gen = greedy(lm, prompts, **kw, first_line=True)
        gen_seconds = time.perf_counter() - t1
    records, scores, hits = [], [], []
    for i, q in enumerate(qs):
        answer = answer_text(lm.tokenizer, gen[i])
        s = score_answer(answer, q.answers, regex=q.regex, lang=cfg.lang)
        rec = {"id": q.id, "question": q.question, "answers": q.answers, "prediction": answer, **s}
        if cfg.mode == "oracle":  # recall@1: how often the gold passage holds an answer
            h = recall_hits([q.gold], q.answers, regex=q.regex, lang=cfg.lang)
            hits.append(h)
            rec["answer_in_passages"] = h
        elif ps is not None and cfg.mode != "closed-book":
            h = recall_hits(
                [passage_text(p.title, p.text) for p in ps[i]], q.answers, regex=q.regex, lang=cfg.lang
            )
            hits.append(h)
            rec["retrieved"] = [p.id for p in ps[i][: cfg.k]]
            rec["retrieval_scores"] = [round(p.score, 6) for p in ps[i][: cfg.k]]
            rec["answer_in_passages"] = h[: cfg.k]
        if cfg.mode == "replug":
            rec["weights"] = [round(float(w), 6) for w in weights[i]]
        rec["prompt"] = lm.tokenizer.decode(prompts[i])
        records.append(rec)
        scores.append(s)
    metrics = aggregate(scores, hits if hits else None)
    n = max(len(qs), 1)
    metrics["seconds_per_question"] = (prompt_seconds + gen_seconds) / n
    metrics["generation_seconds"] = gen_seconds
    metrics["new_tokens"] = float(sum(len(g) for g in gen))
    return RagRun(records, metrics, notes)


def write_run(
    out: str | os.PathLike,
    run: RagRun,
    cfg: RagConfig,
    *,
    name: str,
    data: str,
    lm_name: str,
    dataset: str | None = None,
    retriever: str | None = None,
) -> Path:
    """OUT/predictions.jsonl and OUT/results.json (the `ralm table` layout), each written atomically."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    with atomic_path(out / "predictions.jsonl") as tmp, tmp.open("w", encoding="utf-8") as f:
        for r in run.records:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
    results = {  # one run, no seeds: `ralm table` reads its metrics as they are (tasks.tables.summary_of)
        "task": "rag-qa",
        "name": name,
        "dataset": dataset,
        "data": data,
        "format": "open-qa",
        "retrieval": cfg.mode != "closed-book",
        "primary": "em",
        "mode": cfg.mode,
        "lm": lm_name,
        "retriever": retriever,
        "config": asdict(cfg),
        "metrics": run.metrics,
        "notes": run.notes,
        "seconds": run.metrics["generation_seconds"],
    }
    write_json_atomic(out / "results.json", results, ensure_ascii=False)
    return out
