"""Man pages (troff: man and mdoc macros) as plain text for nordic_corpus.py, no groff needed:
troff_to_text(src) -> (name line, text); man_articles(files, lang) -> one article a page."""

from __future__ import annotations

import gzip
import re
from collections.abc import Iterator
from pathlib import PurePosixPath

from benchmarks.data_prep.nordic_debs import _decode
from benchmarks.data_prep.nordic_troff_escapes import (
    _FONT_MACROS,
    _PARA_MACROS,
    DEFAULT_STRINGS,
    expand_escapes,
    split_args,
)

_MDOC_CALLABLE = {
    "Ad",
    "An",
    "Ar",
    "Cd",
    "Cm",
    "Dv",
    "Er",
    "Ev",
    "Fa",
    "Fl",
    "Fn",
    "Ic",
    "Li",
    "Nm",
    "Op",
    "Pa",
    "Va",
    "Vt",
    "Xr",
    "Dq",
    "Do",
    "Dc",
    "Sq",
    "So",
    "Sc",
    "Pq",
    "Po",
    "Pc",
    "Qq",
    "Ql",
    "Oo",
    "Oc",
    "Ns",
    "No",
    "Em",
    "Sy",
    "Tn",
    "Ms",
    "Mt",
    "Lk",
    "Bx",
    "Ux",
    "At",
    "Xo",
    "Xc",
    "Aq",
    "Ao",
    "Ac",
    "Bq",
    "Bo",
    "Bc",
    "Brq",
    "Bro",
    "Brc",
    "Ek",
    "Eo",
    "Ec",
    "Pf",
    "Ft",
    "Sx",
    "St",
}
_MDOC_PUNCT = {".", ",", ":", ";", ")", "]", "?", "!"}
_MDOC_ENCLOSE = {
    "Op": ("[", "]"),
    "Dq": ("“", "”"),
    "Sq": ("‘", "’"),
    "Pq": ("(", ")"),
    "Qq": ('"', '"'),
    "Aq": ("<", ">"),
    "Bq": ("[", "]"),
    "Brq": ("{", "}"),
}
_MDOC_OPEN = {"Oo": "[", "Do": "“", "So": "‘", "Po": "(", "Ao": "<", "Bo": "[", "Bro": "{"}
_MDOC_CLOSE = {"Oc": "]", "Dc": "”", "Sc": "’", "Pc": ")", "Ac": ">", "Bc": "]", "Brc": "}"}


def _mdoc_inline(tokens: list[str], name: str) -> list[str]:
    """Words of an mdoc line's arguments, with callable macros (Fl, Ar, Op, Xr, ...) rendered."""
    words: list[str] = []
    i = 0
    while i < len(tokens):
        t = tokens[i]
        i += 1
        if t not in _MDOC_CALLABLE:
            words.append(t)
            continue
        if t in _MDOC_ENCLOSE:  # encloses the rest of the line
            o, c = _MDOC_ENCLOSE[t]
            words.append(o + " ".join(_mdoc_inline(tokens[i:], name)) + c)
            break
        # this macro's arguments: the plain tokens up to the next callable macro
        j = i
        while j < len(tokens) and tokens[j] not in _MDOC_CALLABLE:
            j += 1
        args, i = tokens[i:j], j
        n = len(args)
        while n and args[n - 1] in _MDOC_PUNCT:
            n -= 1
        body, trail = args[:n], args[n:]
        if t in _MDOC_OPEN:
            words.append(_MDOC_OPEN[t])
            words.extend(body)
        elif t in _MDOC_CLOSE:
            words.append(_MDOC_CLOSE[t])
            words.extend(body)
        elif t == "Fl":
            words.extend(["-" + a for a in body] or ["-"])
        elif t == "Nm":
            words.extend(body or [name])
        elif t == "Ar":
            words.extend(body or ["file ..."])
        elif t == "Xr" and len(body) >= 2:
            words.append(f"{body[0]}({body[1]})")
            words.extend(body[2:])
        elif t == "Bx":
            words.append("".join(body[:1]) + "BSD")
            words.extend(body[1:])
        elif t == "Ux":
            words.append("UNIX")
        else:
            words.extend(body)
        words.extend(trail)
    # attach closing punctuation to the previous word
    merged: list[str] = []
    for w in words:
        if w in _MDOC_PUNCT and merged:
            merged[-1] += w
        else:
            merged.append(w)
    return merged


