"""Fault injection for the `ralm` CLI: damaged files, a full disk, kill -9, two writers, small
defects, and seeded fuzzing of four input formats.

Expectations (the user issue):
- a damaged or missing file: exit 2 and one `ralm: error:` line naming the file, no traceback; a
  damaged newest checkpoint: a fallback note naming it (exit 0), exit 2 when none is intact; a
  torn last metrics line: exit 0 with a note;
- a full disk: exit 2, "no space left", nothing written, an old store intact;
- kill -9 at a random (seeded) moment, then the same command (or `--resume`): exit 0 and the same
  result as an uninterrupted run; stale temp folders removed with a note;
- a second writer into one output: exit 2 naming the holder's PID, the first writer unaffected;
- small defects (a closed pipe, invalid UTF-8, `--lang xx`, `-k 0`): exit 0/2/141, fast, no traceback;
- fuzzing (seeded mutations of a wiki dump, a JSONL corpus, an ARPA model, a SQuAD file):
  0 tracebacks, 0 hangs, no exit code but 0 and 2.

Every case runs `python -m ralm.cli ...` in a child process (120 s limit; more is a hang). Fuzz
cases run in one child per family that imports ralm once and calls `ralm.cli.main(argv)` per
case with stdout/stderr captured, an alarm per case and a faulthandler watchdog behind it (a
child that dies is restarted after the case that killed it). "Traceback" = an exception other
than SystemExit/RalmError escaping main, or "Traceback" in stderr. Leftovers = temp entries
(`.NAME.tmp-*`, `.partial-*`, `*.tmp*`, `.rebuild`, `.old-*`, `*.done.*`, ...) beside or inside a
case's output; `.NAME.lock` files are there by design.

Small inputs so that each case takes seconds: a 30-article JSONL corpus built with
--chunk-size 64, a random 2-layer BERT (hidden 64, the MiniLM vocabulary) as encoder and reader,
REALM runs of a few steps on CPU; the gensim enwiki sample where a bigger input is needed.
Child processes get OMP_NUM_THREADS=1. The disk-full cases mount a 2 MiB tmpfs (root only;
skipped, and listed as skipped, otherwise). Cases marked "(extra)" go beyond the issue's list.
Other engineers edit src/ while this runs: a case whose traceback comes from importing the CLI
(src/ caught mid-edit) is retried after 20 s and counted in `retries_src_mid_edit`.

Run: python benchmarks/faults.py [--fuzz 200] [--seed 0] [--only FAMILY,...] [--keep]
Writes benchmarks/results/faults.json and benchmarks/results/faults.md.
"""

from __future__ import annotations

import argparse
import bz2
import contextlib
import io
import json
import os
import random
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import RESULTS, machine, write_result  # noqa: E402

TIMEOUT = 120  # seconds a CLI case may run before it counts as a hang
FUZZ_ALARM = 30  # seconds a fuzz case may run (in-process) before it counts as a hang
FUZZ_WATCHDOG = 60  # faulthandler ends the fuzz child after this long in one case

CHILD_ENV = {
    "OMP_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    "TOKENIZERS_PARALLELISM": "false",
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
}
TEMP_RE = re.compile(
    r"(\.tmp|\.partial|\.rebuild|\.old-|^\.build-v|^snapshot-v|bm25-tmp|\.done\.|\.incomplete)"
)

TINY_CODE = """
import shutil, sys, torch
from pathlib import Path
from transformers import BertConfig, BertModel
from ralm.backbones import default_backbone_path
d = Path(sys.argv[1])
torch.manual_seed(0)
cfg = BertConfig(vocab_size=30522, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                 intermediate_size=128, max_position_embeddings=128)
BertModel(cfg, add_pooling_layer=False).save_pretrained(d)
for f in ("vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
    shutil.copy(default_backbone_path() / f, d / f)
"""


# ----------------------------------------------------------------------------- small helpers
@dataclass
class Res:
    """One finished (or timed-out) child process."""

    argv: list[str]
    rc: int | None
    out: str
    err: str
    seconds: float
    hang: bool = False

    @property
    def lines(self) -> list[str]:
        return [x for x in self.err.splitlines() if x.strip()]

    @property
    def message(self) -> str:
        return self.lines[-1].strip() if self.lines else ""

    @property
    def traceback(self) -> bool:
        return "Traceback (most recent call last)" in self.err


def src_in_flux(err: str) -> bool:
    """A traceback from building the parser or importing a module: src/ caught mid-edit."""
    if "Traceback (most recent call last)" not in err:
        return False
    last = err.strip().splitlines()[-1]
    return "in build_parser" in err or bool(
        re.match(r"(SyntaxError|IndentationError|ImportError|ModuleNotFoundError|NameError)\b", last)
        and re.search(r'File "[^"]*/src/ralm/[^"]*", line \d+, in <module>', err)
    )


def child_env() -> dict[str, str]:
    env = dict(os.environ)
    env.update(CHILD_ENV)
    return env


def leftovers(*paths: Path) -> list[str]:
    """Temp entries beside each path (its parent, not recursive) and inside it (recursive)."""
    found: set[str] = set()
    for path in paths:
        path = Path(path)
        parent = path.parent
        if parent.is_dir():
            for p in parent.iterdir():
                if p.name.endswith(".lock"):
                    continue
                if p.name.startswith(f".{path.name}.") or TEMP_RE.search(p.name):
                    found.add(str(p))
        if path.is_dir():
            for p in path.rglob("*"):
                if TEMP_RE.search(p.name) and not p.name.endswith(".lock"):
                    found.add(str(p))
    return sorted(found)


def read_json(path: Path) -> dict:
    return json.loads(Path(path).read_text(encoding="utf-8"))


def fingerprint(store: Path) -> str | None:
    try:
        return read_json(store / "manifest.json")["fingerprint"]
    except (OSError, ValueError, KeyError):
        return None


def run_steps(run: Path) -> list[int] | str:
    """Steps logged with a loss in RUN/metrics.jsonl, or a string saying why it cannot be read."""
    try:
        rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines() if x.strip()]
    except (OSError, ValueError) as exc:
        return f"metrics.jsonl unreadable ({type(exc).__name__})"
    return [r["step"] for r in rows if "loss" in r]


def flip_bytes(path: Path, n: int, rng: random.Random, start: int = 0) -> None:
    data = bytearray(path.read_bytes())
    for i in rng.sample(range(start, len(data)), min(n, len(data) - start)):
        data[i] ^= rng.randrange(1, 256)
    path.write_bytes(bytes(data))


def truncate(path: Path, size: int) -> None:
    with open(path, "r+b") as f:
        f.truncate(size)


def articles(n: int = 30) -> list[dict]:
    """`n` short linked articles (JSONL rows with link spans)."""
    rng = random.Random(7)
    places = ["Norway", "Denmark", "Sweden", "Finland", "Iceland", "Scandinavia", "the Baltic Sea"]
    kings = ["Harald Hardrada", "Olav Kyrre", "Knut the Great", "Gustav Vasa", "Magnus Barefoot"]
    things = ["river", "lake", "harbour", "castle", "cathedral", "market", "university", "bridge"]
    rows = []
    for i in range(n):
        title = f"Town {i:02d}"
        parts: list[tuple[str, str | None]] = []  # (text, link target)
        for _ in range(3):
            place, king = rng.choice(places), rng.choice(kings)
            parts += [(f"{title} is a town in ", None), (place, place)]
            parts += [(f" near a {rng.choice(things)} and a {rng.choice(things)}. It was founded in ", None)]
            parts += [(f"{rng.randint(900, 1900)} by ", None), (king, king)]
            parts += [(f", who also built its {rng.choice(things)}. ", None)]
        text, links = "", []
        for s, target in parts:
            if target:
                links.append({"start": len(text), "end": len(text) + len(s), "target": target})
            text += s
        rows.append({"title": title, "text": text.strip(), "links": links})
    return rows


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def squad_file(path: Path) -> Path:
    """A valid SQuAD v1.1 file with 10 questions over 5 paragraphs."""
    ctx = [
        "Oslo is the capital of Norway. It was founded in 1040 by Harald Hardrada.",
        "Copenhagen is the capital of Denmark. It lies on the island of Zealand.",
        "Stockholm is the capital of Sweden. It lies where Lake Malaren meets the Baltic Sea.",
        "Helsinki is the capital of Finland. It was founded in 1550 by Gustav Vasa.",
        "Reykjavik is the capital of Iceland. It was settled by Ingolfur Arnarson in 874.",
    ]
    qs = [
        ("What is the capital of Norway?", "Oslo"),
        ("Who founded Oslo?", "Harald Hardrada"),
        ("What is the capital of Denmark?", "Copenhagen"),
        ("On which island is Copenhagen?", "Zealand"),
        ("What is the capital of Sweden?", "Stockholm"),
        ("Which sea does Stockholm meet?", "Baltic Sea"),
        ("When was Helsinki founded?", "1550"),
        ("Who founded Helsinki?", "Gustav Vasa"),
        ("What is the capital of Iceland?", "Reykjavik"),
        ("When was Reykjavik settled?", "874"),
    ]
    paras = []
    for i, c in enumerate(ctx):
        qas = [
            {"id": f"q{2 * i + j}", "question": q, "answers": [{"text": a, "answer_start": c.index(a)}]}
            for j, (q, a) in enumerate(qs[2 * i : 2 * i + 2])
        ]
        paras.append({"context": c, "qas": qas})
    doc = {"version": "1.1", "data": [{"title": "Nordic capitals", "paragraphs": paras}]}
    path.write_text(json.dumps(doc, indent=1), encoding="utf-8")
    return path


