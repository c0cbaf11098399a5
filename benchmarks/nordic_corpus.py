"""Danish / Norwegian Bokmål retrieval corpus from Debian packages.

Builds a JSONL corpus (ralm's `iter_jsonl` format: one `{"id", "title", "text"}` object a line)
from two Debian packages per language:

  da: manpages-da  + debian-edu-doc-da      (Danish)
  nb: manpages-nb  + debian-edu-doc-nb-no   (Norwegian Bokmål)

Articles are one per man page (title "ls(1): vis mappeindhold", text = the page as plain text,
rendered by a small troff stripper here, no groff needed) and one per section (h2/h3/h4) of the
Debian Edu Bookworm manual (title = the heading without its number, text = the section's
paragraphs up to the next heading, separated by blank lines).

The .deb files are fetched with `apt-get download` into a cache directory (skipped when already
there) and read in Python (ar + tar), falling back to `dpkg-deb --fsys-tarfile` for compressions
tarfile cannot open. The question sets benchmarks/data/retrieval_{da,nb}.jsonl are written
against this corpus.

    python benchmarks/nordic_corpus.py da --out /tmp/da.jsonl [--cache DIR]
"""

from __future__ import annotations

import argparse
import gzip
import html
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path, PurePosixPath

PACKAGES = {
    "da": ("manpages-da", "debian-edu-doc-da"),
    "nb": ("manpages-nb", "debian-edu-doc-nb-no"),
}
MANUAL = "debian-edu-bookworm-manual.html"
MIN_WORDS = 5  # manual sections with fewer words of text are skipped


class NordicCorpusError(RuntimeError):
    """A package could not be fetched or read."""


# ---------------------------------------------------------------------------------------------
# Fetching and reading .deb files
# ---------------------------------------------------------------------------------------------


def _cached_deb(pkg: str, cache: Path) -> Path | None:
    debs = sorted(cache.glob(f"{pkg}_*.deb"), key=lambda p: p.stat().st_mtime)
    return debs[-1] if debs else None


def fetch_deb(pkg: str, cache: Path) -> Path:
    """Path of `pkg`'s .deb in `cache`, running `apt-get download pkg` there if none is cached."""
    cache.mkdir(parents=True, exist_ok=True)
    deb = _cached_deb(pkg, cache)
    if deb is not None:
        return deb
    hint = f"place {pkg}_*.deb in {cache} by hand (e.g. from https://packages.debian.org/{pkg})"
    if shutil.which("apt-get") is None:
        raise NordicCorpusError(f"apt-get not found, cannot download {pkg}; {hint}")
    proc = subprocess.run(
        ["apt-get", "download", pkg], cwd=cache, capture_output=True, text=True, check=False
    )
    deb = _cached_deb(pkg, cache)
    if proc.returncode != 0 or deb is None:
        err = (proc.stderr.strip().splitlines() or [f"exit status {proc.returncode}"])[-1]
        raise NordicCorpusError(f"apt-get download {pkg} failed ({err}); {hint}")
    return deb


def _ar_members(data: bytes) -> Iterator[tuple[str, bytes]]:
    if not data.startswith(b"!<arch>\n"):
        raise NordicCorpusError("not an ar archive")
    pos = 8
    while pos + 60 <= len(data):
        header = data[pos : pos + 60]
        name = header[:16].decode("ascii", "replace").strip().rstrip("/")
        size = int(header[48:58].decode("ascii").strip())
        pos += 60
        yield name, data[pos : pos + size]
        pos += size + (size & 1)