class _Text:
    """Paragraphs of lines, filled from text fragments."""

    def __init__(self) -> None:
        self.paras: list[list[str]] = []
        self.lines: list[str] = []
        self.line: list[str] = []

    def add(self, text: str) -> None:
        text = " ".join(text.split())
        if text:
            self.line.append(text)

    def brk(self) -> None:
        if self.line:
            self.lines.append(" ".join(self.line))
            self.line = []

    def para(self) -> None:
        self.brk()
        if self.lines:
            self.paras.append(self.lines)
            self.lines = []

    def text(self) -> str:
        self.para()
        return "\n\n".join("\n".join(p) for p in self.paras)


def troff_to_text(src: str) -> tuple[str, str]:
    """Render a man page (man or mdoc macros) to plain text; returns (text, NAME-line text).

    Headings (.SH/.SS/.Sh) become lines of their own, .TP/.IP/.PP paragraph breaks, font and
    size escapes are dropped, special characters and strings (\\(aq, \\*(lq, .ds) substituted;
    macro definitions, conditionals and other requests are dropped.
    """
    # join continuation lines (an odd number of trailing backslashes)
    raw_lines = src.replace("\r\n", "\n").split("\n")
    lines: list[str] = []
    buf = ""
    for ln in raw_lines:
        m = re.search(r"(\\+)$", ln)
        if m and len(m.group(1)) % 2 == 1:
            buf += ln[:-1]
            continue
        lines.append(buf + ln)
        buf = ""
    if buf:
        lines.append(buf)

    strings = dict(DEFAULT_STRINGS)
    out = _Text()
    name = ""
    name_line: list[str] = []
    in_name = False
    section_no = 0
    nofill = False
    tag_pending = False
    link: str | None = None
    skip_until: str | None = None  # ".." after .de
    brace_depth = 0
    tbl = 0  # 0 outside .TS, 1 in the format lines, 2 in the data
    heading_next = False

    def emit(text: str) -> None:
        nonlocal tag_pending, heading_next
        if in_name:
            name_line.append(text)
        if heading_next:
            out.para()
            out.add(text)
            out.para()
            heading_next = False
            return
        out.add(text)
        if tag_pending or nofill:
            out.brk()
            tag_pending = False

    for ln in lines:
        if skip_until is not None:
            if ln.strip() == skip_until:
                skip_until = None
            continue
        if brace_depth > 0:
            brace_depth += ln.count("\\{") - ln.count("\\}")
            continue
        is_request = ln[:1] in (".", "'")
        if is_request:
            body = ln[1:].lstrip(" \t")
            m = re.match(r"(\S+)\s*(.*)$", body)
            req, rest = (m.group(1), m.group(2)) if m else ("", "")
            if req.startswith('\\"') or req == "" or req.startswith("\\#"):
                continue
            if req in ("de", "de1", "am", "ig"):
                skip_until = ".." if req != "ig" or not rest.strip() else "." + rest.split()[0]
                continue
            if req in ("if", "ie", "el", "while"):
                brace_depth = max(0, ln.count("\\{") - ln.count("\\}"))
                continue
            if req == "TS":
                tbl = 1
                out.para()
                continue
            if req == "TE":
                tbl = 0
                out.para()
                continue
            args = split_args(rest)
            if req == "ds" and args:
                strings[args[0]] = rest.split(None, 1)[1].lstrip('"') if len(rest.split(None, 1)) > 1 else ""
                continue
            if req == "TH" or req == "Dt":
                continue
            if req in ("SH", "SS", "Sh", "Ss"):
                if req in ("SH", "Sh"):
                    section_no += 1
                    in_name = section_no == 1
                tag_pending = False
                out.para()
                if args:
                    out.add(expand_escapes(" ".join(args), strings))
                    out.para()
                else:
                    heading_next = True
                continue
            if req == "TP":
                out.para()
                tag_pending = True
                continue
            if req == "IP":
                out.para()
                if args and args[0]:
                    out.add(expand_escapes(args[0], strings))
                    out.brk()
                continue
            if req in _PARA_MACROS:
                tag_pending = False
                out.para()
                continue
            if req == "br":
                out.brk()
                continue
            if req in ("nf", "EX", "Vb"):
                nofill = True
                out.brk()
                continue
            if req in ("fi", "EE", "Ve"):
                nofill = False
                out.brk()
                continue
            if req in _FONT_MACROS:
                if args:
                    joiner = "" if len(req) == 2 and req not in ("SM", "SB") else " "
                    emit(expand_escapes(joiner.join(args), strings))
                continue
            if req in ("UR", "MT"):
                link = expand_escapes(args[0], strings) if args else None
                continue
            if req in ("UE", "ME"):
                tail = expand_escapes("".join(args), strings)
                if link:
                    emit(f"<{link}>{tail}")
                elif tail:
                    emit(tail)
                link = None
                continue
            # mdoc
            if req == "Nm" and not name and args:
                name = args[0]
            if req == "Nd":
                emit("- " + expand_escapes(" ".join(args), strings))
                continue
            if req == "It":
                out.para()
                words = _mdoc_inline(args, name)
                if words:
                    out.add(expand_escapes(" ".join(words), strings))
                    out.brk()
                continue
            if req in _MDOC_CALLABLE or req in ("Nm", "Dd", "Os", "Sm", "Pf", "Fo", "Fc", "Cd"):
                if req in ("Dd", "Os", "Sm"):
                    continue
                words = _mdoc_inline([req] + args, name)
                if words:
                    emit(expand_escapes(" ".join(words), strings))
                continue
            continue  # any other request: dropped
        # text line
        if tbl == 1:
            if ln.rstrip().endswith("."):
                tbl = 2
            continue
        if tbl == 2:
            if ln.strip() in ("_", "=", ""):
                continue
            cells = [expand_escapes(c.replace("T{", "").replace("T}", ""), strings) for c in ln.split("\t")]
            out.add(" | ".join(c.strip() for c in cells if c.strip()))
            out.brk()
            continue
        if not ln.strip():
            if not nofill:
                out.para()
            else:
                out.brk()
            continue
        if ln[:1] in (" ", "\t") and not nofill:
            out.brk()
        emit(expand_escapes(ln, strings))
    text = out.text()
    return text, " ".join(" ".join(name_line).split())