def wiki_excerpt(src: Path, articles: int = 6, redirects: int = 2, chars: int = 5000) -> bytes:
    """A small valid dump from the enwiki sample: its header, `redirects` redirect pages and the
    first `articles` articles, each article's wikitext cut at a blank line after ~`chars` chars."""
    xml = bz2.decompress(src.read_bytes()).decode("utf-8")
    head = xml[: xml.index("<page>")]
    pages = [p[p.index("<page>") :] + "</page>" for p in xml.split("</page>") if "<page>" in p]
    keep = [p for p in pages if "<redirect" in p][:redirects]
    for page in (p for p in pages if "<redirect" not in p):
        if len(keep) >= redirects + articles:
            break
        m = re.search(r"(<text[^>]*>)(.*?)(</text>)", page, re.DOTALL)
        text = m.group(2)
        cut = text.find("\n\n", chars)
        if cut > 0:
            text = text[:cut]
        keep.append(page[: m.start(2)] + text + page[m.end(2) :])
    return (head + "\n  ".join(keep) + "\n</mediawiki>\n").encode("utf-8")


# ----------------------------------------------------------------------------- fuzz mutations
JUNK = {
    "wiki": [
        "<page>",
        "</page>",
        "<text>",
        "</text>",
        "<revision>",
        "</revision>",
        "<title>",
        "</title>",
        "<ns>0</ns>",
        "<ns>x</ns>",
        "<id>-1</id>",
        "<id>99999999999999999999999</id>",
        "<![CDATA[",
        "]]>",
        "&amp;",
        "&#0;",
        "&#xD800;",
        "&bogus;",
        "&",
        "<",
        "{{",
        "}}",
        "[[",
        "]]",
        "[[File:",
        "<ref>",
        "</ref>",
        "<!--",
        "-->",
        '<redirect title="" />',
        '<text xml:space="preserve">',
        "<page><title>X</title>",
        "{{#invoke:",
        "{|",
        "|}",
        "'''",
        "<nowiki>",
        "\x00",
        "\x0b",
        "<?xml version='1.0'?>",
        '<!DOCTYPE x [<!ENTITY a "aaaaaaaaaa">]>',
        "</mediawiki>",
    ],
    "jsonl": [
        "{",
        "}",
        "[",
        "]",
        '"',
        ",",
        ":",
        "null",
        "1e999",
        "NaN",
        "-Infinity",
        "\\u0000",
        "\\ud800",
        '"title"',
        '"text"',
        '"links"',
        '"start"',
        "\n",
        "\n\n",
        "{}",
        "[]",
        '""',
        '{"title": "x"}',
        "\\",
        "\t",
        "\x00",
        "\ufeff",
    ],
    "arpa": [
        "\\data\\",
        "ngram 1=",
        "ngram 9=3",
        "\\1-grams:",
        "\\2-grams:",
        "\\3-grams:",
        "\\end\\",
        "\t",
        "-inf",
        "inf",
        "nan",
        "1e999",
        "-99",
        "0.5",
        "\n",
        "\n\n",
        "<s>",
        "</s>",
        "<unk>",
        "# ralm order=",
        " ",
        "\x00",
        "\ufeff",
        "\r\n",
    ],
    "squad": [
        "{",
        "}",
        "[",
        "]",
        '"',
        ",",
        ":",
        "null",
        "1e999",
        "NaN",
        "-1",
        '"answer_start"',
        '"answers"',
        '"qas"',
        '"context"',
        '"paragraphs"',
        "\\u0000",
        "\\ud800",
        "[]",
        "{}",
        '""',
        "\\",
        "\x00",
        "\ufeff",
    ],
}
UNICODE = [
    "\u200b",
    "\u200e",
    "\u202e",
    "\u0301",
    "\u0308" * 20,
    "\ufeff",
    "\u00a0",
    "\u2028",
    "\u3000",
    "\U0001f600",
    "\U0001f3f3\ufe0f\u200d\U0001f308",
    "\u0130",
    "\u00df",
    "\ufb03",
    "\u1e9e",
    "\uffff",
    "\U0010ffff",
    "\u0000",
    "\u00e6\u00f8\u00e5",
    "\u4e2d\u6587",
    "\u0627\u0644\u0639\u0631\u0628\u064a\u0629",
    "\ud7ff",
    "\r",
    "\x85",
]


WIKITEXT = [
    "{{", "}}", "{{{", "}}}", "[[", "]]", "[[File:x.jpg|thumb|[[a|b]]", "{|", "|}", "|-", "'''", "''",
    "==", "== ==", "<ref>", "</ref>", "<ref name=x/>", "<!--", "-->", "<nowiki>", "</nowiki>", "<math>",
    "</math>", "<gallery>", "&nbsp;", "&#0;", "&#x110000;", "&bogus;", "__NOTOC__", "#REDIRECT [[X]]",
    "[[Category:", "[http://", "~~~~", "{{#if:", "{{!}}", "|", "=", "*", "#", ":", ";", "----",
    "<br>", "<div>", "</div>", "<span style=", "[[:en:", "[[ ]]", "[[|]]", "{{ }}",
]  # fmt: skip


def _xml_escape(s: str) -> str:
    return s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def mutate_wikitext(data: bytes, rng: random.Random) -> tuple[bytes, str]:
    """Edits that keep the XML well-formed: wikitext junk inside a <text>, or a changed page."""
    xml = data.decode("utf-8")
    texts = list(re.finditer(r"<text[^>]*>(.*?)</text>", xml, re.DOTALL))
    pages = list(re.finditer(r"<page>.*?</page>", xml, re.DOTALL))
    op = rng.choice(["junk", "junk", "junk", "nest", "long", "page"])
    m = rng.choice(texts)
    at = rng.randint(m.start(1), m.end(1))
    if op == "junk":
        s = "".join(rng.choice(WIKITEXT + UNICODE[:12]) for _ in range(rng.randint(1, 8)))
        return (xml[:at] + _xml_escape(s) + xml[at:]).encode("utf-8"), f"wikitext insert {s!r} at {at}"
    if op == "nest":
        a, b = rng.choice(
            [("{{", "}}"), ("[[", "]]"), ("{|", "|}"), ("<ref>", "</ref>"), ("<div>", "</div>")]
        )
        n = rng.choice([50, 500, 5000])
        s = a * n + "x" + (b * n if rng.random() < 0.5 else "")
        return (xml[:at] + _xml_escape(s) + xml[at:]).encode("utf-8"), f"wikitext {a!r} x{n} nested at {at}"
    if op == "long":
        s = rng.choice(["x" * 200_000, "word " * 40_000, "[[a]]" * 20_000, "\n" * 50_000])
        return (xml[:at] + s + xml[at:]).encode("utf-8"), f"wikitext {s[:6]!r}... ({len(s)} chars) at {at}"
    pm = rng.choice(pages)
    page = pm.group(0)
    sub = rng.choice(
        ["empty-title", "blank-title", "dup-page", "ns", "no-text", "empty-text", "redirect", "id", "no-title",
         "self-closing-text"]
    )  # fmt: skip
    if sub == "empty-title":
        page = re.sub(r"<title>.*?</title>", "<title></title>", page, count=1)
    elif sub == "blank-title":
        page = re.sub(r"<title>.*?</title>", "<title>  \t </title>", page, count=1)
    elif sub == "dup-page":
        page = page + "\n  " + page
    elif sub == "ns":
        ns = rng.choice(["-1", "x", "", "99999999999999999999"])
        page = re.sub(r"<ns>.*?</ns>", f"<ns>{ns}</ns>", page, count=1)
    elif sub == "no-text":
        page = re.sub(r"<text[^>]*>.*?</text>", "", page, count=1, flags=re.DOTALL)
    elif sub == "empty-text":
        page = re.sub(r"(<text[^>]*>).*?(</text>)", r"\1\2", page, count=1, flags=re.DOTALL)
    elif sub == "redirect":
        page = page.replace("<ns>0</ns>", '<ns>0</ns>\n    <redirect title="" />', 1)
    elif sub == "id":
        page = re.sub(r"<id>\d+</id>", f"<id>{rng.choice(['x', '-5', '', '1' * 40])}</id>", page, count=1)
    elif sub == "no-title":
        page = re.sub(r"<title>.*?</title>", "", page, count=1)
    else:
        page = re.sub(r"<text[^>]*>.*?</text>", '<text bytes="0" />', page, count=1, flags=re.DOTALL)
    return (xml[: pm.start()] + page + xml[pm.end() :]).encode("utf-8"), f"page {sub} at {pm.start()}"