def _data_tar(deb: Path) -> tarfile.TarFile:
    """The data.tar of a .deb, opened for reading."""
    try:
        raw = deb.read_bytes()
        for name, payload in _ar_members(raw):
            if name.startswith("data.tar"):
                if name in ("data.tar", "data.tar.gz", "data.tar.xz", "data.tar.bz2"):
                    return tarfile.open(fileobj=io.BytesIO(payload), mode="r:*")
                break  # e.g. data.tar.zst: let dpkg-deb decompress
        else:
            raise NordicCorpusError("no data.tar member")
    except (OSError, ValueError, tarfile.TarError, NordicCorpusError) as exc:
        if shutil.which("dpkg-deb") is None:
            raise NordicCorpusError(f"{deb}: cannot read ({exc})") from exc
    proc = subprocess.run(["dpkg-deb", "--fsys-tarfile", str(deb)], capture_output=True, check=False)
    if proc.returncode != 0:
        raise NordicCorpusError(f"{deb}: dpkg-deb failed: {proc.stderr.decode(errors='replace').strip()}")
    return tarfile.open(fileobj=io.BytesIO(proc.stdout), mode="r:")


def deb_files(deb: Path) -> dict[str, bytes]:
    """Regular files of a .deb: path without the leading "./" -> contents (symlinks left out)."""
    out: dict[str, bytes] = {}
    with _data_tar(deb) as tar:
        for member in tar:
            if member.isfile():
                f = tar.extractfile(member)
                if f is not None:
                    out[str(PurePosixPath(member.name.removeprefix("./")))] = f.read()
    return out


def _decode(data: bytes) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return data.decode("latin-1")


# ---------------------------------------------------------------------------------------------
# troff -> plain text
# ---------------------------------------------------------------------------------------------

# fmt: off
SPECIAL_CHARS = {
    "aq": "'", "dq": '"', "lq": "“", "rq": "”", "oq": "‘", "cq": "’", "Fo": "«", "Fc": "»",
    "fo": "‹", "fc": "›", "Bq": "„", "bq": "‚", "co": "©", "rg": "®", "tm": "™", "em": "—",
    "en": "–", "hy": "-", "mi": "-", "pl": "+", "mu": "×", "di": "÷", "bu": "•", "ti": "~",
    "ha": "^", "ga": "`", "aa": "´", "sh": "#", "rs": "\\", "ba": "|", "or": "|", "sl": "/",
    "de": "°", "ct": "¢", "Eu": "€", "eu": "€", "Po": "£", "Ye": "¥", "ss": "ß", "ae": "æ",
    "AE": "Æ", "o/": "ø", "O/": "Ø", "oA": "Å", "oa": "å", ">=": "≥", "<=": "≤", "!=": "≠",
    "->": "→", "<-": "←", "<>": "↔", "==": "≡", "+-": "±", "12": "½", "14": "¼", "34": "¾",
    "lh": "☜", "rh": "☞", "dg": "†", "sc": "§", "ps": "¶", "at": "@", "lB": "[", "rB": "]",
    "lC": "{", "rC": "}", "la": "⟨", "ra": "⟩", "ul": "_", "ru": "_", "bv": "|", "br": "|",
    "a~": "ã", "n~": "ñ", "o:": "ö", "a:": "ä", "u:": "ü", "e'": "é", "e`": "è", "*W": "Ω",
}
DEFAULT_STRINGS = {
    "lq": "“", "rq": "”", "R": "®", "Tm": "™", "Aq": "'", "--": "-", 'L"': '"', 'R"': '"',
    "C+": "C++", "C`": '"', "C'": '"', "PI": "π",
}
# fmt: on
_FONT_MACROS = {"B", "I", "R", "SM", "SB", "BI", "BR", "IB", "IR", "RB", "RI"}
_PARA_MACROS = {"PP", "LP", "P", "Pp", "Lp", "sp", "HP", "ne", "bp", "Bd", "Ed", "Bl", "El"}
# quoted delimiter escapes whose argument is not text: \h'..' \v'..' \w'..' ...
_DELIM_ESCAPES = set("hvwolLDbXZxSRN")


def _escape_name(s: str, i: int) -> tuple[str, int]:
    """Name after an escape like \\* or \\f or \\( at s[i]: "(xx", "[name]" or one char."""
    if i >= len(s):
        return "", i
    if s[i] == "(":
        return s[i + 1 : i + 3], i + 3
    if s[i] == "[":
        j = s.find("]", i)
        j = len(s) if j < 0 else j
        return s[i + 1 : j], j + 1
    return s[i], i + 1


