"""Norwegian text with a frozen causal LM: In-Context RALM and REPLUG over a Norwegian corpus.

Question: does `ralm lm-eval` work end to end on Norwegian Bokmål, and what does retrieval from a
corpus on the same subject do to perplexity? The LM is SmolLM2-135M, the only causal LM among the
offline resources (shared/RESOURCES.md); it was trained on English, so its Norwegian perplexity
is high, and what is measured is how much the retrieved Norwegian text helps it. A multilingual
LM (Gemma-3-270M, as the issue suggests) is not among the vetted offline resources; `ralm lm-eval
./gemma-dir text.txt ...` runs the same rows for anyone who has one.

Corpus: the Norwegian Debian corpus of benchmarks/data_prep/nordic_corpus.py (manpages-nb + the Debian Edu
manual's sections, one article per section). Evaluated text: the first --tokens SmolLM2 tokens of
the manual's sections from --first-section on, joined as "Title\\n\\ntext" blocks. Those sections
are in the corpus, so the 13-gram rule of `ralm lm-eval` (`--exclude auto`) removes them from
retrieval; the rest of the manual, on the same subject, stays. Retrieval: BM25 with Norwegian
stopwords + Snowball stemmer ("nb"), and plain BM25 ("none") beside it.

Rows (max length 512, chunk <= 128 tokens in front, query = last 32 tokens): none at stride 16; and
the same with max length 384 (the text context a document leaves); In-Context RALM at strides 16
and 64 (nb analysis) and 16 (plain BM25); REPLUG k = 4 at stride 16.

    .venv/bin/python -m benchmarks.lm.frozen_lm_nb [--tokens 2048] [--work DIR] [--cache DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from benchmarks.common import offline, script_command, write_result

offline()
from benchmarks.data_prep.nordic_corpus import build_jsonl, default_cache  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=2048, help="SmolLM2 tokens to evaluate (default 2048)")
    ap.add_argument("--first-section", type=int, default=40, help="manual section to start from (default 40)")
    ap.add_argument("--work", default="/tmp/ralm-bench-frozen-nb", help="corpus build directory")
    ap.add_argument("--cache", type=Path, default=default_cache(), help="where the .deb files go")
    args = ap.parse_args()

    import torch

    from ralm.corpus.build import BuildConfig, build_docstore
    from ralm.corpus.docstore import DocStore
    from ralm.frozen.evaluate import EvalConfig, Retrieval, evaluate
    from ralm.frozen.exclusion import article_chunk_ids, article_titles, overlapping_articles
    from ralm.frozen.lm import load_frozen_lm
    from ralm.frozen.retrieve import DocTokens, open_retriever
    from ralm.frozen.text import tokenize_eval_text

    def log(m: str) -> None:
        print(m, file=sys.stderr, flush=True)

    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "2")))
    t_begin = time.perf_counter()
    work = Path(args.work)
    src = work / "nordic_nb.jsonl"
    if not src.is_file():
        build_jsonl("nb", src, args.cache)
    store_dir = work / "store"
    if not (store_dir / "manifest.json").is_file():
        cfg = BuildConfig(auto_annotate=False, dates=False)
        build_docstore([src], store_dir, cfg, overwrite=True, progress=False, log=log)
    store = DocStore(store_dir)
    articles = [json.loads(line) for line in src.read_text(encoding="utf-8").splitlines()]
    manual = [a for a in articles if a["id"].startswith("edu-")]
    lm = load_frozen_lm("smollm2", device="cpu")
    body = "\n\n".join(f"{a['title']}\n\n{a['text']}" for a in manual[args.first_section :])
    text = tokenize_eval_text(body, lm.tokenizer, args.tokens)
    excluded = overlapping_articles(store, text.text)
    log(
        f"evaluating {len(text) - 1} tokens / {text.n_words} words; excluded {article_titles(store, excluded)}"
    )

    common = dict(max_length=512, doc_tokens=128, query_tokens=32)
    rows: dict[str, dict] = {}
    retrievers = {}
    for lang in ("nb", "none"):
        _, bm25, desc = open_retriever(corpus=store_dir, kind="bm25", lang=lang)
        retrievers[lang] = (
            Retrieval(bm25, DocTokens(store, lm.encode, 128), article_chunk_ids(store, excluded), desc),
            desc,
        )

    def row(name: str, cfg: EvalConfig, lang: str | None = None) -> None:
        ret = retrievers[lang][0] if lang else None
        res = evaluate(lm, text, cfg, ret)
        rows[name] = {
            "token_ppl": round(res.token_ppl, 3),
            "word_ppl": round(res.word_ppl, 3),
            "seconds": round(res.seconds["total"], 1),
            "tokens_per_s": round(res.tokens_per_s, 1),
            "blocks_with_docs": res.blocks_with_docs,
            "blocks": res.blocks,
        }
        log(
            f"{name:<22} token ppl {res.token_ppl:9.3f}  word ppl {res.word_ppl:9.3f}  {res.seconds['total']:6.1f} s"
        )

    row("none_s16", EvalConfig(mode="none", stride=16, max_length=512))
    row("none_s16_ctx384", EvalConfig(mode="none", stride=16, max_length=384))
    row("incontext_s16_bm25_nb", EvalConfig(mode="in-context", stride=16, **common), "nb")
    row("incontext_s64_bm25_nb", EvalConfig(mode="in-context", stride=64, **common), "nb")
    row("incontext_s16_bm25_plain", EvalConfig(mode="in-context", stride=16, **common), "none")
    row("replug_k4_s16_bm25_nb", EvalConfig(mode="replug", stride=16, k=4, **common), "nb")

    metrics = {
        "lm": "SmolLM2-135M-Instruct (English; the only offline causal LM)",
        "dtype": lm.dtype_name,
        "tokens_evaluated": len(text) - 1,
        "words_evaluated": text.n_words,
        "corpus_articles": store.manifest["counts"].get("articles"),
        "corpus_chunks": len(store),
        "evaluated_sections_from": args.first_section,
        "excluded_articles": article_titles(store, excluded),
        "retriever_nb": retrievers["nb"][1],
        "retriever_plain": retrievers["none"][1],
        "seconds_total": round(time.perf_counter() - t_begin, 1),
        "rows": rows,
    }
    base = rows["none_s16"]["token_ppl"]
    for name, r in rows.items():
        metrics[f"{name}_ppl_vs_none"] = round(r["token_ppl"] / base, 4)
    targets = {
        "incontext_s16_bm25_nb_ppl_vs_none": "< 1.0 (retrieval from the same subject helps; no bar in the issue)"
    }
    cmd = script_command(__file__, python="OMP_NUM_THREADS=2 .venv/bin/python")
    write_result("frozen_lm_nb", cmd, metrics, targets)
    print(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