def man_title(page: str, section: str, name_line: str) -> str:
    """ "ls", "1", "ls - vis mappeindhold" -> "ls(1): vis mappeindhold"."""
    m = re.search(r"\s[-–—]+\s+(.*)$", " " + name_line)
    desc = m.group(1).strip() if m else ""
    return f"{page}({section}): {desc}" if desc else f"{page}({section})"


def man_articles(files: dict[str, bytes], lang: str) -> Iterator[dict]:
    """One article per man page under usr/share/man/LANG/ (symlinks and .so aliases skipped)."""
    prefix = f"usr/share/man/{lang}/"
    for path in sorted(files):
        if not path.startswith(prefix):
            continue
        data = files[path]
        if path.endswith(".gz"):
            data = gzip.decompress(data)
        src = _decode(data)
        body = [ln for ln in src.splitlines() if ln.strip() and not re.match(r"^[.']\s*\\\"", ln)]
        if body and body[0].startswith(".so"):
            continue
        fname = PurePosixPath(path).name.removesuffix(".gz")
        page, _, section = fname.rpartition(".")
        text, name_line = troff_to_text(src)
        if not text.strip():
            continue
        yield {
            "id": f"man-{lang}-{page}.{section}",
            "title": man_title(page, section, name_line),
            "text": text,
        }