def mutate_bytes(data: bytes, rng: random.Random, family: str) -> tuple[bytes, str]:
    """1-3 edits inside one small window of `data` (or a truncation); returns (bytes, description)."""
    if rng.random() < 0.12:
        at = rng.randrange(len(data) + 1)
        return data[:at], f"truncate at {at}"
    buf = bytearray(data)
    if family == "wiki" and rng.random() < 0.5:
        starts = [m.start() for m in re.finditer(rb"<", data)]
        lo = rng.choice(starts)
    elif family in ("jsonl", "squad") and rng.random() < 0.5:
        starts = [m.start() for m in re.finditer(rb'["{\[:,]', data)] or [0]
        lo = rng.choice(starts)
    elif family == "arpa" and rng.random() < 0.5:
        starts = [m.start() for m in re.finditer(rb"[\t\n\\]", data)] or [0]
        lo = rng.choice(starts)
    else:
        lo = rng.randrange(len(data) + 1)
    hi = min(len(buf), lo + rng.randint(16, 2048))
    ops = []
    for _ in range(rng.randint(1, 3)):
        op = rng.choice(["flip", "delete", "duplicate", "junk", "unicode", "invalid-utf8"])
        hi = min(hi, len(buf))
        a = rng.randint(lo, max(lo, hi)) if hi > lo else min(lo, len(buf))
        if op == "flip" and len(buf):
            n = rng.randint(1, 20)
            for _ in range(n):
                i = rng.randint(lo, max(lo, hi - 1)) if hi > lo else rng.randrange(len(buf))
                if i < len(buf):
                    buf[i] ^= rng.randrange(1, 256)
            ops.append(f"flip {n} bytes near {lo}")
        elif op == "delete":
            n = rng.randint(1, 400)
            del buf[a : a + n]
            ops.append(f"delete {n} at {a}")
        elif op == "duplicate":
            n = rng.randint(1, 400)
            buf[a:a] = buf[a : a + n]
            ops.append(f"duplicate {n} at {a}")
        elif op == "junk":
            s = "".join(rng.choice(JUNK[family]) for _ in range(rng.randint(1, 4))).encode("utf-8")
            buf[a:a] = s
            ops.append(f"insert {s[:40]!r} at {a}")
        elif op == "unicode":
            s = "".join(rng.choice(UNICODE) for _ in range(rng.randint(1, 6)))
            buf[a:a] = s.encode("utf-8", "surrogatepass")
            ops.append(f"insert unicode {s!r} at {a}")
        else:
            s = bytes(
                rng.choice([0xFF, 0xFE, 0xC0, 0x80, 0xED, 0xF4, 0xF8]) for _ in range(rng.randint(1, 4))
            )
            buf[a:a] = s
            ops.append(f"insert invalid UTF-8 {s!r} at {a}")
    return bytes(buf), "; ".join(ops)


ODD_VALUES = [
    None,
    True,
    0,
    -1,
    1.5,
    10**20,
    -(10**20),
    "",
    "x",
    "\x00",
    "\ud800",
    "\u0301\u0301",
    [],
    {},
    [1, 2],
    {"a": 1},
    float("nan"),
    float("inf"),
    "x" * 5000,
]


def _json_paths(obj, path=()):
    yield path
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _json_paths(v, path + (k,))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from _json_paths(v, path + (i,))


def _get(obj, path):
    for k in path:
        obj = obj[k]
    return obj


def mutate_json(obj, rng: random.Random, special=()) -> tuple[object, str]:
    """One structural edit of a parsed JSON value: delete, retype, empty, duplicate or edit a node."""
    paths = [p for p in _json_paths(obj) if p]
    if not paths:
        return rng.choice(ODD_VALUES), "replace the whole value"
    if special and rng.random() < 0.5:  # edit a key the reader cares about
        cands = [p for p in paths if p[-1] in special] or paths
        path = rng.choice(cands)
    else:
        path = rng.choice(paths)
    parent, key = _get(obj, path[:-1]), path[-1]
    op = rng.choice(["delete", "retype", "retype", "empty", "duplicate", "shift", "unicode"])
    cur = parent[key]
    if op == "delete":
        del parent[key]
    elif op == "retype":
        parent[key] = rng.choice(ODD_VALUES)
    elif op == "empty":
        parent[key] = type(cur)() if isinstance(cur, (dict, list, str)) else None
    elif op == "duplicate" and isinstance(parent, list):
        parent.insert(key, json.loads(json.dumps(cur)))
    elif op == "shift" and isinstance(cur, (int, float)) and not isinstance(cur, bool):
        parent[key] = cur + rng.choice([-1000, -10, -1, 1, 10, 1000, 10**9])
    elif op == "unicode" and isinstance(cur, str):
        i = rng.randint(0, len(cur))
        parent[key] = cur[:i] + "".join(rng.choice(UNICODE) for _ in range(rng.randint(1, 4))) + cur[i:]
    else:
        parent[key] = rng.choice(ODD_VALUES)
        op = "retype"
    return obj, f"{op} {'/'.join(map(str, path))}"


def dump_json(obj, rng: random.Random, indent=None) -> bytes:
    text = json.dumps(obj, ensure_ascii=rng.random() < 0.5, indent=indent)
    return text.encode("utf-8", "surrogatepass")


def mutate_arpa_lines(data: bytes, rng: random.Random) -> tuple[bytes, str]:
    lines = data.decode("utf-8").split("\n")
    grams = [i for i, x in enumerate(lines) if "\t" in x]
    op = rng.choice(
        [
            "count",
            "value",
            "value",
            "delete",
            "duplicate",
            "swap",
            "header",
            "field",
            "spaces",
            "words",
            "order",
            "unknown-context",
        ]
    )
    if op == "count":
        i = rng.choice([i for i, x in enumerate(lines) if x.startswith("ngram ")])
        n, _ = lines[i][6:].split("=")
        lines[i] = (
            f"ngram {n}={rng.choice(['0', '-1', '1', '99999999999', 'x', '', str(int(_) + 1), str(int(_) - 1)])}"
        )
    elif op == "value":
        i = rng.choice(grams)
        f = lines[i].split("\t")
        col = rng.choice([0, len(f) - 1])
        f[col] = rng.choice(
            ["0.5", "inf", "-inf", "nan", "1e999", "-1e999", "", "x", "1e-999", "-99", "0", "+1", "--1"]
        )
        lines[i] = "\t".join(f)
    elif op == "delete":
        del lines[rng.randrange(len(lines))]
    elif op == "duplicate":
        i = rng.choice(grams)
        lines.insert(i, lines[i])
    elif op == "swap":
        i, j = rng.randrange(len(lines)), rng.randrange(len(lines))
        lines[i], lines[j] = lines[j], lines[i]
    elif op == "header":
        hs = [i for i, x in enumerate(lines) if x.startswith("\\")]
        del lines[rng.choice(hs)]
    elif op == "field":
        i = rng.choice(grams)
        lines[i] += "\t" + rng.choice(["-0.1", "x", "", "1e999"])
    elif op == "spaces":
        i = rng.choice(grams)
        lines[i] = lines[i].replace("\t", " ")
    elif op == "words":
        i = rng.choice(grams)
        f = lines[i].split("\t")
        w = f[1].split(" ")
        w = w[1:] if rng.random() < 0.5 and len(w) > 1 else w + ["zzz"]
        f[1] = " ".join(w)
        lines[i] = "\t".join(f)
    elif op == "order":
        hs = [i for i, x in enumerate(lines) if x.startswith("# ralm ")]
        i = rng.choice(hs)
        key = lines[i].split("=")[0]
        lines[i] = f"{key}={rng.choice(['9', '0', 'x', '', '-1', 'bogus', 'true'])}"
    else:  # an n-gram whose context was never listed
        i = max(i for i, x in enumerate(lines) if x.startswith("\\3-grams:"))
        lines.insert(i + 1, "-0.5\tqqq rrr sss")
    return "\n".join(lines).encode("utf-8"), f"arpa {op}"


def make_fuzz_cases(family: str, n: int, seed: int, base: dict, d: Path) -> list[dict]:
    """`n` seeded mutated inputs of `family` written under `d`, each with its ralm argv."""
    d.mkdir(parents=True, exist_ok=True)
    cases = []
    for i in range(n):
        rng = random.Random(f"{seed}-{family}-{i}")
        out = d / f"out-{i:03d}"
        if family == "wiki":
            if rng.random() < 0.4:
                data, desc = mutate_wikitext(base["wiki_xml"], rng)
            else:
                data, desc = mutate_bytes(base["wiki_xml"], rng, "wiki")
            if rng.random() < 0.5:
                data = bz2.compress(data, compresslevel=1)
                desc += "; bz2"
                if rng.random() < 0.2:
                    data, more = (
                        mutate_bytes(data, rng, "wiki")
                        if rng.random() < 0.5
                        else (data[: rng.randrange(len(data))], "truncate the .bz2")
                    )
                    desc += f"; then {more}"
                path = d / f"in-{i:03d}.xml.bz2"
            else:
                path = d / f"in-{i:03d}.xml"
            argv = ["corpus", "build", str(path), "--out", str(out), "--quiet"]
        elif family == "jsonl":
            if rng.random() < 0.5:
                data, desc = mutate_bytes(base["jsonl"], rng, "jsonl")
            else:
                rows = [json.loads(x) for x in base["jsonl"].decode().splitlines()]
                k = rng.randrange(len(rows))
                obj, desc = mutate_json(
                    rows[k], rng, special=("title", "text", "links", "start", "end", "target", "id")
                )
                lines = base["jsonl"].decode().splitlines()
                lines[k] = dump_json(obj, rng).decode("utf-8", "surrogatepass")
                data = ("\n".join(lines) + "\n").encode("utf-8", "surrogatepass")
                desc = f"line {k + 1}: {desc}"
            path = d / f"in-{i:03d}.jsonl"
            argv = ["corpus", "build", str(path), "--out", str(out), "--quiet", "--chunk-size", "64"]
        elif family == "arpa":
            if rng.random() < 0.5:
                data, desc = mutate_bytes(base["arpa"], rng, "arpa")
            else:
                data, desc = mutate_arpa_lines(base["arpa"], rng)
            path = d / f"in-{i:03d}.arpa"
            argv = ["ngram", "score", str(path), str(base["held"])]
            out = None
        elif family == "squad":
            if rng.random() < 0.5:
                data, desc = mutate_bytes(base["squad"], rng, "squad")
            else:
                obj = json.loads(base["squad"])
                obj, desc = mutate_json(
                    obj,
                    rng,
                    special=(
                        "answer_start",
                        "text",
                        "answers",
                        "qas",
                        "context",
                        "id",
                        "question",
                        "data",
                        "paragraphs",
                    ),
                )
                data = dump_json(obj, rng, indent=rng.choice([None, 1]))
            path = d / f"in-{i:03d}.json"
            argv = [
                "finetune", "extractive-qa", str(path), "--model", str(base["tiny"]), "--out", str(out),
                "--max-steps", "1", "--epochs", "1", "--batch-size", "2", "--max-length", "64",
                "--doc-stride", "16", "--device", "cpu", "--autocast", "off", "--no-save", "--no-progress",
                "--max-eval", "2",
            ]  # fmt: skip
        else:
            raise ValueError(family)
        path.write_bytes(data)
        cases.append({"i": i, "family": family, "argv": argv, "out": str(out) if out else None, "desc": desc})
    return cases