def _special(name: str) -> str:
    if name in SPECIAL_CHARS:
        return SPECIAL_CHARS[name]
    m = re.fullmatch(r"u([0-9A-Fa-f]{4,6})(?:_.*)?", name)
    if m:
        return chr(int(m.group(1), 16))
    return ""


def expand_escapes(s: str, strings: dict[str, str], depth: int = 0) -> str:
    """Plain text of one troff line: fonts dropped, special chars and strings substituted."""
    out: list[str] = []
    i, n = 0, len(s)
    while i < n:
        c = s[i]
        if c != "\\":
            out.append(c)
            i += 1
            continue
        if i + 1 >= n:  # trailing backslash (line continuation); callers join lines first
            break
        e = s[i + 1]
        i += 2
        if e in '"#':  # comment to end of line
            break
        if e == "f" or e == "F" or e == "m" or e == "M" or e == "k" or e == "g" or e == "Y":
            _, i = _escape_name(s, i)
        elif e == "*":
            name, i = _escape_name(s, i)
            if depth < 8:
                out.append(expand_escapes(strings.get(name, ""), strings, depth + 1))
        elif e == "(" or e == "[":
            name, i = _escape_name(s, i - 1)
            out.append(_special(name))
        elif e == "C" and i < n and s[i] == "'":
            j = s.find("'", i + 1)
            j = n if j < 0 else j
            out.append(_special(s[i + 1 : j]))
            i = j + 1
        elif e == "n":
            if i < n and s[i] in "+-":
                i += 1
            _, i = _escape_name(s, i)
        elif e == "s":
            if i < n and s[i] in "+-":
                i += 1
            if i < n and s[i] in "([":
                _, i = _escape_name(s, i)
            elif i < n and s[i] == "'":
                j = s.find("'", i + 1)
                i = n if j < 0 else j + 1
            else:
                while i < n and s[i].isdigit():
                    i += 1
        elif e in _DELIM_ESCAPES and i < n and s[i] in "'\"|":
            j = s.find(s[i], i + 1)
            i = n if j < 0 else j + 1
        elif e == "$":
            _, i = _escape_name(s, i)
        elif e == "-":
            out.append("-")
        elif e == "e" or e == "\\":
            out.append("\\")
        elif e in " ~0":
            out.append(" ")
        elif e == "t":
            out.append("\t")
        elif e in "&/,|^%:c){}!?dupraz":
            pass  # zero-width and motion escapes
        else:
            out.append(e)  # unknown escape: the character itself (\. \' \` \« ...)
    return "".join(out)


def split_args(s: str) -> list[str]:
    """troff request arguments: blank-separated, "double quoted" with "" for a literal quote."""
    args: list[str] = []
    i, n = 0, len(s)
    while i < n:
        while i < n and s[i] in " \t":
            i += 1
        if i >= n:
            break
        if s[i] == '"':
            i += 1
            buf = []
            while i < n:
                if s[i] == '"':
                    if i + 1 < n and s[i + 1] == '"':
                        buf.append('"')
                        i += 2
                        continue
                    i += 1
                    break
                if s[i] == "\\" and i + 1 < n:
                    buf.append(s[i : i + 2])
                    i += 2
                    continue
                buf.append(s[i])
                i += 1
            args.append("".join(buf))
        else:
            j = i
            while j < n and s[j] not in " \t":
                j += 2 if s[j] == "\\" else 1
            args.append(s[i:j])
            i = j
    return args


# fmt: off
_MDOC_CALLABLE = {
    "Ad", "An", "Ar", "Cd", "Cm", "Dv", "Er", "Ev", "Fa", "Fl", "Fn", "Ic", "Li", "Nm", "Op", "Pa",
    "Va", "Vt", "Xr", "Dq", "Do", "Dc", "Sq", "So", "Sc", "Pq", "Po", "Pc", "Qq", "Ql", "Oo", "Oc",
    "Ns", "No", "Em", "Sy", "Tn", "Ms", "Mt", "Lk", "Bx", "Ux", "At", "Xo", "Xc", "Aq", "Ao", "Ac",
    "Bq", "Bo", "Bc", "Brq", "Bro", "Brc", "Ek", "Eo", "Ec", "Pf", "Ft", "Sx", "St",
}
_MDOC_PUNCT = {".", ",", ":", ";", ")", "]", "?", "!"}
_MDOC_ENCLOSE = {"Op": ("[", "]"), "Dq": ("“", "”"), "Sq": ("‘", "’"), "Pq": ("(", ")"),
                 "Qq": ('"', '"'), "Aq": ("<", ">"), "Bq": ("[", "]"), "Brq": ("{", "}")}
