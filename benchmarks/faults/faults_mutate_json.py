"""Fuzz mutations of `faults.py` for structured inputs: odd values at random JSON paths (a JSONL
corpus, a SQuAD file) and damaged ARPA n-gram lines."""

from __future__ import annotations

import json
import random

from benchmarks.faults.faults_mutate import UNICODE

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
