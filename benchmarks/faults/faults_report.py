"""The Markdown report of `faults.py` (benchmarks/results/faults.md)."""

from __future__ import annotations


# ----------------------------------------------------------------------------- report
def printable(s: str) -> str:
    """Control characters (a NUL from a fuzzed file, ...) as escapes, so the table stays text."""
    return "".join(c if c.isprintable() or c in "\n\t" else ascii(c)[1:-1] for c in s)


def md_escape(s) -> str:
    return printable(str(s)).replace("|", "\\|").replace("\n", " ")


def markdown(bench, fuzz: dict, metrics: dict, command: str, where: str) -> str:
    out = [
        "# Fault injection: `ralm` CLI",
        "",
        f"`{command}` on {where}",
        "",
        f"{metrics['cases_ok']} of {metrics['cases_total']} cases as expected; "
        f"{metrics['tracebacks']} tracebacks, {metrics['hangs']} hangs (cases and fuzzing together). "
        "`$W` is the scratch directory; `$TINY` the tiny-model pretrain flags "
        "(`--reader TINY --batch-size 2 --k 3 --refresh-every 2 --heldout 3 --warmup-steps 1 --device cpu "
        "--autocast off --quiet --set tensorboard=false --set encoder_max_length=32 --set reader_max_length=96`).",
        "",
        "| family | case | expected | exit | message | traceback? | leftovers | ok? |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for c in bench.cases:
        ok = "yes" if c["ok"] else "**no**: " + "; ".join(c["problems"])
        out.append(
            "| "
            + " | ".join(
                md_escape(x)
                for x in (
                    c["family"],
                    c["case"],
                    c["expected"],
                    c["exit"],
                    c["message"][:160] or "–",
                    "yes" if c["traceback"] else "no",
                    len(c["leftovers"]) or "–",
                    ok,
                )
            )
            + " |"
        )
    for s in bench.skipped:
        out.append(
            f"| {md_escape(s['family'])} | {md_escape(s['case'])} | – | – | skipped: {md_escape(s['why'])} | – | – | – |"
        )
    noted = [c for c in bench.cases if c["note"]]
    if noted:
        out += ["", "Notes:", ""] + [f"- {md_escape(c['case'])}: {md_escape(c['note'])}" for c in noted]
    if fuzz:
        out += [
            "",
            "## Fuzzing",
            "",
            "| family | cases | exit 0 | exit 2 | other exit | tracebacks | hangs | leftovers | seconds |",
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
        ]
        for fam, f in fuzz.items():
            c = f["counts"]
            out.append(
                f"| {fam} | {c['cases']} | {c['exit_0']} | {c['exit_2']} | {c['exit_other']} | {c['tracebacks']} "
                f"| {c['hangs']} | {c['leftovers']} | {c['seconds']} |"
            )
        fails = [(fam, r) for fam, f in fuzz.items() for r in f["failures"]]
        if fails:
            out += ["", "### Fuzz cases that failed", ""]
            for fam, r in fails[:60]:
                exc = (r["exception"] or "").strip().splitlines()
                out.append(
                    f"- {fam} #{r['i']} ({md_escape(r['desc'][:150])}): exit {r['rc']}"
                    + (", hang" if r["hang"] else "")
                    + (f", `{md_escape(exc[-1][:200])}`" if exc else f", {md_escape(r['message'][:200])}")
                )
    failed = [c for c in bench.cases if not c["ok"]]
    if failed:
        out += ["", "## Cases not as expected", ""]
        for c in failed:
            out += [
                f"### {c['family']}: {c['case']}",
                "",
                f"`{c['command']}` -> exit {c['exit']} ({'; '.join(c['problems'])})",
                "",
                "```",
                (
                    (c.get("stdout_tail") or "").strip()[-500:]
                    + "\n"
                    + (c.get("stderr_tail") or "").strip()[-1500:]
                ).strip(),
                "```",
                "",
            ]
    return "\n".join(out) + "\n"