_MDOC_OPEN = {"Oo": "[", "Do": "“", "So": "‘", "Po": "(", "Ao": "<", "Bo": "[", "Bro": "{"}
_MDOC_CLOSE = {"Oc": "]", "Dc": "”", "Sc": "’", "Pc": ")", "Ac": ">", "Bc": "]", "Brc": "}"}
# fmt: on


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


# ---------------------------------------------------------------------------------------------
# HTML manual -> sections
# ---------------------------------------------------------------------------------------------

_BLOCK = {
    "p",
    "div",
    "li",
    "dt",
    "dd",
    "pre",
    "tr",
    "table",
    "ul",
    "ol",
    "dl",
    "h1",
    "h5",
    "h6",
    "blockquote",
    "hr",
    "br",
}
_SKIP_CLASSES = {"toc", "navheader", "navfooter", "list-of-tables", "list-of-figures"}
_SECTION_NO = re.compile(r"^\s*(\d+(?:\.\d+)*)\.?\s+")


class _ManualParser(HTMLParser):
    """Splits a DocBook HTML manual into (level, heading, [paragraphs]) at h2/h3/h4 titles."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=False)
        self.sections: list[tuple[int, str, list[str]]] = []
        self.skip_tag: str | None = None
        self.skip_depth = 0
        self.heading: list[str] | None = None
        self.heading_tag = ""
        self.level = 0
        self.title = ""
        self.paras: list[str] = []
        self.block: list[str] = []
        self.pre = 0
        self.in_cell = 0  # inside <td>/<th>: blocks do not break the row's line
        self.cells = 0  # cells seen in the current <tr>

    # text of the current block
    def _flush(self) -> None:
        raw = html.unescape("".join(self.block))
        self.block = []
        if self.pre:
            lines = [ln.rstrip() for ln in raw.split("\n")]
            while lines and not lines[0].strip():
                lines.pop(0)
            while lines and not lines[-1].strip():
                lines.pop()
            text = "\n".join(lines)
        else:
            text = " ".join(raw.split())
        if text.strip():
            self.paras.append(text)

    def _end_section(self) -> None:
        self._flush()
        if self.level:
            self.sections.append((self.level, self.title, self.paras))
        self.paras = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if self.skip_tag is not None:
            if tag == self.skip_tag:
                self.skip_depth += 1
            return
        a = dict(attrs)
        classes = set((a.get("class") or "").split())
        if tag in ("head", "style", "script") or classes & _SKIP_CLASSES:
            self.skip_tag, self.skip_depth = tag, 1
            return
        if tag in ("h2", "h3", "h4") and "title" in classes:
            self._end_section()
            self.heading, self.heading_tag = [], tag
            return
        if self.heading is not None:
            return
        if tag in ("td", "th"):
            self.cells += 1
            self.block.append(" | " if self.cells > 1 else " ")
            self.in_cell += 1
            return
        if tag == "tr":
            self._flush()
            self.cells = 0
            return
        self._block_edge(tag)
        if tag == "pre":
            self.pre += 1

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if self.skip_tag is None and self.heading is None:
            self._block_edge(tag)

    def _block_edge(self, tag: str) -> None:
        """A block element starts or ends: a paragraph break, or a space inside a table cell."""
        if tag in _BLOCK:
            if self.in_cell:
                self.block.append(" ")
            else:
                self._flush()

    def handle_endtag(self, tag: str) -> None:
        if self.skip_tag is not None:
            if tag == self.skip_tag:
                self.skip_depth -= 1
                if self.skip_depth == 0:
                    self.skip_tag = None
            return
        if self.heading is not None:
            if tag == self.heading_tag:
                self.title = " ".join(html.unescape("".join(self.heading)).split())
                self.level = int(tag[1])
                self.heading = None
            return
        if tag in ("td", "th"):
            self.in_cell = max(0, self.in_cell - 1)
            self.block.append(" ")
            return
        if tag == "tr":
            self._flush()
            return
        self._block_edge(tag)
        if tag == "pre":
            self.pre = max(0, self.pre - 1)

    def handle_data(self, data: str) -> None:
        if self.skip_tag is not None:
            return
        (self.heading if self.heading is not None else self.block).append(data)

    def handle_entityref(self, name: str) -> None:
        self.handle_data(f"&{name};")

    def handle_charref(self, name: str) -> None:
        self.handle_data(f"&#{name};")

    def close(self) -> None:
        super().close()
        self._end_section()


def manual_articles(html_text: str, lang: str, min_words: int = MIN_WORDS) -> Iterator[dict]:
    """One article per numbered h2/h3/h4 section of the manual with at least `min_words` words."""
    parser = _ManualParser()
    parser.feed(html_text)
    parser.close()
    seen: dict[str, int] = {}
    for _level, heading, paras in parser.sections:
        m = _SECTION_NO.match(heading)
        if not m:
            continue  # the document title page
        number = m.group(1)
        title = heading[m.end() :].strip()
        text = "\n\n".join(paras)
        if len(text.split()) < min_words:
            continue
        seen[title] = seen.get(title, 0) + 1
        if seen[title] > 1:
            title = f"{title} ({number})"
        yield {"id": f"edu-{lang}-{number}", "title": title, "text": text}


# ---------------------------------------------------------------------------------------------


def iter_articles(lang: str, cache: Path) -> Iterator[dict]:
    """All articles of the `lang` corpus: man pages first, then manual sections."""
    if lang not in PACKAGES:
        raise NordicCorpusError(f"unknown language {lang!r}; expected one of {sorted(PACKAGES)}")
    man_pkg, doc_pkg = PACKAGES[lang]
    man_deb, doc_deb = fetch_deb(man_pkg, cache), fetch_deb(doc_pkg, cache)
    yield from man_articles(deb_files(man_deb), lang)
    doc_files = deb_files(doc_deb)
    path = f"usr/share/doc/{doc_pkg}/{MANUAL}"
    if path not in doc_files:
        raise NordicCorpusError(f"{doc_deb}: has no {path}")
    yield from manual_articles(_decode(doc_files[path]), lang)


def build_jsonl(lang: str, out: Path, cache: Path) -> Path:
    """Write the `lang` ("da" or "nb") corpus to `out` as JSONL and return `out`."""
    out, cache = Path(out), Path(cache)
    articles = list(iter_articles(lang, cache))
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        for a in articles:
            f.write(json.dumps(a, ensure_ascii=False) + "\n")
    os.replace(tmp, out)
    return out


def default_cache() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "ralm" / "nordic-debs"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("lang", choices=sorted(PACKAGES))
    ap.add_argument("--out", type=Path, help="JSONL to write (default: CACHE/nordic_LANG.jsonl)")
    ap.add_argument(
        "--cache", type=Path, default=default_cache(), help="where the .deb files go (default: %(default)s)"
    )
    args = ap.parse_args(argv)
    out = args.out or args.cache / f"nordic_{args.lang}.jsonl"
    try:
        build_jsonl(args.lang, out, args.cache)
    except NordicCorpusError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    n_art = n_words = n_man = 0
    with open(out, encoding="utf-8") as f:
        for line in f:
            a = json.loads(line)
            n_art += 1
            n_man += a["id"].startswith("man-")
            n_words += len(a["text"].split())
    print(f"{out}: {n_art} articles ({n_man} man pages, {n_art - n_man} manual sections), {n_words} words")
    return 0


if __name__ == "__main__":
    sys.exit(main())
