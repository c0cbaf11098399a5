"""The table `make demo` prints: a REALM run counted on held-out queries whose right documents are
known (a records world's), before and after training, from the two gold evaluations the demo
writes beside the run.

RUN/eval_gold_initial.json (`ralm evaluate-mlm RUN --gold ... --no-reader --initial`: the towers at
step 0) gives the right document's recall@1 and p(right | x) before training; RUN/eval_gold.json
(`--gold ... --fresh-index`: the trained run, its corpus re-embedded by the trained document tower)
gives them after, with exact match, token F1 and span perplexity closed-book, with retrieval and
given the right document, and the first three held-out queries as examples. The table is printed
and written as RUN/demo_table.txt, its figures as RUN/demo_table.json.

Run: python -m ralm.realm.inference.gold_table RUN
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from ralm.atomic import write_json_atomic, write_text_atomic
from ralm.errors import RalmError

__all__ = ["demo_figures", "format_demo_table", "main"]

ROWS = (
    ("closed_book", "closed-book"),
    ("retrieval", "with retrieval"),
    ("oracle", "given the right document"),
)


def _read(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise RalmError(f"{path}: missing; run `make demo` (it writes the run's gold evaluations)") from None
    except (OSError, ValueError) as exc:
        raise RalmError(f"{path}: unreadable ({exc}); delete it and run `make demo` again") from None


def demo_figures(run: str | Path) -> dict[str, Any]:
    """The demo's figures from RUN's two gold evaluations (see the module docstring): recall@1 and
    p(right | x) at step 0 and trained, EM and F1 (percent) and span perplexity per row, the ratio of
    retrieval's EM to closed-book's, the query count, the trained step and the examples."""
    run = Path(run)
    before, after = _read(run / "eval_gold_initial.json"), _read(run / "eval_gold.json")
    s0, s1 = before["summary"], after["summary"]
    out: dict[str, Any] = {
        "queries": int(s1["queries"]),
        "step": after.get("step"),
        "recall_at_1_step0": s0["recall@1"],
        "recall_at_1": s1["recall@1"],
        "p_right_step0": s0["p_right"],
        "p_right": s1["p_right"],
    }
    for key, _ in ROWS:
        out[f"em_{key}"] = 100 * s1[f"em_{key}"]
        out[f"f1_{key}"] = 100 * s1[f"f1_{key}"]
        out[f"ppl_{key}"] = s1[f"ppl_{key}"]
    closed = out["em_closed_book"]
    out["em_retrieval_over_closed_book"] = out["em_retrieval"] / closed if closed > 0 else float("inf")
    out["examples"] = after.get("examples", [])
    return out


def format_demo_table(fig: dict[str, Any]) -> str:
    """The figures of `demo_figures` as the plain-text table the demo prints."""
    from ralm.realm.inference.gold import format_examples

    lines = [
        f"records world: {fig['queries']} held-out queries about records never trained on; "
        f"REALM trained {fig['step']} steps",
        f"{'':<40} {'step 0':>8} {'trained':>8}",
        f"{'right document first (recall@1)':<40} {fig['recall_at_1_step0']:>8.3f} {fig['recall_at_1']:>8.3f}",
        f"{'p(right document | x)':<40} {fig['p_right_step0']:>8.3f} {fig['p_right']:>8.3f}",
        "",
        f"{'the trained reader fills the span':<40} {'EM':>6} {'F1':>6} {'span ppl':>9}",
    ]
    for key, name in ROWS:
        lines.append(
            f"{name:<40} {fig[f'em_{key}']:>6.1f} {fig[f'f1_{key}']:>6.1f} {fig[f'ppl_{key}']:>9.2f}"
        )
    ratio = fig["em_retrieval_over_closed_book"]
    lines.append(
        f"exact match with retrieval / closed-book: {ratio:.1f}x"
        if ratio != float("inf")
        else "exact match with retrieval / closed-book: closed-book matched none"
    )
    return "\n".join(lines) + format_examples(fig["examples"])


def main(argv: list[str] | None = None) -> int:
    """Print RUN's demo table and write it beside the run; exit 2 with one line on bad input."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m ralm.realm.inference.gold_table RUN", file=sys.stderr)
        return 2
    try:
        fig = demo_figures(args[0])
    except RalmError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    text = format_demo_table(fig)
    print(text)
    run = Path(args[0])
    write_text_atomic(run / "demo_table.txt", text + "\n")
    write_json_atomic(run / "demo_table.json", {k: v for k, v in fig.items()})
    return 0


if __name__ == "__main__":
    sys.exit(main())
