"""How often a salient span of a corpus recurs in other chunks (realm_causal.py's corpus statistics)."""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from pathlib import Path


def span_recurrence(store_dir: Path, sample: int = 2000, seed: int = 0) -> dict:
    """Per salient-span kind: how many spans, and the share of them (in `sample` random chunks) whose
    text (case-folded) occurs in another chunk of the same article / of another article."""
    import random

    from ralm.corpus.docstore import DocStore

    store = DocStore(store_dir)
    rows = [
        r
        for b in store.iter_batches(2048, columns=["id", "article", "text", "salient"])
        for r in zip(b["id"], b["article"], b["text"], b["salient"], strict=True)
    ]
    texts = [r[2].casefold() for r in rows]
    index: dict[str, set[int]] = defaultdict(set)
    for i, t in enumerate(texts):
        for w in set(re.findall(r"\w+", t)):
            index[w].add(i)
    total: Counter = Counter()
    hits: Counter = Counter()
    for cid, art, text, salient in random.Random(seed).sample(rows, min(sample, len(rows))):
        for s in salient:
            span = text[s["start"] : s["end"]].casefold()
            words = re.findall(r"\w+", span)
            if not words:
                continue
            cand = set.intersection(*(index[w] for w in words)) - {cid}
            found = [j for j in cand if span in texts[j]]
            kind = s["source"]
            total[kind] += 1
            hits[kind, "same"] += any(rows[j][1] == art for j in found)
            hits[kind, "other"] += any(rows[j][1] != art for j in found)
    counts = store.manifest.get("counts", {}).get("salient", {})
    return {
        k: {
            "spans_in_corpus": counts.get(k),
            "sampled": total[k],
            "recurs_same_article": round(hits[k, "same"] / total[k], 4),
            "recurs_other_article": round(hits[k, "other"] / total[k], 4),
        }
        for k in sorted(total)
    }
