"""troff escapes and macro arguments for nordic_corpus.py's man-page renderer: special characters,
strings, font and spacing escapes (expand_escapes), quoted arguments (split_args)."""

from __future__ import annotations

import re

# ---------------------------------------------------------------------------------------------
# troff -> plain text
# ---------------------------------------------------------------------------------------------

SPECIAL_CHARS = {
    "aq": "'",
    "dq": '"',
    "lq": "“",
    "rq": "”",
    "oq": "‘",
    "cq": "’",
    "Fo": "«",
    "Fc": "»",
    "fo": "‹",
    "fc": "›",
    "Bq": "„",
    "bq": "‚",
    "co": "©",
    "rg": "®",
    "tm": "™",
    "em": "—",
    "en": "–",
    "hy": "-",
    "mi": "-",
    "pl": "+",
    "mu": "×",
    "di": "÷",
    "bu": "•",
    "ti": "~",
    "ha": "^",
    "ga": "`",
    "aa": "´",
    "sh": "#",
    "rs": "\\",
    "ba": "|",
    "or": "|",
    "sl": "/",
    "de": "°",
    "ct": "¢",
    "Eu": "€",
    "eu": "€",
    "Po": "£",
    "Ye": "¥",
    "ss": "ß",
    "ae": "æ",
    "AE": "Æ",
    "o/": "ø",
    "O/": "Ø",
    "oA": "Å",
    "oa": "å",
    ">=": "≥",
    "<=": "≤",
    "!=": "≠",
    "->": "→",
    "<-": "←",
    "<>": "↔",
    "==": "≡",
    "+-": "±",
    "12": "½",
    "14": "¼",
    "34": "¾",
    "lh": "☜",
    "rh": "☞",
    "dg": "†",
    "sc": "§",
    "ps": "¶",
    "at": "@",
    "lB": "[",
    "rB": "]",
    "lC": "{",
    "rC": "}",
    "la": "⟨",
    "ra": "⟩",
    "ul": "_",
    "ru": "_",
    "bv": "|",
    "br": "|",
    "a~": "ã",
    "n~": "ñ",
    "o:": "ö",
    "a:": "ä",
    "u:": "ü",
    "e'": "é",
    "e`": "è",
    "*W": "Ω",
}
DEFAULT_STRINGS = {
    "lq": "“",
    "rq": "”",
    "R": "®",
    "Tm": "™",
    "Aq": "'",
    "--": "-",
    'L"': '"',
    'R"': '"',
    "C+": "C++",
    "C`": '"',
    "C'": '"',
    "PI": "π",
}
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
