"""What retrieval_nordic.py prints and writes: corpus statistics and the recall tables (text and markdown)."""

from __future__ import annotations

SHORT = 32  # "short chunk": fewer text tokens than this
COLUMNS = [  # (metric suffix, table header)
    ("recall_at_1", "R@1"),
    ("recall_at_5", "R@5"),
    ("recall_at_20", "R@20"),
    ("ndcg_at_10", "nDCG@10"),
    ("rr_at_10", "RR@10"),
    ("hub_share_at_20", "hub@20"),
    ("top1_share", "top1"),
    ("distinct_at_20", "distinct@20"),
]


def store_stats(store) -> dict:
    """Chunks, articles and chunk-length figures (text tokens, no special tokens)."""
    import numpy as np
    import pyarrow.parquet as pq

    from ralm.corpus.stats import chunk_length_stats, sole_chunk_mask

    lengths = store.lengths()
    arts = pq.read_table(store.root / "articles.parquet", columns=["first_chunk", "n_chunks"])
    sole = sole_chunk_mask(
        arts.column("first_chunk").to_numpy(), arts.column("n_chunks").to_numpy(), len(lengths)
    )
    special = store.manifest["tokenizer"]["special_tokens_per_chunk"]
    s = chunk_length_stats(lengths, max(1, store.manifest["chunk_size"] - special), SHORT, sole)
    first = arts.column("first_chunk").to_numpy()
    n_chunks = arts.column("n_chunks").to_numpy()
    multi = n_chunks > 1
    last = np.zeros(len(lengths), dtype=bool)
    last[(first + n_chunks - 1)[multi]] = True  # the tail chunk of a multi-chunk article
    short = lengths < SHORT
    return {
        "chunks": len(store),
        "articles": int(arts.num_rows),
        "short_chunks": s.short,  # < 32 text tokens
        "short_chunks_sole": s.short_sole,  # of which the only chunk of a (short) article
        "short_chunks_last": int((short & last).sum()),  # ... the last chunk of a longer article
        "short_chunks_inner": int((short & ~last & ~sole).sum()),  # ... a first or middle chunk
        "median_chunk_tokens": s.median,
        "mean_chunk_tokens": round(s.mean, 2),
    }


def fmt(v: float) -> str:
    return f"{v:.3f}"


def table_lines(title: str, stats: dict, rows: dict, markdown: bool) -> list[str]:
    head = ["retriever"] + [h for _, h in COLUMNS]
    info = (
        f"{stats['questions']} questions, {stats['chunks']} chunks "
        f"({stats['short_chunks']} under {SHORT} tokens: {stats['short_chunks_sole']} whole articles, "
        f"{stats['short_chunks_last']} article tails, {stats['short_chunks_inner']} inside articles), "
        f"{stats['articles']} articles"
    )
    body = [[name] + [fmt(r[m]) for m, _ in COLUMNS] for name, r in rows.items()]
    if markdown:
        return [
            f"### {title}",
            "",
            info,
            "",
            "| " + " | ".join(head) + " |",
            "| " + " | ".join(["---"] + ["---:"] * len(COLUMNS)) + " |",
            *("| " + " | ".join(r) + " |" for r in body),
            "",
        ]
    widths = [max(len(x[i]) for x in [head, *body]) for i in range(len(head))]

    def line(r: list[str]) -> str:
        return "  ".join(
            c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True))
        )

    return [f"== {title}: {info}", line(head), *(line(r) for r in body), ""]
