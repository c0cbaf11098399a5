"""Training pairs for a dense retriever from the formats users have: SQuAD, DPR, BEIR and open-QA files.

Every reader returns a `PairSet`: questions with the ids of their positive passages (best
first), given hard negatives where the format has them, the answers where it has them, and the
passages those ids point into (`ralm.retrieval.passages`).

- **SQuAD v1.1 JSON** over a DocStore built from the contexts: the positive is the chunk of the
  question's context that holds the answer's first character (a chunk that does not hold the
  whole answer is skipped for the next one; a question whose answer no chunk holds is counted and
  dropped). A context missing from the DocStore, or an answer missing from its context, is an error.
- **DPR JSON** (`[{"question", "answers", "positive_ctxs", "hard_negative_ctxs", ...}]`): the
  contexts are the passages (deduplicated by `passage_id`, else by title and text), or, with a
  DocStore, each context is found there by its text (missing = error).
- **BEIR folder** (`corpus.jsonl`, `queries.jsonl`, `qrels/train.tsv`): the corpus is the passages;
  a qrels row with score > 0 is a positive; a row naming an unknown query or document is an error.
- **Open-QA** questions with answers (NQ-open JSONL, DPR TSV, WebQuestions) over a DocStore: the
  positives are the chunks holding an answer among BM25's top `depth` (DPR's rule for NQ when no
  gold passage is known), best-ranked first; questions with none are counted and dropped.

`detect_pair_format(path)` tells them apart. Errors name the file and row and end in the fix.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from ralm.answers import has_answer
from ralm.corpus.docstore import DocStore
from ralm.errors import RalmError
from ralm.retrieval.passages import ContextLocator, ListPassages, StorePassages, check_nonempty

FORMATS = ("squad", "dpr", "beir", "openqa")


@dataclass
class TrainExample:
    """One question: its positive passage ids (best first), given negatives, answers (None = unknown)."""

    query: str
    positives: list[int]
    negatives: list[int] = field(default_factory=list)
    answers: list[str] | None = None
    qid: str = ""


@dataclass
class PairSet:
    """Training (or dev) questions over one set of passages."""

    examples: list[TrainExample]
    passages: StorePassages | ListPassages
    format: str
    source: str
    notes: list[str] = field(default_factory=list)


def detect_pair_format(path: Path) -> str:
    """ "beir" for a folder, "squad" for JSON with "data", "dpr" for a JSON list with "positive_ctxs",
    "openqa" otherwise (JSONL / TSV / JSON list of questions with answers)."""
    if path.is_dir():
        return "beir"
    if not path.is_file():
        raise RalmError(f"{path}: no such file or folder; pass training pairs (SQuAD, DPR, BEIR or open-QA)")
    with open(path, encoding="utf-8", errors="replace") as f:
        head = f.read(65536)
    from ralm.formats.squad import looks_like_squad

    if looks_like_squad(head):
        return "squad"
    if head.lstrip().startswith("[") and '"positive_ctxs"' in head:
        return "dpr"
    return "openqa"


def read_pairs(
    path: str | Path,
    store: DocStore | None,
    fmt: str | None = None,
    *,
    lang: str = "en",
    bm25_options: dict | None = None,
    depth: int = 100,
    bm25=None,
) -> PairSet:
    """Read training pairs from `path` in `fmt` (None = detect), over `store` where the format needs one.

    bm25_options / depth: how open-QA positives are mined (BM25 analysis, how deep to look);
    bm25: a ready BM25Searcher over `store` to reuse.
    """
    path = Path(path)
    fmt = fmt or detect_pair_format(path)
    if fmt not in FORMATS:
        raise RalmError(f"--format {fmt!r}: choose one of {', '.join(FORMATS)}")
    if fmt in ("squad", "openqa") and store is None:
        raise RalmError(
            f"{path}: {fmt} questions need the corpus their passages come from; pass --corpus STORE "
            "(a DocStore built with `ralm corpus build` from the contexts or your documents)"
        )
    if fmt == "beir" and store is not None:
        raise RalmError(f"{path}: a BEIR folder brings its own corpus (corpus.jsonl); drop --corpus")
    if fmt == "squad":
        return _squad(path, store, lang)
    if fmt == "dpr":
        return _dpr(path, store)
    if fmt == "beir":
        return _beir(path)
    return _openqa(path, store, lang, bm25_options or {}, depth, bm25)


# ----------------------------------------------------------------------------- SQuAD
def _squad(path: Path, store: DocStore, lang: str) -> PairSet:
    from ralm.formats.common import read_text
    from ralm.formats.squad import read_squad

    counts: Counter = Counter()
    questions = read_squad(path, read_text(path, counts), "extractive-qa", counts)
    where = ContextLocator(store)
    passages = StorePassages(store)
    examples, split = [], 0
    for n, ex in enumerate(questions, start=1):
        art = where.article(ex.context)
        if art is None:
            raise RalmError(
                f"{path}: question {ex.id or n}: its context ({ex.context[:40]!r}...) is not an article of "
                f"{store.root}; build the DocStore from this file's contexts (one JSONL line per context)"
            )
        positives: list[int] = []
        for a, s in zip(ex.answers, ex.answer_starts, strict=True):
            first = where.chunk_at(art, ex.context, s)
            for cid in (first, first + 1):
                if cid < len(store) and cid not in positives and has_answer(passages.text(cid), [a], lang):
                    positives.append(cid)
                    break
        if not positives:
            split += 1
            continue
        examples.append(TrainExample(ex.question, positives, answers=list(ex.answers), qid=ex.id))
    notes = []
    if counts.get("repaired"):
        notes.append(f"{counts['repaired']} answer offsets repaired to the nearest occurrence")
    if split:
        notes.append(f"{split} questions dropped: their answer lies across two chunks")
    return PairSet(examples, passages, "squad", str(path), notes)


# ----------------------------------------------------------------------------- DPR
def _load_json(path: Path):
    try:
        return json.loads(path.read_text(encoding="utf-8-sig"))
    except UnicodeDecodeError as exc:
        raise RalmError(f"{path}: not UTF-8 text (byte {exc.start}); save it as UTF-8") from None
    except json.JSONDecodeError as exc:
        raise RalmError(f"{path}: not valid JSON (line {exc.lineno}: {exc.msg})") from None


def _dpr(path: Path, store: DocStore | None) -> PairSet:
    rows = _load_json(path)
    if not isinstance(rows, list):
        raise RalmError(f'{path}: DPR training data is a JSON list of {{"question", "positive_ctxs", ...}}')
    where = ContextLocator(store) if store is not None else None
    titles: list[str] = []
    texts: list[str] = []
    keys: list[str] = []
    key_ids: dict[str, int] = {}

    def passage(ctx, at: str) -> int:
        if not isinstance(ctx, dict) or not isinstance(ctx.get("text"), str):
            raise RalmError(f'{at}: a context needs a "text" string; fix the row or remove it')
        title = ctx.get("title") if isinstance(ctx.get("title"), str) else ""
        check_nonempty(title, ctx["text"], at)
        if where is not None:
            cid = where.chunk_of(ctx["text"])
            if cid is None:
                raise RalmError(
                    f"{at}: passage {ctx['text'][:40]!r}... is not a chunk of {store.root}; pass the DocStore "
                    "the passages come from, or drop --corpus to train on the file's own passages"
                )
            return cid
        pid = ctx.get("passage_id", ctx.get("psg_id"))
        key = f"id:{pid}" if pid not in (None, "") else f"tx:{title}\x00{ctx['text']}"
        if key not in key_ids:
            key_ids[key] = len(texts)
            titles.append(title)
            texts.append(ctx["text"])
            keys.append(str(pid) if pid not in (None, "") else str(len(texts) - 1))
        return key_ids[key]

    examples = []
    for n, row in enumerate(rows):
        at = f"{path}: row {n}"
        if (
            not isinstance(row, dict)
            or not isinstance(row.get("question"), str)
            or not row["question"].strip()
        ):
            raise RalmError(f'{at}: needs a non-empty "question" string')
        pos = row.get("positive_ctxs")
        if not isinstance(pos, list) or not pos:
            raise RalmError(f'{at}: "positive_ctxs" is missing or empty; give at least one positive passage')
        positives = list(dict.fromkeys(passage(c, f"{at}.positive_ctxs[{j}]") for j, c in enumerate(pos)))
        negs = []
        for name in ("hard_negative_ctxs", "negative_ctxs"):
            for j, c in enumerate(row.get(name) or []):
                negs.append(passage(c, f"{at}.{name}[{j}]"))
        answers = row.get("answers")
        answers = [str(a) for a in answers] if isinstance(answers, list) and answers else None
        examples.append(
            TrainExample(
                row["question"], positives, list(dict.fromkeys(negs)), answers, str(row.get("id", n))
            )
        )
    passages = StorePassages(store) if store is not None else ListPassages(titles, texts, keys, str(path))
    return PairSet(examples, passages, "dpr", str(path))


# ----------------------------------------------------------------------------- BEIR
def _jsonl(path: Path) -> list[tuple[int, dict]]:
    if not path.is_file():
        raise RalmError(f"{path}: missing; a BEIR folder has corpus.jsonl, queries.jsonl and qrels/*.tsv")
    out = []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                raise RalmError(f"{path}:{n}: not valid JSON ({exc.msg})") from None
            if not isinstance(obj, dict) or "_id" not in obj:
                raise RalmError(f'{path}:{n}: expected an object with "_id"')
            out.append((n, obj))
    return out


def beir_split(folder: Path, split: str) -> Path | None:
    """qrels/SPLIT.tsv of a BEIR folder, or None."""
    p = folder / "qrels" / f"{split}.tsv"
    return p if p.is_file() else None


def _beir(folder: Path, split: str = "train", passages: ListPassages | None = None) -> PairSet:
    if passages is None:
        titles, texts, ids, seen = [], [], [], set()
        for n, obj in _jsonl(folder / "corpus.jsonl"):
            did = str(obj["_id"])
            if did in seen:
                raise RalmError(f"{folder / 'corpus.jsonl'}:{n}: document id {did!r} appears twice")
            seen.add(did)
            titles.append(str(obj.get("title") or ""))
            texts.append(str(obj.get("text") or ""))
            ids.append(did)
        passages = ListPassages(titles, texts, ids, str(folder))
    queries = {str(o["_id"]): str(o.get("text") or "") for _, o in _jsonl(folder / "queries.jsonl")}
    qrels = beir_split(folder, split)
    if qrels is None:
        raise RalmError(f"{folder}: no qrels/{split}.tsv; BEIR training needs one")
    positives: dict[str, list[int]] = {}
    with open(qrels, encoding="utf-8") as f:
        for n, line in enumerate(f, start=1):
            cols = line.rstrip("\n").split("\t")
            if n == 1 and cols[0] == "query-id":
                continue
            if not line.strip():
                continue
            if len(cols) < 3:
                raise RalmError(f"{qrels}:{n}: expected query-id<TAB>corpus-id<TAB>score")
            qid, did, score = cols[0], cols[1], cols[2]
            if qid not in queries:
                raise RalmError(
                    f"{qrels}:{n}: query {qid!r} is not in queries.jsonl; fix the row or the queries"
                )
            if did not in passages.by_id:
                raise RalmError(
                    f"{qrels}:{n}: document {did!r} is not in corpus.jsonl; fix the row or the corpus"
                )
            try:
                rel = float(score)
            except ValueError:
                raise RalmError(f"{qrels}:{n}: score {score!r} is not a number") from None
            if rel > 0:
                pid = passages.by_id[did]
                check_nonempty(passages.title(pid), passages.text(pid), f"{qrels}:{n}: document {did!r}")
                positives.setdefault(qid, []).append(pid)
    examples = []
    for qid, pos in positives.items():
        if not queries[qid].strip():
            raise RalmError(f"{folder / 'queries.jsonl'}: query {qid!r} is empty; give its text")
        examples.append(TrainExample(queries[qid], list(dict.fromkeys(pos)), qid=qid))
    return PairSet(examples, passages, "beir", str(folder))


def read_beir_dev(folder: Path, train: PairSet) -> PairSet | None:
    """The folder's qrels/dev.tsv over the training passages, or None when it has none."""
    if beir_split(folder, "dev") is None:
        return None
    return _beir(folder, "dev", train.passages)  # type: ignore[arg-type]


# ----------------------------------------------------------------------------- open-QA
def _openqa(path: Path, store: DocStore, lang: str, bm25_options: dict, depth: int, bm25) -> PairSet:
    from ralm.formats.common import read_text
    from ralm.formats.openqa import read_openqa

    counts: Counter = Counter()
    questions = read_openqa(path, read_text(path, counts), "open-qa", counts)
    for n, q in enumerate(questions, start=1):
        if not q.answers or not any(a.strip() for a in q.answers):
            raise RalmError(f"{path}: question {q.id or n} has no answer; give its answers or remove it")
    passages = StorePassages(store)
    bm25 = bm25 or passages.bm25(**bm25_options)
    top = bm25.search_text([q.question for q in questions], min(depth, len(store))).ids
    examples, missing = [], 0
    for q, row in zip(questions, top, strict=True):
        pos = [int(c) for c in row if has_answer(passages.text(int(c)), q.answers, lang)]
        if not pos:
            missing += 1
            continue
        examples.append(TrainExample(q.question, pos, answers=list(q.answers), qid=q.id))
    notes = [f"{missing} questions dropped: no answer in BM25's top {depth}"] if missing else []
    return PairSet(examples, passages, "openqa", str(path), notes)
