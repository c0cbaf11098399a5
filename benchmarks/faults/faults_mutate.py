"""Fuzz mutations of `faults.py` for text and binary inputs: junk strings, odd Unicode, broken
wikitext in a wiki dump, and byte-level damage (flips, cuts, splices)."""

from __future__ import annotations

import random
import re

# JSON's punctuation and odd values (null, a number past float, NaN): junk for every JSON input
JSON_JUNK = [
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
]
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
        *JSON_JUNK,
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
        *JSON_JUNK,
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
    "{{",
    "}}",
    "{{{",
    "}}}",
    "[[",
    "]]",
    "[[File:x.jpg|thumb|[[a|b]]",
    "{|",
    "|}",
    "|-",
    "'''",
    "''",
    "==",
    "== ==",
    "<ref>",
    "</ref>",
    "<ref name=x/>",
    "<!--",
    "-->",
    "<nowiki>",
    "</nowiki>",
    "<math>",
    "</math>",
    "<gallery>",
    "&nbsp;",
    "&#0;",
    "&#x110000;",
    "&bogus;",
    "__NOTOC__",
    "#REDIRECT [[X]]",
    "[[Category:",
    "[http://",
    "~~~~",
    "{{#if:",
    "{{!}}",
    "|",
    "=",
    "*",
    "#",
    ":",
    ";",
    "----",
    "<br>",
    "<div>",
    "</div>",
    "<span style=",
    "[[:en:",
    "[[ ]]",
    "[[|]]",
    "{{ }}",
]


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
        [
            "empty-title",
            "blank-title",
            "dup-page",
            "ns",
            "no-text",
            "empty-text",
            "redirect",
            "id",
            "no-title",
            "self-closing-text",
        ]
    )
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