# ----------------------------------------------------------------------------- fuzz child
def fuzz_child(cases_path: str, results_path: str, start: int) -> None:
    """Run cases[start:] in this process, appending one JSON line per case to results_path
    (a {"start": i} line first, so that the parent knows which case killed a dead child)."""
    import faulthandler
    import traceback

    import torch

    torch.set_num_threads(1)
    from ralm.cli import main
    from ralm.errors import RalmError

    class Hang(BaseException):
        pass

    def on_alarm(signum, frame):
        raise Hang()

    signal.signal(signal.SIGALRM, on_alarm)
    cases = json.loads(Path(cases_path).read_text())
    with open(results_path, "a", encoding="utf-8") as log:
        for case in cases[start:]:
            log.write(json.dumps({"start": case["i"]}) + "\n")
            log.flush()
            out, err = io.StringIO(), io.StringIO()
            rc, exc_text, hang = None, None, False
            t = time.perf_counter()
            faulthandler.dump_traceback_later(FUZZ_WATCHDOG, exit=True)
            signal.alarm(FUZZ_ALARM)
            try:
                with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                    rc = main(case["argv"])
            except Hang:
                hang = True
                exc_text = traceback.format_exc()
            except SystemExit as exc:
                rc = 0 if exc.code is None else exc.code if isinstance(exc.code, int) else 1
            except RalmError as exc:  # main catches these; counted as exit 2 if one escapes
                rc = 2
                err.write(f"(escaped main) ralm: error: {exc}\n")
            except BaseException:  # noqa: BLE001 - the point: anything else is a traceback
                exc_text = traceback.format_exc()
                rc = 1
            finally:
                signal.alarm(0)
                faulthandler.cancel_dump_traceback_later()
            seconds = time.perf_counter() - t
            left = []
            if case["out"]:
                left = leftovers(Path(case["out"]))
                shutil.rmtree(case["out"], ignore_errors=True)
                for p in left:
                    p = Path(p)
                    shutil.rmtree(p, ignore_errors=True) if p.is_dir() else p.unlink(missing_ok=True)
            e = err.getvalue()
            log.write(
                json.dumps(
                    {
                        "i": case["i"],
                        "rc": rc,
                        "hang": hang,
                        "exception": exc_text,
                        "stderr_traceback": "Traceback (most recent call last)" in e,
                        "message": ([x for x in e.splitlines() if x.strip()] or [""])[-1][:300],
                        "stderr_tail": e[-1500:],
                        "leftovers": left,
                        "seconds": round(seconds, 3),
                    }
                )
                + "\n"
            )
            log.flush()


def run_fuzz(cases: list[dict], d: Path) -> list[dict]:
    """Run the cases in child processes (restarted after a case that kills one); one result each."""
    cases_path, results_path = d / "cases.json", d / "results.jsonl"
    cases_path.write_text(json.dumps(cases))
    results_path.unlink(missing_ok=True)
    done: dict[int, dict] = {}
    start = 0
    while start < len(cases):
        with open(d / "child.log", "ab") as clog:
            p = subprocess.run(
                [sys.executable, __file__, "--fuzz-child", str(cases_path), str(results_path), str(start)],
                stdout=clog,
                stderr=clog,
                env=child_env(),
                timeout=FUZZ_WATCHDOG * (len(cases) - start) + 120,
            )
        last_start = None
        for line in results_path.read_text().splitlines():
            r = json.loads(line)
            if "start" in r:
                last_start = r["start"]
            else:
                done[r["i"]] = r
        if last_start is not None and last_start not in done:  # the child died in this case
            tail = (d / "child.log").read_bytes()[-3000:].decode("utf-8", "replace")
            hang = "Timeout (" in tail  # faulthandler's watchdog
            done[last_start] = {
                "i": last_start,
                "rc": None if hang else p.returncode,
                "hang": hang,
                "exception": None if hang else f"child process died with status {p.returncode}",
                "stderr_traceback": "Traceback" in tail,
                "message": tail.strip().splitlines()[-1] if tail.strip() else "",
                "stderr_tail": tail,
                "leftovers": [],
                "seconds": FUZZ_WATCHDOG if hang else None,
            }
            start = last_start + 1
        elif p.returncode != 0:
            raise RuntimeError(
                f"fuzz child failed outside any case (status {p.returncode}); see {d / 'child.log'}"
            )
        else:
            start = len(cases)
    out = []
    for c in cases:
        r = dict(done[c["i"]])
        r.update(family=c["family"], desc=c["desc"], argv=c["argv"])
        out.append(r)
    return out


