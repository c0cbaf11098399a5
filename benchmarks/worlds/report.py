"""benchmarks/results/worlds.json: the controlled worlds' headline figures beside issue 64's targets.

Reads what each world's benchmark wrote (results/world_realm.json: REALM and BRENT,
world_surealm.json, world_luke.json) and keeps, for every target of the issue, the metric, the
target and whether it is met; a world not yet run is listed under `missing`.

Run: python -m benchmarks.worlds.report
"""

from __future__ import annotations

import json
import re

from benchmarks.common import RESULTS, script_command, write_result

SOURCES = ("world_realm", "world_surealm", "world_luke")
# issue 64's targets: metric -> (the file that measures it, the bar)
TARGETS: dict[str, tuple[str, str]] = {
    "realm_world_r1_step0": ("world_realm", "<= 0.5"),
    "realm_world_r1_end": ("world_realm", ">= 0.9"),
    "realm_world_queries_to_r1_0_9": ("world_realm", "<= 200"),
    "realm_world_p_right_learned_scale": ("world_realm", ">= 0.9"),
    "realm_world_em_retrieval": ("world_realm", ">= 0.9"),
    "realm_world_em_closed_book": ("world_realm", "<= 0.1"),
    "realm_world_cut_signal_r1_gain": ("world_realm", "<= 0.05"),
    "brent_world_copy_gain_points": ("world_realm", ">= 20"),
    "surealm_world_step0_ppl_ratio": ("world_surealm", "0.9999-1.0001"),
    "surealm_world_ppl_over_no_retrieval": ("world_surealm", "<= 0.7"),
    "surealm_world_ppl_over_random": ("world_surealm", "<= 0.8"),
    "luke_world_f1_minus_words_only_span": ("world_luke", ">= 10"),
    "luke_world_f1_minus_token_tagger": ("world_luke", ">= 10"),
    "luke_world_reduced_dim_f1_cost": ("world_luke", "<= 2"),
}


def met(value: float | None, bar: str) -> bool | None:
    """Whether `value` meets `bar` ("<= 0.5", ">= 20", "0.9999-1.0001"); None when not measured.

    Example: met(0.4, "<= 0.5") -> True; met(1.00005, "0.9999-1.0001") -> True."""
    if value is None:
        return None
    if m := re.fullmatch(r"\s*([<>]=)\s*([-\d.]+)\s*", bar):
        return value <= float(m[2]) if m[1] == "<=" else value >= float(m[2])
    lo, hi = (float(x) for x in bar.split("-"))
    return lo <= value <= hi


def main() -> None:
    found = {
        s: json.loads((RESULTS / f"{s}.json").read_text())
        for s in SOURCES
        if (RESULTS / f"{s}.json").is_file()
    }
    metrics: dict[str, float | None] = {}
    verdict: dict[str, bool | None] = {}
    for name, (src, bar) in TARGETS.items():
        value = found.get(src, {}).get("metrics", {}).get(name)
        metrics[name] = value
        verdict[name] = met(value, bar)
    write_result(
        "worlds",
        script_command(__file__, ""),
        metrics,
        {k: bar for k, (_, bar) in TARGETS.items()},
        met=verdict,
        sources={s: found[s]["command"] for s in found},
        missing=[s for s in SOURCES if s not in found],
    )
    for k, v in metrics.items():
        print(f"{k:<40} {v!s:<24} {TARGETS[k][1]:<14} {verdict[k]}")


if __name__ == "__main__":
    main()
