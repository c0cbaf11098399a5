"""Shared pieces of the fault-injection benchmark (`faults.py`): limits, the child environment, the
result record `Res`, and small file helpers (damage, truncation, tiny corpora, SQuAD and wiki
inputs)."""

from __future__ import annotations

import bz2
import json
import os
import random
import re
from dataclasses import dataclass
from pathlib import Path

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
from ralm.models.names import default_backbone_path
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