# ----------------------------------------------------------------------------- the harness
@dataclass
class Bench:
    work: Path
    seed: int
    cases: list[dict] = field(default_factory=list)
    skipped: list[dict] = field(default_factory=list)
    retries: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)

    # -- running
    def argv(self, args) -> list[str]:
        return [sys.executable, "-m", "ralm.cli", *map(str, args)]

    def ralm(self, *args, timeout: int = TIMEOUT) -> Res:
        """Run ralm; a run that fails because src/ is mid-edit by someone else (the CLI cannot even
        be imported) is retried, up to 6 times 20 s apart, and counted in `self.retries`."""
        for _ in range(6):
            r = self._ralm(*args, timeout=timeout)
            if not src_in_flux(r.err):
                return r
            self.retries.append(" ".join(r.argv)[:200])
            print(
                f"    (src/ mid-edit? {r.err.strip().splitlines()[-1][:120]}; retrying in 20 s)", flush=True
            )
            time.sleep(20)
        return r

    def wait_cli(self) -> None:
        """Wait (up to 5 min) until the whole CLI imports: other engineers edit src/ meanwhile."""
        for _ in range(15):
            r = self._ralm("--help", timeout=60)
            if r.rc == 0:
                return
            print(f"    (ralm --help fails: {r.message[:120]}; waiting 20 s)", flush=True)
            time.sleep(20)

    def _ralm(self, *args, timeout: int = TIMEOUT) -> Res:
        argv = [str(a) for a in args]
        t = time.perf_counter()
        p = subprocess.Popen(
            self.argv(argv),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            env=child_env(),
            start_new_session=True,
        )
        try:
            out, err = p.communicate(timeout=timeout)
            return Res(
                argv,
                p.returncode,
                out.decode("utf-8", "replace"),
                err.decode("utf-8", "replace"),
                time.perf_counter() - t,
            )
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGKILL)
            out, err = p.communicate()
            return Res(
                argv,
                None,
                out.decode("utf-8", "replace"),
                err.decode("utf-8", "replace"),
                time.perf_counter() - t,
                hang=True,
            )

    def popen(self, *args, stdout=None) -> tuple[subprocess.Popen, Path, float]:
        """Start ralm in the background (stderr to a file); returns (process, stderr file, start time)."""
        fd, name = tempfile.mkstemp(prefix="stderr-", dir=self.work)
        os.close(fd)
        errf = Path(name)
        p = subprocess.Popen(
            self.argv(args),
            stdout=stdout if stdout is not None else subprocess.DEVNULL,
            stderr=open(errf, "wb"),  # noqa: SIM115 - the child owns it
            stdin=subprocess.DEVNULL,
            env=child_env(),
            start_new_session=True,
        )
        return p, errf, time.perf_counter()

    def finish(self, p: subprocess.Popen, errf: Path, t0: float, args, timeout: int = TIMEOUT) -> Res:
        hang = False
        try:
            p.wait(timeout=max(1, timeout - (time.perf_counter() - t0)))
        except subprocess.TimeoutExpired:
            hang = True
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGKILL)
            p.wait()
        return Res(
            [str(a) for a in args],
            None if hang else p.returncode,
            "",
            errf.read_text(encoding="utf-8", errors="replace"),
            time.perf_counter() - t0,
            hang,
        )

    def must(self, *args, timeout: int = 300) -> Res:
        """A set-up step that has to work."""
        r = self.ralm(*args, timeout=timeout)
        if r.rc != 0:
            raise RuntimeError(f"set-up failed: ralm {' '.join(r.argv)}\n{r.err[-3000:]}")
        return r

    def dir(self, name: str) -> Path:
        d = self.work / name
        d.mkdir(parents=True, exist_ok=True)
        return d

    # -- recording
    def show(self, argv: list[str]) -> str:
        s = " ".join(shlex.quote(a) for a in argv)
        s = s.replace(" ".join(shlex.quote(a) for a in self.tiny_flags()), "$TINY")
        return "ralm " + s.replace(str(self.work), "$W")

    def record(
        self,
        family: str,
        name: str,
        res: Res,
        expected: str,
        *,
        rc=(2,),
        names=(),
        names_anywhere: bool = False,
        contains=(),
        one_line: bool = False,
        max_s: float | None = None,
        outs=(),
        left_before=(),
        problems=(),
        command: str | None = None,
        note: str = "",
    ) -> dict:
        """Compare a result with what the issue expects and add a row to the table."""
        probs = list(problems)
        if res.hang:
            probs.insert(0, f"hang (over {TIMEOUT} s)")
        elif res.rc not in rc:
            probs.insert(0, f"exit {res.rc}, expected {'/'.join(map(str, rc))}")
        if res.traceback:
            probs.append("traceback")
        for n in names:
            if n not in (res.out + res.err if names_anywhere else res.message):
                probs.append(f"{'output' if names_anywhere else 'message'} does not name {n!r}")
        for c in contains:
            if not re.search(c, res.err, re.IGNORECASE):
                probs.append(f"stderr lacks /{c}/")
        if one_line and len(res.lines) != 1:
            probs.append(f"{len(res.lines)} stderr lines, expected 1")
        if max_s is not None and res.seconds > max_s:
            probs.append(f"took {res.seconds:.1f} s, expected <= {max_s} s")
        left = [x for x in leftovers(*outs) if x not in set(left_before)]  # new ones only
        if left:
            probs.append("leftovers")
        row = {
            "family": family,
            "case": name,
            "command": command or self.show(res.argv),
            "expected": expected,
            "exit": res.rc,
            "seconds": round(res.seconds, 2),
            "message": printable(res.message.replace(str(self.work), "$W"))[:300],
            "stderr_lines": len(res.lines),
            "traceback": res.traceback,
            "hang": res.hang,
            "leftovers": [p.replace(str(self.work), "$W") for p in left],
            "ok": not probs,
            "problems": probs,
            "note": note,
        }
        if probs:
            row["stderr_tail"] = printable(res.err[-2500:].replace(str(self.work), "$W"))
            row["stdout_tail"] = printable(res.out[-1000:].replace(str(self.work), "$W"))
        self.cases.append(row)
        mark = "ok" if not probs else "FAIL: " + "; ".join(probs)
        print(
            f"[{family}] {name}: exit {res.rc}, {res.seconds:.1f} s -- {mark}\n    {row['message'][:200]}",
            flush=True,
        )
        return row

    def skip(self, family: str, name: str, why: str) -> None:
        self.skipped.append({"family": family, "case": name, "why": why})
        print(f"[{family}] {name}: SKIPPED ({why})", flush=True)

    # -- fixtures
    def tiny_flags(self) -> list[str]:
        return [
            "--reader", str(self.tiny), "--batch-size", "2", "--k", "3", "--refresh-every", "2",
            "--heldout", "3", "--warmup-steps", "1", "--device", "cpu", "--autocast", "off", "--quiet",
            "--set", "tensorboard=false", "--set", "encoder_max_length=32", "--set", "reader_max_length=96",
        ]  # fmt: skip

    def pretrain_args(self, store: Path, out: Path, steps: int = 3, every: int = 1, keep: int = 3) -> list:
        return [
            "pretrain",
            "--docstore",
            store,
            "--out",
            out,
            "--steps",
            steps,
            "--checkpoint-every",
            every,
            "--keep-checkpoints",
            keep,
            *self.tiny_flags(),
        ]

    def setup(self) -> None:
        from ralm.samples import sample_path

        t = time.perf_counter()
        base = self.dir("base")
        self.tiny = base / "tiny"
        subprocess.run(
            [sys.executable, "-c", TINY_CODE, str(self.tiny)],
            check=True,
            env=child_env(),
            capture_output=True,
        )
        self.jsonl = write_jsonl(base / "articles.jsonl", articles())
        self.store = base / "store"
        self.must("corpus", "build", self.jsonl, "--out", self.store, "--chunk-size", "64", "--quiet")
        self.idx = base / "idx"
        self.must("index", "build", self.store, "--out", self.idx, "--encoder", self.tiny, "--quiet")
        self.enwiki = sample_path("enwiki")
        lee = sample_path("lee").read_text(encoding="utf-8").splitlines()
        (base / "lee-train.txt").write_text("\n".join(lee[:250]) + "\n", encoding="utf-8")
        self.held = base / "lee-held.txt"
        self.held.write_text("\n".join(lee[250:]) + "\n", encoding="utf-8")
        self.arpa = base / "lee.arpa"
        self.must("ngram", "train", base / "lee-train.txt", "--order", "3", "--out", self.arpa)
        (base / "lee-small.txt").write_text("\n".join(lee[:60]) + "\n", encoding="utf-8")
        self.small_arpa = base / "lee-small.arpa"
        self.must("ngram", "train", base / "lee-small.txt", "--order", "3", "--out", self.small_arpa)
        self.fuzz_held = base / "lee-held-20.txt"
        self.fuzz_held.write_text("\n".join(lee[250:270]) + "\n", encoding="utf-8")
        self.squad = squad_file(base / "squad.json")
        self.ref = self.dir("ref")
        self.must("corpus", "build", "--sample", "enwiki", "--out", self.ref / "ew", "--quiet")
        self.ref_fp = fingerprint(self.ref / "ew")
        self.must(
            "index", "build", self.ref / "ew", "--out", self.ref / "idx", "--encoder", self.tiny, "--quiet"
        )
        print(f"set-up: {time.perf_counter() - t:.1f} s", flush=True)

    def new_store(self, d: Path) -> Path:
        shutil.copytree(self.store, d / "store", symlinks=True)
        return d / "store"

    # ------------------------------------------------------------------------- damaged files
    def damaged(self) -> None:
        fam = "damaged"
        ok2 = "exit 2, one line naming the file, no traceback"
        # 1. truncated chunk Parquet file
        d = self.dir("d1")
        s = self.new_store(d)
        part = s / "chunks" / "part-00000.parquet"
        truncate(part, part.stat().st_size // 2)
        for sub in (["show", s, "0"], ["info", s], ["verify", s]):
            r = self.ralm("corpus", *sub)
            verify = sub[0] == "verify"
            self.record(
                fam,
                f"truncated chunk parquet: corpus {sub[0]}",
                r,
                "exit 2, a line naming the file, no traceback" if verify else ok2,
                names=["part-00000.parquet"],
                names_anywhere=verify,
                one_line=not verify,
                outs=[s],
            )
        # 2. tokens/input_ids.bin deleted
        d = self.dir("d2")
        s = self.new_store(d)
        run = d / "run"
        self.must(*self.pretrain_args(s, run), "--stop-after", "1")
        (s / "tokens" / "input_ids.bin").unlink()
        r = self.ralm("corpus", "info", s)
        self.record(
            fam,
            "input_ids.bin deleted: corpus info",
            r,
            ok2,
            names=["input_ids.bin"],
            one_line=True,
            outs=[s],
        )
        r = self.ralm("pretrain", "--out", run, "--resume", "--quiet")
        self.record(
            fam,
            "input_ids.bin deleted: pretrain --resume",
            r,
            ok2,
            names=["input_ids.bin"],
            one_line=True,
            outs=[run],
        )
        # 3. token file overwritten at the same size
        d = self.dir("d3")
        s = self.new_store(d)
        tok = s / "tokens" / "input_ids.bin"
        size = tok.stat().st_size
        tok.write_bytes(random.Random(self.seed).randbytes(size))
        r = self.ralm("corpus", "verify", s)
        self.record(
            fam,
            "input_ids.bin other bytes, same size: corpus verify",
            r,
            "exit 2, a line naming the file, no traceback",
            names=["input_ids.bin"],
            names_anywhere=True,
            outs=[s],
        )
        # 4a. newest checkpoint's model.safetensors truncated
        d = self.dir("d4a")
        run = d / "run"
        self.must(*self.pretrain_args(self.store, run), "--stop-after", "2")
        m = run / "checkpoints" / "step-0000002" / "model.safetensors"
        truncate(m, m.stat().st_size // 2)
        r = self.ralm("evaluate-mlm", run, "--n", "2", "--device", "cpu")
        self.record(
            fam,
            "newest checkpoint truncated: evaluate-mlm",
            r,
            "exit 0, a note naming the damaged checkpoint",
            rc=(0,),
            contains=[r"step-0000002.*damaged"],
            outs=[run],
        )
        r = self.ralm("pretrain", "--out", run, "--resume", "--quiet")
        steps = run_steps(run)
        self.record(
            fam,
            "newest checkpoint truncated: pretrain --resume",
            r,
            "exit 0, a fallback note naming the damaged checkpoint; steps 1-3 logged once",
            rc=(0,),
            contains=[r"step-0000002.*damaged"],
            outs=[run],
            problems=[] if steps == [1, 2, 3] else [f"metrics steps {steps}"],
        )
        # 4b. every checkpoint truncated
        d = self.dir("d4b")
        run = d / "run"
        self.must(*self.pretrain_args(self.store, run), "--stop-after", "2")
        for m in (run / "checkpoints").glob("step-*/model.safetensors"):
            truncate(m, m.stat().st_size // 2)
        r = self.ralm("pretrain", "--out", run, "--resume", "--quiet")
        self.record(
            fam,
            "every checkpoint truncated: pretrain --resume",
            r,
            "exit 2, one line naming the files",
            names=["model.safetensors"],
            one_line=True,
            outs=[run],
        )
        r = self.ralm("evaluate-mlm", run, "--n", "2", "--device", "cpu")
        self.record(
            fam,
            "every checkpoint truncated: evaluate-mlm",
            r,
            "exit 2, one line naming the files",
            names=["model.safetensors"],
            one_line=True,
            outs=[run],
        )
        # 5. torn last line of metrics.jsonl: a) as a crash leaves it (metrics are logged before the
        # step's checkpoint, so the step-2 checkpoint was never written); b) the step-2 checkpoint intact
        for variant in ("a", "b"):
            d = self.dir(f"d5{variant}")
            run = d / "run"
            self.must(*self.pretrain_args(self.store, run), "--stop-after", "2")
            met = run / "metrics.jsonl"
            text = met.read_text()
            last = text.rstrip("\n").rsplit("\n", 1)[-1]
            met.write_text(text[: len(text.rstrip("\n")) - len(last) // 2])
            if variant == "a":
                shutil.rmtree(run / "checkpoints" / "step-0000002")
            r = self.ralm("pretrain", "--out", run, "--resume", "--quiet")
            steps = run_steps(run)
            if variant == "a":
                name = "torn last line of metrics.jsonl (its checkpoint not written): pretrain --resume"
                expected = "exit 0, a note about metrics.jsonl; steps 1-3 logged once"
                probs, note = ([] if steps == [1, 2, 3] else [f"metrics steps {steps}"]), ""
            else:
                name = "torn last line of metrics.jsonl (its checkpoint intact): pretrain --resume"
                expected = "exit 0, a note about metrics.jsonl"
                probs, note = [], f"metrics steps afterwards: {steps}"
            self.record(
                fam,
                name,
                r,
                expected,
                rc=(0,),
                contains=[r"metrics\.jsonl"],
                outs=[run],
                problems=probs,
                note=note,
            )
        # 6. 2,000 flipped bytes in the body of index.faiss
        d = self.dir("d6")
        idx = d / "idx"
        shutil.copytree(self.idx, idx, symlinks=True)
        faiss_file = idx / "dense" / "index.faiss"
        flip_bytes(
            faiss_file, 2000, random.Random(self.seed + 6), start=min(256, faiss_file.stat().st_size // 4)
        )
        r = self.ralm("search", idx, "king of Norway", "-k", "3")
        self.record(
            fam,
            "index.faiss 2,000 bytes flipped: search",
            r,
            ok2,
            names=["index.faiss"],
            one_line=True,
            outs=[idx],
        )
        r = self.ralm("index", "verify", idx)
        self.record(
            fam,
            "index.faiss 2,000 bytes flipped: index verify",
            r,
            "exit 2, a line naming index.faiss, no traceback",
            names=["index.faiss"],
            names_anywhere=True,
            outs=[idx],
        )
        # 7. ARPA values out of range
        d = self.dir("d7")
        lines = self.arpa.read_text(encoding="utf-8").split("\n")
        uni = next(i for i, x in enumerate(lines) if x.split("\t")[1:2] == ["of"])
        start2 = lines.index("\\2-grams:")
        bi = next(i for i in range(start2 + 1, len(lines)) if len(lines[i].split("\t")) == 3)
        for label, i, col, val in [
            ("log10 prob > 0", uni, 0, "0.5"),
            ("log10 prob inf", uni, 0, "inf"),
            ("log10 prob 1e999", uni, 0, "1e999"),
            ("log10 prob nan", uni, 0, "nan"),
            ("infinite backoff", bi, 2, "inf"),
            ("backoff 1e999", uni, 2, "1e999"),
        ]:
            bad = list(lines)
            f = bad[i].split("\t")
            f[col] = val
            bad[i] = "\t".join(f)
            path = d / f"bad-{label.replace(' ', '_').replace('>', 'gt')}.arpa"
            path.write_text("\n".join(bad), encoding="utf-8")
            r = self.ralm("ngram", "score", path, self.held)
            self.record(
                fam,
                f"ARPA {label} (line {i + 1}): ngram score",
                r,
                f"exit 2 naming line {i + 1}",
                contains=[rf"(:{i + 1}\b|line {i + 1}\b)"],
                one_line=True,
            )
        # (extra) an index copied with its symlink encoder/doc -> query dereferenced (cp -rL, copytree)
        d = self.dir("d6b")
        idx = d / "idx"
        shutil.copytree(self.idx, idx, symlinks=False)
        r = self.ralm("index", "verify", idx)
        sr = self.ralm("search", idx, "king of Norway", "-k", "1")
        self.record(
            fam,
            "(extra) index copied with symlinks dereferenced (cp -rL): index verify",
            r,
            "index verify agrees with search (both accept or both refuse the copy)",
            rc=(sr.rc,),
            note=f"search on the same copy: exit {sr.rc}",
        )
        # 8. index build onto a finished index
        d = self.dir("d8a")
        idx = d / "idx"
        shutil.copytree(self.idx, idx, symlinks=True)
        r = self.ralm(
            "index",
            "build",
            self.store,
            "--out",
            idx,
            "--encoder",
            self.tiny,
            "--pooling",
            "cls",
            "--proj-dim",
            "128",
            "--quiet",
        )
        v = self.ralm("index", "verify", idx)
        self.record(
            fam,
            "index build, other encoder options, onto a finished index",
            r,
            "exit 2, the index untouched (verify ok)",
            one_line=True,
            outs=[idx],
            problems=[]
            if v.rc == 0
            else [f"index verify afterwards: exit {v.rc}: {(v.out + v.err).strip()[:300]}"],
        )
        d = self.dir("d8b")
        idx = d / "idx"
        shutil.copytree(self.idx, idx, symlinks=True)
        r = self.ralm("index", "build", self.store, "--out", idx, "--encoder", self.tiny, "--quiet")
        v = self.ralm("index", "verify", idx)
        self.record(
            fam,
            "index build onto a finished index, no --overwrite",
            r,
            "exit 2, the index untouched (verify ok)",
            one_line=True,
            outs=[idx],
            problems=[]
            if v.rc == 0
            else [f"index verify afterwards: exit {v.rc}: {(v.out + v.err).strip()[:300]}"],
        )

    # ------------------------------------------------------------------------- disk full
    def disk_full(self) -> None:
        fam = "disk full"
        mnt = self.dir("full")
        if os.geteuid() != 0 or shutil.which("mount") is None:
            self.skip(fam, "corpus build onto a 2 MiB tmpfs", "not root: cannot mount a small tmpfs")
            return
        m = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mnt)], capture_output=True, text=True
        )
        if m.returncode != 0:
            self.skip(fam, "corpus build onto a 2 MiB tmpfs", f"mount failed: {m.stderr.strip()}")
            return
        try:
            store = mnt / "store"
            self.must("corpus", "build", self.jsonl, "--out", store, "--chunk-size", "64", "--quiet")
            fp = fingerprint(store)

            def used() -> int:
                st = os.statvfs(mnt)
                return (st.f_blocks - st.f_bfree) * st.f_frsize

            before, entries = used(), sorted(p.name for p in mnt.iterdir())
            r = self.ralm("corpus", "build", "--sample", "enwiki", "--out", store, "--overwrite", "--quiet")
            v = self.ralm("corpus", "verify", store)
            probs = []
            if fingerprint(store) != fp or v.rc != 0:
                probs.append(f"old store changed (verify exit {v.rc})")
            grown = used() - before
            if grown > 8192:
                probs.append(f"{grown} bytes still used on the full disk")
            new = sorted(set(p.name for p in mnt.iterdir()) - set(entries) - {".store.lock"})
            if new:
                probs.append(f"new entries {new}")
            self.record(
                fam,
                "corpus build --overwrite onto a full disk",
                r,
                "exit 2, 'no space left', nothing written, old store intact",
                contains=["no space left"],
                one_line=True,
                outs=[store],
                problems=probs,
            )
            before, entries = used(), sorted(p.name for p in mnt.iterdir())
            r = self.ralm("corpus", "build", "--sample", "enwiki", "--out", mnt / "new", "--quiet")
            probs = [f"{mnt / 'new'} exists"] if (mnt / "new").exists() else []
            grown = used() - before
            if grown > 8192:
                probs.append(f"{grown} bytes still used on the full disk")
            self.record(
                fam,
                "corpus build of a new store onto a full disk",
                r,
                "exit 2, 'no space left', nothing written",
                contains=["no space left"],
                one_line=True,
                outs=[mnt / "new"],
                problems=probs,
            )
            # extras: other writers onto the full disk
            before = used()
            r = self.ralm(
                "index", "build", self.ref / "ew", "--out", mnt / "idx", "--encoder", self.tiny, "--quiet"
            )
            grown = used() - before
            self.record(
                fam,
                "(extra) index build onto a full disk",
                r,
                "exit 2, one line about the disk, no traceback",
                contains=["space"],
                one_line=True,
                outs=[mnt / "idx"],
                note=f"{grown} bytes left on the disk afterwards (a resumable partial build may stay)",
            )
            before = used()
            r = self.ralm("ngram", "train", self.work / "base" / "lee-train.txt", "--out", mnt / "lee.arpa")
            grown = used() - before
            self.record(
                fam,
                "(extra) ngram train onto a full disk",
                r,
                "exit 2, one line about the disk, nothing written",
                contains=["space"],
                one_line=True,
                outs=[mnt / "lee.arpa"],
                problems=[] if grown <= 8192 else [f"{grown} bytes still used on the full disk"],
            )
        finally:
            if subprocess.run(["umount", str(mnt)], capture_output=True).returncode != 0:
                subprocess.run(["umount", "-l", str(mnt)], capture_output=True)

    # ------------------------------------------------------------------------- kill -9
    def kill_after(self, args, delay: float, wait_for=None) -> tuple[bool, float]:
        """Start ralm, wait for `wait_for()` (if given), sleep `delay`, kill -9; (killed?, seconds)."""
        p, errf, t0 = self.popen(*args)
        if wait_for is not None:
            while p.poll() is None and not wait_for() and time.perf_counter() - t0 < 90:
                time.sleep(0.05)
        time.sleep(delay)
        killed = p.poll() is None
        if killed:
            os.kill(p.pid, signal.SIGKILL)
        p.wait()
        with contextlib.suppress(ProcessLookupError):  # anything it started
            os.killpg(p.pid, signal.SIGKILL)
        return killed, time.perf_counter() - t0

    def kill9(self) -> None:
        fam = "kill -9"
        # corpus build of the enwiki sample, killed after 0.5-5 s; the last trial after the temp dir appears
        for trial in range(3):
            d = self.dir(f"k-corpus-{trial}")
            out = d / "ew"
            args = ["corpus", "build", "--sample", "enwiki", "--out", out, "--quiet"]
            delay = round(self.rng.uniform(0.5, 5.0), 2)
            wait = (
                (lambda d=d: any(p.name.startswith(".ew.tmp-") for p in d.iterdir())) if trial == 2 else None
            )
            killed, secs = self.kill_after(args, delay, wait)
            tmp_left = [p.name for p in d.iterdir() if p.name.startswith(".ew.tmp-")]
            again = args + (["--overwrite"] if out.exists() else [])
            r = self.ralm(*again)
            probs = []
            if fingerprint(out) != self.ref_fp:
                probs.append("store differs from an uninterrupted build")
            v = self.ralm("corpus", "verify", out)
            if v.rc != 0:
                probs.append(f"corpus verify exit {v.rc}")
            when = f"{'after the temp dir appeared + ' if wait else ''}{delay} s"
            note = (
                f"killed at {secs:.1f} s" if killed else "finished before the kill"
            ) + f"; temp dirs at the kill: {tmp_left or 'none'}"
            self.record(
                fam,
                f"corpus build killed ({when}), rerun",
                r,
                "exit 0"
                + (", a note about the removed temp dir" if tmp_left else "")
                + ", store == uninterrupted build",
                rc=(0,),
                contains=["removed"] if tmp_left else [],
                outs=[out],
                problems=probs,
                note=note,
            )
        # index build of the enwiki store (tiny encoder), killed 0.2-3 s after its directory appears
        for trial in range(3):
            d = self.dir(f"k-index-{trial}")
            out = d / "idx"
            args = ["index", "build", self.ref / "ew", "--out", out, "--encoder", self.tiny, "--quiet"]
            delay = round(self.rng.uniform(0.1, 3.0), 2)
            killed, secs = self.kill_after(
                args, delay, wait_for=lambda out=out: (out / "embeddings.partial.npy").exists()
            )
            state = (
                "finished"
                if (out / "retrieval.json").exists()
                else "unfinished"
                if out.exists()
                else "absent"
            )
            note = (
                f"killed at {secs:.1f} s" if killed else "finished before the kill"
            ) + f"; index {state} at the kill"
            listing = sorted(p.name for p in out.iterdir()) if out.is_dir() else []
            note += f" ({', '.join(listing) or 'empty'})"
            if state == "unfinished":  # other encoder options, tried on a copy of the killed build
                other = d / "other" / "idx"
                shutil.copytree(out, other, symlinks=True)
                recorded = (other / "build.json").is_file() or (
                    other / "encoder" / "ralm_encoder.json"
                ).is_file()
                before = leftovers(other)  # the killed build's resumable files stay
                r = self.ralm(
                    "index", "build", self.ref / "ew", "--out", other, "--encoder", self.tiny,
                    "--pooling", "cls", "--proj-dim", "128", "--quiet",
                )  # fmt: skip
                self.record(
                    fam,
                    f"index build killed ({delay} s into embedding), rerun with other encoder options",
                    r,
                    "exit 2, one line naming the option that differs"
                    if recorded
                    else "nothing recorded yet (no build.json): a fresh build, exit 0",
                    rc=(2,) if recorded else (0,),
                    names=["pooling"] if recorded else [],
                    one_line=recorded,
                    outs=[other],
                    left_before=before,
                    note=note,
                )
            again = args + (["--overwrite"] if state == "finished" else [])
            r = self.ralm(*again)
            probs = []
            a, b = out / "embeddings.npy", self.ref / "idx" / "embeddings.npy"
            if not a.is_file() or a.read_bytes() != b.read_bytes():
                probs.append("embeddings.npy differs from an uninterrupted build")
            v = self.ralm("index", "verify", out)
            if v.rc != 0:
                probs.append(f"index verify exit {v.rc}")
            self.record(
                fam,
                f"index build killed ({delay} s into embedding), rerun",
                r,
                "exit 0 (resumes), embeddings == uninterrupted build, verify ok",
                rc=(0,),
                outs=[out],
                problems=probs,
                note=note,
            )
        # pretrain killed 0.2-4 s after metrics.jsonl appears, then --resume
        for trial in range(2):
            d = self.dir(f"k-pretrain-{trial}")
            run = d / "run"
            args = self.pretrain_args(self.store, run, steps=20, every=2)
            delay = round(self.rng.uniform(0.2, 3.0), 2)
            killed, secs = self.kill_after(
                args,
                delay,
                wait_for=lambda run=run: bool(run_steps(run)) and not isinstance(run_steps(run), str),
            )
            before = run_steps(run) if run.exists() else "no run dir"
            r = self.ralm("pretrain", "--out", run, "--resume", "--quiet")
            steps = run_steps(run)
            probs = [] if steps == list(range(1, 21)) else [f"metrics steps {steps}"]
            if not (run / "checkpoints" / "step-0000020").is_dir():
                probs.append("no final checkpoint step-0000020")
            note = (
                f"killed at {secs:.1f} s" if killed else "finished before the kill"
            ) + f"; steps logged at the kill: {before}"
            self.record(
                fam,
                f"pretrain killed ({delay} s after its first step), --resume",
                r,
                "exit 0, steps 1-20 logged once, final checkpoint",
                rc=(0,),
                outs=[run],
                problems=probs,
                note=note,
            )

    # ------------------------------------------------------------------------- two writers
    def wait_lock(self, out: Path, pid: int, p: subprocess.Popen, timeout: float = 90) -> bool:
        lock = out.parent / f".{out.name}.lock"
        t = time.perf_counter()
        while time.perf_counter() - t < timeout and p.poll() is None:
            with contextlib.suppress(OSError, ValueError):
                if json.loads(lock.read_text()).get("pid") == pid:
                    return True
            time.sleep(0.05)
        return False

    def concurrency(self) -> None:
        fam = "two writers"
        # two corpus builds into one --out (the second also with --overwrite)
        d = self.dir("c-corpus")
        out = d / "ew"
        args = ["corpus", "build", "--sample", "enwiki", "--out", out, "--quiet"]
        p, errf, t0 = self.popen(*args)
        locked = self.wait_lock(out, p.pid, p)
        for extra in ([], ["--overwrite"]):
            r = self.ralm(*args, *extra)
            alive = p.poll() is None
            self.record(
                fam,
                "second corpus build into one --out" + (" (--overwrite)" if extra else ""),
                r,
                "exit 2 naming the holder's PID",
                names=[f"PID {p.pid}"],
                one_line=True,
                problems=[] if locked and alive else ["inconclusive: the first build was not running"],
            )
        a = self.finish(p, errf, t0, args)
        probs = [] if fingerprint(out) == self.ref_fp else ["store differs from an uninterrupted build"]
        self.record(
            fam,
            "  ...the first corpus build",
            a,
            "exit 0, store == uninterrupted build",
            rc=(0,),
            outs=[out],
            problems=probs,
        )
        # two pretrains into one --out, then --overwrite onto the run while it trains
        d = self.dir("c-pretrain")
        run = d / "run"
        args = self.pretrain_args(self.store, run, steps=60, every=10)
        p, errf, t0 = self.popen(*args)
        locked = self.wait_lock(run, p.pid, p)
        r = self.ralm(*args)
        alive = p.poll() is None
        self.record(
            fam,
            "second pretrain into one --out",
            r,
            "exit 2 naming the holder's PID",
            names=[f"PID {p.pid}"],
            one_line=True,
            problems=[] if locked and alive else ["inconclusive: the first run was not running"],
        )
        t = time.perf_counter()
        while (
            p.poll() is None
            and not (isinstance(s := run_steps(run), list) and s)
            and time.perf_counter() - t < 90
        ):
            time.sleep(0.1)
        r = self.ralm(*args, "--overwrite")
        alive = p.poll() is None
        self.record(
            fam,
            "pretrain --overwrite onto a run still training",
            r,
            "exit 2 naming the holder's PID",
            names=[f"PID {p.pid}"],
            one_line=True,
            problems=[] if alive else ["inconclusive: the first run had finished"],
        )
        a = self.finish(p, errf, t0, args, timeout=300)
        steps = run_steps(run)
        self.record(
            fam,
            "  ...the live pretrain run",
            a,
            "exit 0, steps 1-60 logged once, no temp files in the run",
            rc=(0,),
            outs=[run],
            problems=[] if steps == list(range(1, 61)) else [f"metrics steps {steps}"],
        )

    # ------------------------------------------------------------------------- small defects
    def piped(self, args, mode: str) -> Res:
        """ralm ARGS | head -1 (mode "head") or | (a reader that exits at once; mode "closed")."""
        p, errf, t0 = self.popen(*args, stdout=subprocess.PIPE)
        if mode == "head":
            p.stdout.readline()
        p.stdout.close()
        return self.finish(p, errf, t0, args)

    def small(self) -> None:
        fam = "small defects"
        exp = "exit 0 or 141, no traceback, no error line"
        for args, mode, label in [
            (["corpus", "show", self.store, "0"], "head", "corpus show STORE 0 | head -1"),
            (
                ["corpus", "show", self.ref / "ew", "0", "--tokens"],
                "head",
                "(extra) corpus show EW 0 --tokens | head -1",
            ),
            (["corpus", "show", self.store, "0"], "closed", "(extra) corpus show STORE 0 | (closed pipe)"),
            (
                ["corpus", "info", "--json", self.ref / "ew"],
                "head",
                "(extra) corpus info --json EW | head -1",
            ),
            (
                ["search", self.idx, "king", "-k", "50", "--json"],
                "head",
                "(extra) search IDX king -k 50 --json | head -1",
            ),
            (
                ["ngram", "score", "--per-sentence", self.arpa, self.held],
                "head",
                "(extra) ngram score --per-sentence | head -1",
            ),
        ]:
            r = self.piped(args, mode)
            self.record(
                fam,
                label,
                r,
                exp,
                rc=(0, 141),
                command=self.show(r.argv) + (" | head -1" if mode == "head" else " | true"),
                problems=[] if not r.lines else [f"stderr: {r.message[:100]}"],
            )
        d = self.dir("s-utf8")
        bad = d / "bad.txt"
        bad.write_bytes(b"the first line\nthe second line\nthe third \xff\xfe line\nthe fourth line\n")
        r = self.ralm("ngram", "train", bad, "--out", d / "bad.arpa")
        self.record(
            fam,
            "ngram train, invalid UTF-8 on line 3",
            r,
            "exit 2, message names line 3",
            contains=[r"(line 3\b|:3\b)"],
            one_line=True,
            outs=[d / "bad.arpa"],
            problems=[] if not (d / "bad.arpa").exists() else ["bad.arpa written"],
        )
        r = self.ralm("ngram", "score", self.arpa, bad)
        self.record(
            fam,
            "(extra) ngram score, invalid UTF-8 on line 3",
            r,
            "exit 2, message names line 3",
            contains=[r"(line 3\b|:3\b)"],
            one_line=True,
        )
        base = self.ralm("--version")
        d = self.dir("s-lang")
        r = self.ralm("corpus", "build", "--sample", "enwiki", "--out", d / "ew", "--lang", "xx", "--quiet")
        limit = round(max(3.0, base.seconds + 2.0), 1)
        self.record(
            fam,
            "corpus build --lang xx",
            r,
            f"exit 2 before reading input (<= {limit} s)",
            names=["xx"],
            one_line=True,
            max_s=limit,
            outs=[d / "ew"],
            problems=[] if not (d / "ew").exists() else ["--out created"],
            note=f"`ralm --version` takes {base.seconds:.2f} s here",
        )
        for k in ("0", "-1"):
            r = self.ralm("search", self.idx, "king", "-k", k)
            self.record(
                fam,
                ("" if k == "0" else "(extra) ") + f"search IDX q -k {k}",
                r,
                f"exit 2 fast (<= {limit} s)",
                one_line=True,
                max_s=limit,
            )

    # ------------------------------------------------------------------------- fuzzing
    def fuzz(self, n: int) -> dict:
        base = {
            "wiki_xml": wiki_excerpt(self.enwiki),
            "jsonl": self.jsonl.read_bytes(),
            "arpa": self.small_arpa.read_bytes(),
            "held": self.fuzz_held,
            "squad": self.squad.read_bytes(),
            "tiny": self.tiny,
        }
        families = {}
        for fam in ("wiki", "jsonl", "arpa", "squad"):
            t = time.perf_counter()
            d = self.dir(f"fuzz-{fam}")
            cases = make_fuzz_cases(fam, n, self.seed, base, d)
            results = run_fuzz(cases, d)
            secs = time.perf_counter() - t
            c = {
                "cases": len(results),
                "exit_0": sum(r["rc"] == 0 for r in results),
                "exit_2": sum(r["rc"] == 2 for r in results),
                "exit_other": sum(r["rc"] not in (0, 2) and not r["hang"] for r in results),
                "tracebacks": sum(
                    bool(r["exception"] and not r["hang"]) or r["stderr_traceback"] for r in results
                ),
                "hangs": sum(r["hang"] for r in results),
                "leftovers": sum(bool(r["leftovers"]) for r in results),
                "seconds": round(secs, 1),
            }
            bad = [
                r
                for r in results
                if r["hang"]
                or r["rc"] not in (0, 2)
                or r["exception"]
                or r["stderr_traceback"]
                or r["leftovers"]
            ]
            families[fam] = {"counts": c, "failures": bad}
            print(f"[fuzz {fam}] {json.dumps(c)}", flush=True)
            for r in bad[:10]:
                print(
                    f"    #{r['i']} ({r['desc'][:120]}): exit {r['rc']} hang={r['hang']} {r['message'][:160]}"
                )
        return families


# ----------------------------------------------------------------------------- report
def printable(s: str) -> str:
    """Control characters (a NUL from a fuzzed file, ...) as escapes, so the table stays text."""
    return "".join(c if c.isprintable() or c in "\n\t" else ascii(c)[1:-1] for c in s)


def md_escape(s) -> str:
    return printable(str(s)).replace("|", "\\|").replace("\n", " ")


def markdown(bench: Bench, fuzz: dict, metrics: dict, command: str, where: str) -> str:
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fuzz", type=int, default=200, help="mutations per fuzz family (0: no fuzzing)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--only", help="comma-separated: damaged,disk,kill,writers,small,fuzz")
    ap.add_argument("--keep", action="store_true", help="keep the scratch directory")
    ap.add_argument("--fuzz-child", nargs=3, metavar=("CASES", "RESULTS", "START"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.fuzz_child:
        fuzz_child(args.fuzz_child[0], args.fuzz_child[1], int(args.fuzz_child[2]))
        return
    os.environ.update(CHILD_ENV)
    only = set(args.only.split(",")) if args.only else {"damaged", "disk", "kill", "writers", "small", "fuzz"}
    work = Path(tempfile.mkdtemp(prefix="ralm-faults-"))
    bench = Bench(work, args.seed)
    t = time.perf_counter()
    fuzz: dict = {}
    try:
        bench.setup()
        steps = [
            ("damaged", bench.damaged),
            ("disk", bench.disk_full),
            ("kill", bench.kill9),
            ("writers", bench.concurrency),
            ("small", bench.small),
        ]
        for name, fn in steps:
            if name in only:
                bench.wait_cli()
                fn()
        if "fuzz" in only and args.fuzz > 0:
            bench.wait_cli()
            fuzz = bench.fuzz(args.fuzz)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
        else:
            print(f"scratch directory kept: {work}")
    fc = {fam: f["counts"] for fam, f in fuzz.items()}
    metrics = {
        "cases_total": len(bench.cases),
        "cases_ok": sum(c["ok"] for c in bench.cases),
        "cases_skipped": len(bench.skipped),
        "tracebacks": sum(c["traceback"] for c in bench.cases) + sum(c["tracebacks"] for c in fc.values()),
        "hangs": sum(c["hang"] for c in bench.cases) + sum(c["hangs"] for c in fc.values()),
        "exit_other": sum(c["exit"] not in (0, 2, 141) and not c["hang"] for c in bench.cases)
        + sum(c["exit_other"] for c in fc.values()),
        "case_leftovers": sum(bool(c["leftovers"]) for c in bench.cases),
        "retries_src_mid_edit": len(bench.retries),
        "seconds_total": round(time.perf_counter() - t, 1),
    }
    for fam, c in fc.items():
        for k, v in c.items():
            metrics[f"fuzz_{fam}_{k}"] = v
    command = (
        "python benchmarks/faults.py"
        + (f" --fuzz {args.fuzz}" if args.fuzz != 200 else "")
        + (f" --seed {args.seed}" if args.seed else "")
        + (f" --only {args.only}" if args.only else "")
    )
    targets = {"tracebacks": "== 0", "hangs": "== 0", "exit_other": "== 0", "cases_ok": "== cases_total"}
    fuzz_failures = {
        fam: [
            {
                k: r[k]
                for k in (
                    "i",
                    "desc",
                    "argv",
                    "rc",
                    "hang",
                    "exception",
                    "message",
                    "stderr_tail",
                    "leftovers",
                )
            }
            for r in f["failures"][:25]
        ]
        for fam, f in fuzz.items()
    }
    for fl in fuzz_failures.values():
        for r in fl:
            r["argv"] = [a.replace(str(work), "$W") for a in r["argv"]]
    write_result(
        "faults",
        command,
        metrics,
        targets,
        cases=bench.cases,
        skipped=bench.skipped,
        fuzz_failures=fuzz_failures,
        retried_because_src_mid_edit=bench.retries,
    )
    text = markdown(bench, fuzz, metrics, command, machine())
    (RESULTS / "faults.md").write_text(text, encoding="utf-8")
    print()
    print(text)


if __name__ == "__main__":
    main()
