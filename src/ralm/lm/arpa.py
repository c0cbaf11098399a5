"""Reading and writing ARPA back-off language model files.

Writing: one line per n-gram, `log10 p <TAB> w1 ... wk [<TAB> log10 backoff]`, the backoff
column on every order but the highest (0 where the n-gram is not a context), numbers in
Python's shortest round-trip notation so that reading the file back gives the very same
float64 values. Optional `# key=value` comment lines before `\\data\\` carry ralm's metadata
(order, estimator, tokenizer); KenLM skips such lines.

Reading: strict. Any malformed line raises RalmError naming the file and line number. A
missing `<unk>` unigram is added with log10 prob -100 (KenLM does the same); `<s>` and
`</s>` are required. Every n-gram's context (its first k-1 words) must itself be listed,
which holds for lmplz and unpruned SRILM output; files that break this (pruned SRILM
models) are refused rather than patched.

Left out: the binary KenLM format, gzip/xz input, quantisation.
"""

from __future__ import annotations

import gc
import os
from dataclasses import dataclass, field
from itertools import chain, repeat

import numpy as np

from ralm.errors import RalmError
from ralm.lm.counts import BOS, BOS_ID, EOS, SPECIALS, UNK, UNK_ID, Vocab

META_PREFIX = "# ralm "
MISSING_UNK_LOG10 = -100.0


@dataclass
class ArpaModel:
    """Tables read from an ARPA file, in ralm's layout (see `ralm.lm.counts`)."""

    vocab: Vocab
    keys: list[np.ndarray]
    log10_prob: list[np.ndarray]
    log10_bow: list[np.ndarray]
    meta: dict[str, str] = field(default_factory=dict)


def _fmt_all(values: np.ndarray) -> list[str]:
    """Shortest round-trip decimal strings; 0 and -99 written as integers (lmplz / SRILM look)."""
    out = list(map(repr, values.tolist()))
    for j in np.flatnonzero((values == 0.0) | (values == -99.0)).tolist():
        out[j] = "0" if values[j] == 0.0 else "-99"
    return out


