"""Issue 48, the DocStore's language as the default: `ralm eval-retrieval` over a Norwegian
DocStore with no --lang, against the analysis it used to fall back to (plain BM25), and --center
over the DocStore and over an index of it (the index's row used to be silently left out).

The DocStore is any `ralm corpus build --lang nb` of NorQuAD's contexts (runs/b45/pool from
`python -m benchmarks.realm.realm_causal corpus`); the questions are NorQuAD's validation set, each answer text
a string answer.

Run: python -m benchmarks.retrieval.lang_default [--store runs/b45/pool] [--work runs/lang_default]
Writes benchmarks/results/lang_default.json.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from benchmarks.common import ralm, script_command, write_result

NORQUAD_DEV = Path("../shared/data/norquad/all/validation_dataset_flattened.json")


def norquad_pairs(path: Path, out: Path) -> int:
    """NorQuAD's SQuAD-style JSON as JSONL {question, answers}; returns the number of questions."""
    data = json.loads(path.read_text(encoding="utf-8"))["data"]
    rows = []
    for article in data:
        for par in article["paragraphs"]:
            for qa in par["qas"]:
                answers = sorted({a["text"] for a in qa["answers"] if a["text"].strip()})
                if answers and not qa.get("is_impossible"):
                    rows.append({"question": qa["question"], "answers": answers})
    out.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return len(rows)


def shown(line: str) -> None:
    """What `ralm` says before a command: '$ PYTHON -m ralm ARGS' on stderr, the command as it runs."""
    print("$", sys.executable, "-m", line, file=sys.stderr)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--store", type=Path, default=Path("runs/b45/pool"))
    ap.add_argument("--qa", type=Path, default=NORQUAD_DEV)
    ap.add_argument("--work", type=Path, default=Path("runs/lang_default"))
    args = ap.parse_args()
    if not (args.store / "manifest.json").is_file():
        sys.exit(f"{args.store}: no DocStore; build it with `python -m benchmarks.realm.realm_causal corpus`")
    args.work.mkdir(parents=True, exist_ok=True)
    qa = args.work / "norquad_dev.jsonl"
    n = norquad_pairs(args.qa, qa)
    store_json, plain_json, index_json = (args.work / f"{x}.json" for x in ("store", "plain", "index"))
    common = ["--qa", qa, "-k", "1", "5", "20", "--measures", "none", "--work", args.work / "emb", "--quiet"]
    # the default (no --lang: the DocStore's nb) and the old default (plain), MiniLM plain and centred
    ralm("eval-retrieval", args.store, *common, "--center", "--json-out", store_json, say=shown)
    ralm("eval-retrieval", args.store, *common, "--bm25", "none", "--json-out", plain_json, say=shown)
    index = args.work / "index"
    if not (index / "retrieval.json").is_file():
        ralm("index", "build", args.store, "--out", index, "--bm25", "--quiet", say=shown)
    ralm("eval-retrieval", "--index", index, *common, "--center", "--json-out", index_json, say=shown)
    store, plain, over_index = (
        json.loads(p.read_text())["recall"] for p in (store_json, plain_json, index_json)
    )
    metrics = {
        "questions": n,
        "default_bm25_row_is_nb": float("bm25:nb" in store),
        "bm25_default_recall@20": store["bm25:nb"]["20"],
        "bm25_plain_recall@20": plain["bm25"]["20"],
        "bm25_default_recall@5": store["bm25:nb"]["5"],
        "bm25_plain_recall@5": plain["bm25"]["5"],
        "minilm_recall@20": store["dense:minilm"]["20"],
        "minilm_centred_recall@20": store["dense:minilm:centred"]["20"],
        "index_has_centred_row": float("dense:index:centred" in over_index),
        "index_centred_recall@20": over_index.get("dense:index:centred", {}).get("20", float("nan")),
        "index_bm25_recall@20": over_index["bm25:nb"]["20"],
    }
    targets = {
        "default_bm25_row_is_nb": "1 (no --lang: the DocStore's language)",
        "bm25_default_recall@20": "> bm25_plain_recall@20 (issue: hidden Danish set .80 vs .60)",
        "index_has_centred_row": "1 (--center with --index gives a centred row, as over the DocStore)",
        "index_centred_recall@20": "= minilm_centred_recall@20 (the index holds MiniLM's embeddings)",
    }
    out = write_result(
        "lang_default",
        script_command(__file__),
        metrics,
        targets,
        store=str(args.store),
        qa=str(args.qa),
    )
    print(json.dumps(out["metrics"], indent=2))


if __name__ == "__main__":
    main()
