"""realm_learns.py's `explain` stage: what the frozen reader's preference among its candidates is made of.

The `cached` stage showed that the query tower fits the reader's ranking of its own training queries
(Spearman 0.6-0.7) but not of held-out ones (0.03). Is the reader's preference noise, or does it
follow something a retriever could see? This stage reads the reader's cached scores (LANG-cached's
scores-*.jsonl, the training queries; LANG-diag0's records, the held-out ones: each span's top 8
dense chunks and the null document with the reader's log p(y|x,z)) and the corpus's chunk table, and
asks of each candidate:

* `dense score`: today's retriever (the record's log p(z|x) over the 8);
* `in BM25 top 8`: the chunk is also among the span's 8 best BM25 chunks;
* `same article`: the chunk comes from the query chunk's article;
* `closeness`: 1 / (1 + the distance in chunks) within the article, 0 in another one;
* `holds the answer`: the masked span occurs in the chunk (what a retriever has to find; it reads
  the answer, so it is an oracle feature).

Three tables, no model is run:

1. Each feature's within-span Spearman with the reader's content log-likelihood over the 8 (the
   `score_utility_agreement` of the diagnosis: mean over spans, bootstrap 95% interval, spans where
   both vary) and how often its top chunk is the reader's best.
2. The reader's gain over closed-book (content nats a span) by group of chunk: holds the answer or
   not; adjacent, 2-3, 4-10, farther in the same article, another article.
3. The content-token ratio to closed-book of a retriever whose p(z|x) over the 8 and the null is
   softmax(w . features, b for the null), w and b fitted on the training queries (least content NLL)
   and scored on the held-out ones with the paired bootstrap: today's scores, each feature, the
   features a retriever can see together, and with the answer.

Writes benchmarks/results/realm_learns_explain.json and .md.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from benchmarks.realm.realm_learns_cached import answer_flags
from benchmarks.realm.realm_learns_report import span_records

FEATURES = ("dense_score", "in_bm25_top8", "same_article", "closeness", "holds_answer")
LABELS = {
    "dense_score": "dense score (today's retriever)",
    "in_bm25_top8": "in the BM25 top 8",
    "same_article": "same article as the query",
    "closeness": "closeness in the article, 1 / (1 + distance)",
    "holds_answer": "holds the answer (oracle)",
}
TOP = 3  # the run's k - 1: the chunks the reader reads beside the null
GROUPS = ("adjacent", "2-3 apart", "4-10 apart", "same article, farther", "another article")
# the retrievers of table 3: the features each one's p(z|x) is a softmax of
MODELS = {
    "uniform": (),
    "dense_score": ("dense_score",),
    "same_article": ("same_article",),
    "closeness": ("closeness",),
    "seen": ("dense_score", "in_bm25_top8", "same_article", "closeness"),
    "holds_answer": ("holds_answer",),
    "seen+answer": ("dense_score", "in_bm25_top8", "same_article", "closeness", "holds_answer"),
}
MODEL_LABELS = {
    "uniform": "uniform over the 8, a fitted null logit",
    "dense_score": "today's scores, fitted scale and null",
    "same_article": "same article",
    "closeness": "closeness",
    "seen": "all a retriever can see: dense, BM25, same article, closeness",
    "holds_answer": "holds the answer (oracle)",
    "seen+answer": "all of the above and the answer (oracle)",
}


def chunk_table(store: Path) -> tuple[np.ndarray, np.ndarray]:
    """(article, position) of every chunk id of a corpus store, as two arrays indexed by chunk id."""
    import pyarrow.parquet as pq

    parts = sorted((store / "chunks").glob("*.parquet"))
    t = pq.read_table(parts, columns=["id", "article", "position"]) if parts else None
    if t is None or t.num_rows == 0:
        raise SystemExit(f"{store}: no chunks; build the corpus first")
    ids = t.column("id").to_numpy()
    article = np.full(ids.max() + 1, -1, dtype=np.int64)
    position = np.zeros(ids.max() + 1, dtype=np.int64)
    article[ids] = t.column("article").to_numpy()
    position[ids] = t.column("position").to_numpy()
    return article, position


def candidate_features(records: list[dict], article: np.ndarray, position: np.ndarray) -> dict:
    """Per span (N) and candidate (R, the reader's chunks without the null): the features, the reader's
    content log-likelihood `lp` (N, R), the null's `lp_null` (N,), the closed-book `closed` (N,) and
    the content tokens `tokens` (N,); `distance` (N, R) in chunks, -1 for another article."""
    R = len(records[0]["reader_docs"]) - 1
    docs = np.array([r["reader_docs"][:R] for r in records], dtype=np.int64)
    src = np.array([r["chunk"] for r in records], dtype=np.int64)[:, None]
    same = article[docs] == article[src]
    dist = np.where(same, np.abs(position[docs] - position[src]), -1)
    holds = np.array([answer_flags(r) for r in records], dtype=bool)
    in_bm25 = np.array(
        [np.isin(row, r["candidates"]["bm25"][:8]) for r, row in zip(records, docs, strict=True)]
    )
    lp = np.array([r["lp_content"] for r in records], dtype=np.float64)
    return {
        "dense_score": np.array([r["log_p_z_r"][:R] for r in records], dtype=np.float64),
        "in_bm25_top8": in_bm25.astype(np.float64),
        "same_article": same.astype(np.float64),
        "closeness": np.where(same, 1.0 / (1.0 + np.maximum(dist, 0)), 0.0),
        "holds_answer": holds.astype(np.float64),
        "distance": dist,
        "lp": lp[:, :R],
        "lp_null": lp[:, R],
        "closed": -np.array([r["closed_content"] for r in records], dtype=np.float64),
        "tokens": np.array([r["n_content"] for r in records], dtype=np.float64),
    }


def group_of(distance: np.ndarray) -> np.ndarray:
    """GROUPS' index of each candidate from its distance in chunks (-1: another article)."""
    g = np.full(distance.shape, 4)
    g[(distance >= 11)] = 3
    g[(distance >= 4) & (distance <= 10)] = 2
    g[(distance >= 2) & (distance <= 3)] = 1
    g[distance == 1] = 0
    return g


def _design(f: dict, names: tuple[str, ...]) -> np.ndarray:
    """(N, R, F) features of a model; the dense score centred per span (its level is the null's job)."""
    cols = []
    for n in names:
        x = f[n]
        if n == "dense_score":
            x = x - x.mean(1, keepdims=True)
        cols.append(x)
    return np.stack(cols, -1) if cols else np.zeros((*f["lp"].shape, 0))


def _nll(theta: np.ndarray, X: np.ndarray, f: dict, top: int | None = None) -> np.ndarray:
    """(N,) content NLL of each span under p(z|x) = softmax(X w over the R chunks, b for the null);
    `top`: over the `top` chunks of highest X w and the null only (a retriever that reads k of them;
    ties broken by the dense order)."""
    from scipy.special import logsumexp

    w, b = theta[:-1], theta[-1]
    z = X @ w
    if top is not None:
        order = np.argsort(-z, axis=1, kind="stable")[:, :top]
        keep = np.zeros(z.shape, dtype=bool)
        np.put_along_axis(keep, order, True, axis=1)
        z = np.where(keep, z, -np.inf)
    logits = np.concatenate([z, np.full((X.shape[0], 1), b)], 1)
    lp = np.concatenate([f["lp"], f["lp_null"][:, None]], 1)
    return -(logsumexp(logits + lp, axis=1) - logsumexp(logits, axis=1))


def fit(f: dict, names: tuple[str, ...]) -> np.ndarray:
    """w and the null logit b of `names` that minimise the training spans' total content NLL."""
    from scipy.optimize import minimize

    X = _design(f, names)
    res = minimize(lambda t: _nll(t, X, f).sum(), np.zeros(X.shape[-1] + 1), method="L-BFGS-B")
    return res.x


def explain(work: Path, lang: str, store: Path) -> dict:
    """The three tables (see the module docstring) as a dict of plain numbers and rows."""
    from ralm.realm.inference.diagnose import score_utility_agreement, summarize
    from ralm.realm.inference.evaluate import paired_ratio_interval

    files = sorted((work / f"{lang}-cached").glob("scores-*-of-*.jsonl"))
    held_path = work / f"{lang}-diag0" / "diagnose_initial_queries.jsonl"
    if not files or not held_path.is_file():
        raise SystemExit(f"{work}: run `realm_learns.py diag0 {lang}` and `cached {lang} --part I/P` first")
    train = [r for p in files for r in span_records(p)]
    held = span_records(held_path)
    article, position = chunk_table(store)
    sets = {
        "train": candidate_features(train, article, position),
        "held": candidate_features(held, article, position),
    }
    out: dict = {"train_spans": len(train), "held_spans": len(held), "agreement": {}, "gain": {}, "fits": {}}
    for split, f in sets.items():
        out["agreement"][split] = {n: score_utility_agreement(f[n], f["lp"]) for n in FEATURES}
        g = group_of(f["distance"])
        gain = f["lp"] + f["closed"][:, None]  # content nats a span: log p(y|x,z) - log p(y|x)
        rows = {
            name: {"nats": float(gain[g == i].mean()), "candidates": int((g == i).sum())}
            for i, name in enumerate(GROUPS)
        }
        for value, name in ((1.0, "holds the answer"), (0.0, "does not hold it")):
            sel = f["holds_answer"] == value
            rows[name] = {"nats": float(gain[sel].mean()), "candidates": int(sel.sum())}
        rows["null document"] = {"nats": float((f["lp_null"] + f["closed"]).mean()), "candidates": len(gain)}
        out["gain"][split] = rows
    tr, he = sets["train"], sets["held"]
    for name, names in MODELS.items():
        theta = fit(tr, names)
        r, lo, hi = paired_ratio_interval(_nll(theta, _design(he, names), he), he["closed"], he["tokens"])
        rt = paired_ratio_interval(_nll(theta, _design(tr, names), tr), tr["closed"], tr["tokens"])[0]
        r3, lo3, hi3 = paired_ratio_interval(
            _nll(theta, _design(he, names), he, top=TOP), he["closed"], he["tokens"]
        )
        out["fits"][name] = {
            "ratio": r,
            "low": lo,
            "high": hi,
            "ratio_top3": r3,
            "low_top3": lo3,
            "high_top3": hi3,
            "train_ratio": rt,
            "weights": {n: float(w) for n, w in zip(names, theta[:-1], strict=True)},
            "null_logit": float(theta[-1]),
        }
    # the run's own p(z|x) over the 8 and the null as recorded, and the best of those 9 documents:
    # the diagnosis's own rows (K = 9)
    K9 = summarize(held, k=len(held[0]["log_p_z_k"]) - 1)["ratios"]["content"]["K=9"]
    for name, row in (("run", "run"), ("best_of_8_and_null", "oracle")):
        out["fits"][name] = {**K9[row], "weights": {}}
    return out


def metrics_of(lang: str, e: dict) -> dict[str, float]:
    """The plain numbers of `explain`'s result under LANG-prefixed names."""
    m: dict[str, float] = {}
    for n in FEATURES:
        a = e["agreement"]["held"][n]
        m[f"{lang}_explain_spearman_{n}"] = a["spearman"]
        m[f"{lang}_explain_spearman_{n}_train"] = e["agreement"]["train"][n]["spearman"]
        m[f"{lang}_explain_top_agreement_{n}"] = a["top_agreement"]
    for name, row in e["gain"]["held"].items():
        m[f"{lang}_explain_gain_nats_{name.replace(' ', '_').replace(',', '')}"] = row["nats"]
    for name, row in e["fits"].items():
        m[f"{lang}_explain_content_ratio_{name.replace('+', '_and_')}"] = row["ratio"]
        if "ratio_top3" in row:
            m[f"{lang}_explain_content_ratio_top3_{name.replace('+', '_and_')}"] = row["ratio_top3"]
    return m


def markdown(lang: str, e: dict) -> list[str]:
    """The report's section for one language."""
    lines = [
        f"## {lang}: {e['train_spans']} training spans ({lang}-cached), {e['held_spans']} held-out (diag0); the reader's dense top 8 and the null",
        "",
        "### 1. Does the feature rank the chunks as the reader does? (within-span Spearman with the content log-likelihood; 95% interval)",
        "",
        "| feature | held-out Spearman | spans | its top chunk is the reader's best (chance 0.125) | training Spearman |",
        "|---|---|---|---|---|",
    ]
    for n in FEATURES:
        a, t = e["agreement"]["held"][n], e["agreement"]["train"][n]
        lines.append(
            f"| {LABELS[n]} | {a['spearman']:.3f} [{a['spearman_low']:.3f}, {a['spearman_high']:.3f}] | "
            f"{a['spans']} | {a['top_agreement']:.3f} | {t['spearman']:.3f} |"
        )
    lines += [
        "",
        "### 2. What a chunk gives the reader: content log-likelihood over closed-book, nats a span",
        "",
        "| chunk | held-out | candidates | training | candidates |",
        "|---|---|---|---|---|",
    ]
    for name, row in e["gain"]["held"].items():
        t = e["gain"]["train"][name]
        lines.append(
            f"| {name} | {row['nats']:+.3f} | {row['candidates']} | {t['nats']:+.3f} | {t['candidates']} |"
        )
    lines += [
        "",
        "### 3. A retriever made of the features: content ratio to closed-book over the 8 + null, fitted on the training spans, held-out with the paired 95% interval",
        "",
        "| p(z\\|x) | held-out ratio | held-out ratio, its top 3 + null | training ratio | weights | null logit |",
        "|---|---|---|---|---|---|",
    ]
    for name in ("run", *MODELS, "best_of_8_and_null"):
        row = e["fits"][name]
        label = {
            "run": "the run's own p(z|x) as recorded (step 0)",
            "best_of_8_and_null": "best of the 8 and the null (oracle)",
        }.get(name, MODEL_LABELS.get(name, name))
        w = ", ".join(f"{k} {v:+.2f}" for k, v in row["weights"].items())
        tr = f"{row['train_ratio']:.3f}" if "train_ratio" in row else ""
        nl = f"{row['null_logit']:+.2f}" if "null_logit" in row else ""
        label = label.replace("|", "\\|")
        t3 = (
            f"{row['ratio_top3']:.3f} [{row['low_top3']:.3f}, {row['high_top3']:.3f}]"
            if "ratio_top3" in row
            else ""
        )
        lines.append(
            f"| {label} | {row['ratio']:.3f} [{row['low']:.3f}, {row['high']:.3f}] | {t3} | {tr} | {w} | {nl} |"
        )
    return lines + [""]


def explain_stage(work: Path, langs: tuple[str, ...], store_of) -> Path | None:
    """Write benchmarks/results/realm_learns_explain.json and .md for each language whose cached
    scores and diag0 exist; None when none has."""

    from benchmarks.common import RESULTS, write_result

    metrics: dict[str, float] = {}
    sections: dict[str, dict] = {}
    lines = ["# What REALM's reader rewards in a chunk (issue 45, `realm_learns.py explain`)", ""]
    for lang in langs:
        if not (work / f"{lang}-diag0" / "diagnose_initial_queries.jsonl").is_file():
            continue
        if not list((work / f"{lang}-cached").glob("scores-*-of-*.jsonl")):
            continue
        e = explain(work, lang, store_of(work, lang))
        sections[lang] = e
        metrics.update(metrics_of(lang, e))
        lines += markdown(lang, e)
    if not sections:
        return None
    cmd = "python -m benchmarks.realm.realm_learns explain (after diag0 en and cached en --part I/P)"
    out = write_result("realm_learns_explain", cmd, metrics, {}, sections=sections)
    (RESULTS / "realm_learns_explain.md").write_text("\n".join(lines), encoding="utf-8")
    return out