def write_arpa(
    path: str | os.PathLike,
    vocab: Vocab,
    keys: list[np.ndarray],
    log10_prob: list[np.ndarray],
    log10_bow: list[np.ndarray],
    meta: dict[str, str] | None = None,
) -> None:
    """Write tables (keys/probs/bows per order, ralm layout) as an ARPA file."""
    V = len(vocab)
    order = len(keys)
    tokens = vocab.id_to_token
    try:
        with open(path, "w", encoding="utf-8", newline="\n") as f:
            for key, value in (meta or {}).items():
                f.write(f"{META_PREFIX}{key}={value}\n")
            f.write("\n\\data\\\n")
            for k in range(1, order + 1):
                f.write(f"ngram {k}={len(keys[k - 1])}\n")
            texts: list[str] = []
            for k in range(1, order + 1):
                if k == 1:
                    texts = list(tokens)
                else:
                    prefix = (keys[k - 1] // V).tolist()
                    last = (keys[k - 1] % V).tolist()
                    texts = [f"{texts[p]} {tokens[w]}" for p, w in zip(prefix, last, strict=True)]
                probs = _fmt_all(np.minimum(log10_prob[k - 1], 0.0))
                f.write(f"\n\\{k}-grams:\n")
                if k < order:
                    bows = _fmt_all(log10_bow[k - 1])
                    lines = [f"{p}\t{t}\t{b}\n" for p, t, b in zip(probs, texts, bows, strict=True)]
                else:
                    lines = [f"{p}\t{t}\n" for p, t in zip(probs, texts, strict=True)]
                f.writelines(lines)
            f.write("\n\\end\\\n")
    except OSError as exc:
        raise RalmError(f"cannot write ARPA file {os.fspath(path)}: {exc.strerror}") from None


def _parse_float(text: str, where: str) -> float:
    try:
        x = float(text)
    except ValueError:
        raise RalmError(f"{where}: expected a number, got {text!r}") from None
    if x != x:  # NaN
        raise RalmError(f"{where}: NaN is not a log probability")
    return x


def read_arpa(path: str | os.PathLike) -> ArpaModel:
    """Parse an ARPA file into ralm tables. Raises RalmError with `path:line` on any defect."""
    # Millions of short-lived token lists: the cyclic GC would rescan them over and over
    # (8x slower); none of them can form a cycle.
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        return _read_arpa(path)
    finally:
        if was_enabled:
            gc.enable()


def _read_arpa(path: str | os.PathLike) -> ArpaModel:
    name = os.fspath(path)
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().split("\n")
    except FileNotFoundError:
        raise RalmError(f"ARPA file not found: {name}") from None
    except UnicodeDecodeError as exc:
        raise RalmError(f"{name}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except OSError as exc:
        raise RalmError(f"cannot read ARPA file {name}: {exc.strerror}") from None

    n_lines = len(lines)
    i = 0
    meta: dict[str, str] = {}

    def where(j: int) -> str:
        return f"{name}:{j + 1}"

    # Preamble: blank lines and comments until \data\.
    while i < n_lines and lines[i].strip() != "\\data\\":
        s = lines[i].strip()
        if s and not s.startswith("#"):
            raise RalmError(f"{where(i)}: expected \\data\\ (or a # comment), got {s[:60]!r}")
        if s.startswith(META_PREFIX.strip()) and "=" in s:
            key, _, value = s[len(META_PREFIX) :].partition("=")
            meta[key.strip()] = value.strip()
        i += 1
    if i == n_lines:
        raise RalmError(f"{name}: no \\data\\ header, not an ARPA file")
    i += 1
    sizes: list[int] = []
    while i < n_lines and lines[i].strip().startswith("ngram "):
        s = lines[i].strip()
        lhs, eq, rhs = s[len("ngram ") :].partition("=")
        try:
            k, n = int(lhs), int(rhs)
        except ValueError:
            k, n = -1, -1
        if not eq or n < 0 or k != len(sizes) + 1:
            raise RalmError(f"{where(i)}: expected 'ngram {len(sizes) + 1}=COUNT', got {s[:60]!r}")
        sizes.append(n)
        i += 1
    if not sizes:
        raise RalmError(f"{where(i)}: expected 'ngram 1=COUNT' after \\data\\")
    order = len(sizes)

    token_to_id: dict[str, int] = {}
    vocab = Vocab()
    keys: list[np.ndarray] = []
    probs: list[np.ndarray] = []
    bows: list[np.ndarray] = []
    for k in range(1, order + 1):
        while i < n_lines and not lines[i].strip():
            i += 1
        header = f"\\{k}-grams:"
        if i == n_lines or lines[i].strip() != header:
            got = lines[i].strip()[:60] if i < n_lines else "end of file"
            raise RalmError(f"{where(min(i, n_lines - 1))}: expected {header}, got {got!r}")
        i += 1
        n = sizes[k - 1]
        if i + n > n_lines:
            raise RalmError(f"{name}: file ends inside the {k}-grams (expected {n} lines)")
        rows = [ln.split() for ln in lines[i : i + n]]
        fast = _parse_section_fast(rows, k, k < order, token_to_id)
        if fast is not None:
            p, b, words = fast
        else:  # slow path, line by line: mixed layouts, or find the line of an error
            p, b, words = _parse_section_slow(rows, k, order, token_to_id, i, where, lines)
        if k == 1:
            for special in (BOS, "</s>"):
                if special not in token_to_id:
                    raise RalmError(f"{name}: the unigrams lack {special}")
            # Renumber: <unk>, <s>, </s> first (ralm's ids), the rest in file order.
            file_tokens = list(token_to_id)
            vocab = Vocab(t for t in file_tokens if t not in SPECIALS)
            V = len(vocab)
            perm = np.array([vocab.token_to_id[t] for t in file_tokens], dtype=np.int64)
            lp = np.full(V, MISSING_UNK_LOG10)
            lb = np.zeros(V)
            lp[perm] = p
            lb[perm] = b
            if UNK not in token_to_id:
                lp[UNK_ID] = MISSING_UNK_LOG10
            id_of_file_index = perm
            keys.append(np.arange(V, dtype=np.int64))
            probs.append(lp)
            bows.append(lb)
        else:
            w = id_of_file_index[words]
            row = w[:, 0].copy()
            for j in range(2, k):
                row = _find_rows(keys[j - 1], row * V + w[:, j - 1])
                bad = np.flatnonzero(row < 0)
                if len(bad):
                    li = i + int(bad[0])
                    ctx = " ".join(lines[li].split()[1:k])
                    raise RalmError(
                        f"{where(li)}: the context {ctx!r} of this {k}-gram is not listed among the "
                        f"{k - 1}-grams (pruned model?); ralm needs every n-gram's context listed"
                    )
            key = row * V + w[:, k - 1]
            srt = np.argsort(key, kind="stable")
            key = key[srt]
            dup = np.flatnonzero(key[1:] == key[:-1])
            if len(dup):
                li = i + int(srt[dup[0] + 1])
                raise RalmError(f"{where(li)}: {k}-gram listed twice")
            keys.append(key)
            probs.append(p[srt])
            bows.append(b[srt])
        i += n
    while i < n_lines and not lines[i].strip():
        i += 1
    if i == n_lines or lines[i].strip() != "\\end\\":
        got = lines[i].strip()[:60] if i < n_lines else "end of file"
        raise RalmError(
            f"{where(min(i, n_lines - 1))}: expected \\end\\ after the {order}-grams, got {got!r} "
            "(more entries than the header's count?)"
        )
    assert vocab.id_to_token[BOS_ID] == BOS and vocab.id_to_token[2] == EOS
    return ArpaModel(vocab=vocab, keys=keys, log10_prob=probs, log10_bow=bows, meta=meta)


def _parse_section_fast(
    rows: list[list[str]], k: int, bow_allowed: bool, token_to_id: dict[str, int]
) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """Vectorised parse of one order's entries when every line has the same layout.

    Returns (log10 probs (n,), backoffs (n,), word ids (n, k)), filling `token_to_id` for
    unigrams; None when the layout is mixed or anything is wrong (the slow path then finds
    and reports the offending line).
    """
    n = len(rows)
    if n == 0:
        return np.empty(0), np.zeros(0), np.empty((0, k), dtype=np.int64)
    width = len(rows[0])
    if width not in (k + 1, k + 2) or (width == k + 2 and not bow_allowed):
        return None
    if len(set(map(len, rows))) != 1:
        return None
    flat = list(chain.from_iterable(rows))
    try:
        p = np.array(flat[0::width], dtype=np.float64)
        b = np.array(flat[width - 1 :: width], dtype=np.float64) if width == k + 2 else np.zeros(n)
    except ValueError:
        return None
    if np.isnan(p).any() or np.isnan(b).any():
        return None
    words = np.empty((n, k), dtype=np.int64)
    if k == 1:
        tokens = flat[1::width]
        if token_to_id or len(set(tokens)) != n:
            return None
        token_to_id.update(zip(tokens, range(n), strict=True))
        words[:, 0] = np.arange(n)
        return p, b, words
    get = token_to_id.get
    for c in range(k):
        col = np.fromiter(map(get, flat[1 + c :: width], repeat(-1)), dtype=np.int64, count=n)
        if (col < 0).any():
            return None
        words[:, c] = col
    return p, b, words


def _parse_section_slow(rows, k, order, token_to_id, i, where, lines):
    """Line-by-line parse of one order's entries; raises RalmError naming the bad line."""
    n = len(rows)
    p = np.empty(n)
    b = np.zeros(n)
    words = np.empty((n, k), dtype=np.int64)
    for j, parts in enumerate(rows):
        li = i + j
        if len(parts) == k + 2 and k < order:
            b[j] = _parse_float(parts[-1], where(li))
        elif len(parts) != k + 1:
            if len(parts) == k + 2:
                raise RalmError(f"{where(li)}: backoff weight on a highest-order ({k}-gram) entry")
            raise RalmError(
                f"{where(li)}: expected 'log10prob' then {k} word(s) [then backoff], "
                f"got {lines[li].strip()[:60]!r} (wrong n-gram count in the header?)"
            )
        p[j] = _parse_float(parts[0], where(li))
        if k == 1:
            tok = parts[1]
            if tok in token_to_id:
                raise RalmError(f"{where(li)}: unigram {tok!r} listed twice")
            token_to_id[tok] = j
            words[j, 0] = j
        else:
            try:
                words[j] = [token_to_id[t] for t in parts[1 : k + 1]]
            except KeyError as exc:
                raise RalmError(f"{where(li)}: word {exc.args[0]!r} is not among the unigrams") from None
    return p, b, words


def _find_rows(table: np.ndarray, query: np.ndarray) -> np.ndarray:
    """Row of each query key in the sorted `table`, or -1 where absent."""
    if len(table) == 0:
        return np.full(len(query), -1, dtype=np.int64)
    if len(query) > 512:  # sorted queries let searchsorted reuse its last position: ~5x faster
        order = np.argsort(query)
        pos = np.empty(len(query), dtype=np.int64)
        pos[order] = np.searchsorted(table, query[order])
    else:
        pos = np.searchsorted(table, query)
    pos_c = np.minimum(pos, len(table) - 1)
    return np.where(table[pos_c] == query, pos_c, -1).astype(np.int64)
