"""The ARPA reader: the file's structure, the line-by-line parser and every message about a bad line.

`_Reader` walks the file (comments and `# ralm key=value` metadata, the \\data\\ header, the
sections, \\end\\). Each section goes through the bulk path (`ralm.lm.arpa_bulk`) a block at
a time; a block that does not fit it is re-read line by line (`_Reader._slow_section`), which
finds and names the offending line. The rules it enforces are in `ralm.lm.arpa`'s docstring;
every RalmError names the file and line.

Left out: opening the file and the `ArpaModel` it becomes (`ralm.lm.arpa.read_arpa`), the
vectorised parsing (`ralm.lm.arpa_bulk`), writing (`ralm.lm.arpa_write`).
"""

from __future__ import annotations

import re

import numpy as np

from ralm.errors import RalmError
from ralm.lm.arpa_bulk import _bulk_section, _find_rows, _u64_view, _WordTable
from ralm.lm.counts import BOS, BOS_ID, EOS, Vocab

META_PREFIX = "# ralm "
MISSING_UNK_LOG10 = -100.0
READ_CHUNK = 1 << 16  # lines parsed per bulk step
_ARPA_SPACE = np.zeros(256, dtype=bool)
_ARPA_SPACE[[9, 10, 32]] = True  # tab, newline, space: KenLM's kARPASpaces
_FIELD_SPLIT = re.compile(r"[ \t]+")


def _fields(line: str) -> list[str]:
    """Fields of one ARPA line: split on spaces and tabs only; a trailing \\r is dropped."""
    return [x for x in _FIELD_SPLIT.split(line.rstrip("\r")) if x]


class _Reader:
    def __init__(self, name: str, buf: np.ndarray, size: int) -> None:
        self.name = name
        self.buf = buf
        self.U = _u64_view(buf)
        # line j is buf[start[j]:end[j]]; newlines found block by block (no file-sized temporaries)
        block = 1 << 23
        is_nl = np.empty(block, dtype=bool)
        ends = []
        for b in range(0, size, block):
            m = min(block, size - b)
            np.equal(buf[b : b + m], 10, out=is_nl[:m])
            ends.append(np.flatnonzero(is_nl[:m]) + b)
        self.end = np.concatenate(ends) if ends else np.zeros(0, dtype=np.int64)
        self.start = np.empty_like(self.end)
        if len(self.end):
            self.start[0] = 0
            self.start[1:] = self.end[:-1] + 1
        self.n_lines = len(self.end)
        self.tokens: list[bytes] = []  # unigram words in file order
        self.strings: list[str] = []  # the same, decoded
        self.table: _WordTable | None = None
        self._dict: dict[bytes, int] | None = None

    # ------------------------------------------------------------------ helpers
    def where(self, j: int) -> str:
        return f"{self.name}:{j + 1}"

    def raw(self, j: int) -> bytes:
        return self.buf[int(self.start[j]) : int(self.end[j])].tobytes()

    def line(self, j: int) -> str:
        """Line j decoded (RalmError naming the line and byte for invalid UTF-8)."""
        raw = self.raw(j)
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise RalmError(
                f"{self.where(j)}: not UTF-8 text (byte 0x{raw[exc.start]:02x} at byte offset "
                f"{int(self.start[j]) + exc.start} of the file); ARPA files are UTF-8"
            ) from None

    def blank(self, j: int) -> bool:
        return not self.raw(j).strip()

    def got(self, j: int) -> str:
        return repr(self.line(j).strip()[:60]) if j < self.n_lines else "end of file"

    def word_index(self) -> dict[bytes, int]:
        if self._dict is None:
            self._dict = {t: j for j, t in enumerate(self.tokens)}
        return self._dict

    # ------------------------------------------------------------------ the file
    def read(self) -> tuple[Vocab, list[np.ndarray], list[np.ndarray], list[np.ndarray], dict[str, str]]:
        """(vocab, keys, log10 probs, log10 backoffs, meta) of the file (`ralm.lm.arpa.ArpaModel`'s
        fields)."""
        name, n_lines = self.name, self.n_lines
        i = 0
        meta: dict[str, str] = {}
        # Preamble: blank lines and comments until \data\.
        while i < n_lines and self.raw(i).strip() != b"\\data\\":
            s = self.line(i).strip()
            if s and not s.startswith("#"):
                raise RalmError(f"{self.where(i)}: expected \\data\\ (or a # comment), got {s[:60]!r}")
            if s.startswith(META_PREFIX.strip()) and "=" in s:
                key, _, value = s[len(META_PREFIX) :].partition("=")
                meta[key.strip()] = value.strip()
            i += 1
        if i == n_lines:
            raise RalmError(f"{name}: no \\data\\ header, not an ARPA file")
        i += 1
        sizes: list[int] = []
        while i < n_lines and self.raw(i).strip().startswith(b"ngram "):
            s = self.line(i).strip()
            lhs, eq, rhs = s[len("ngram ") :].partition("=")
            try:
                k, n = int(lhs), int(rhs)
            except ValueError:
                k, n = -1, -1
            if not eq or n < 0 or k != len(sizes) + 1:
                raise RalmError(f"{self.where(i)}: expected 'ngram {len(sizes) + 1}=COUNT', got {s[:60]!r}")
            sizes.append(n)
            i += 1
        if not sizes:
            raise RalmError(f"{self.where(min(i, n_lines - 1))}: expected 'ngram 1=COUNT' after \\data\\")
        order = len(sizes)

        vocab = Vocab()
        keys: list[np.ndarray] = []
        probs: list[np.ndarray] = []
        bows: list[np.ndarray] = []
        id_of_file_index = np.empty(0, dtype=np.int64)
        V = 0
        for k in range(1, order + 1):
            while i < n_lines and self.blank(i):
                i += 1
            header = f"\\{k}-grams:"
            if i == n_lines or self.raw(i).strip() != header.encode():
                self._bad_header(i, header, k, sizes)
            i += 1
            n = sizes[k - 1]
            self._check_extent(i, n, k)
            if k == 1:
                p, b = self._unigrams(i, n, order)
                self._check_values(i, p, b)
                file_tokens = self.strings
                for special in (BOS, EOS):
                    if special not in file_tokens:
                        raise RalmError(f"{name}: the unigrams lack {special}")
                # Renumber: <unk>, <s>, </s> first (ralm's ids), the rest in file order.
                vocab = Vocab(file_tokens)
                V = len(vocab)
                id_of_file_index = np.fromiter(
                    map(vocab.token_to_id.__getitem__, file_tokens), dtype=np.int64, count=len(file_tokens)
                )
                lp = np.full(V, MISSING_UNK_LOG10)
                lb = np.zeros(V)
                lp[id_of_file_index] = p
                lb[id_of_file_index] = b
                keys.append(np.arange(V, dtype=np.int64))
                probs.append(lp)
                bows.append(lb)
            else:
                p, b, words = self._section(i, n, k, order)
                self._check_values(i, p, b)
                key, srt = self._keys(i, k, id_of_file_index[words], keys, V)
                del words
                keys.append(key)
                probs.append(p if srt is None else p[srt])
                bows.append(b if srt is None else b[srt])
            i += n
        while i < n_lines and self.blank(i):
            i += 1
        if i == n_lines:
            raise RalmError(
                f"{self.where(n_lines - 1)}: the file ends without \\end\\ after the {order}-grams; "
                "the file is truncated: copy or write it again"
            )
        if self.raw(i).strip() != b"\\end\\":
            if self._looks_like_entry(i):
                raise RalmError(
                    f"{self.where(i)}: more {order}-grams than the header's 'ngram {order}={sizes[-1]}'; "
                    "fix the count in the \\data\\ header"
                )
            raise RalmError(f"{self.where(i)}: expected \\end\\ after the {order}-grams, got {self.got(i)}")
        for j in range(i + 1, n_lines):
            if not self.blank(j):
                raise RalmError(f"{self.where(j)}: text after \\end\\ ({self.got(j)}); remove it")
        assert vocab.id_to_token[BOS_ID] == BOS and vocab.id_to_token[2] == EOS
        return vocab, keys, probs, bows, meta

    # ------------------------------------------------------------------ structure errors
    def _looks_like_entry(self, j: int) -> bool:
        parts = _fields(self.line(j))
        if len(parts) < 2:
            return False
        try:
            float(parts[0])
        except ValueError:
            return False
        return True

    def _bad_header(self, i: int, header: str, k: int, sizes: list[int]) -> None:
        if i == self.n_lines:
            raise RalmError(
                f"{self.where(self.n_lines - 1)}: the file ends before {header}; the file is truncated: "
                "copy or write it again"
            )
        if k > 1 and self._looks_like_entry(i):
            raise RalmError(
                f"{self.where(i)}: more {k - 1}-grams than the header's 'ngram {k - 1}={sizes[k - 2]}'; "
                "fix the count in the \\data\\ header"
            )
        raise RalmError(f"{self.where(i)}: expected {header}, got {self.got(i)}")

    def _check_extent(self, i: int, n: int, k: int) -> None:
        """The n entry lines from line i exist and hold no blank line or section header."""
        stop = min(i + n, self.n_lines)
        starts, ends = self.start[i:stop], self.end[i:stop]
        # an empty line, or one starting with a backslash or a blank: look closer
        first = self.buf[starts]
        for r in np.flatnonzero((ends - starts <= 1) | (first == 92) | _ARPA_SPACE[first]).tolist():
            j = i + r
            if self.blank(j) or self.raw(j).startswith(b"\\"):
                raise RalmError(
                    f"{self.where(j)}: the {k}-grams end after {r} entries but the header says "
                    f"'ngram {k}={n}'; fix the count in the \\data\\ header"
                )
        if i + n > self.n_lines:
            found = self.n_lines - i
            raise RalmError(
                f"{self.where(self.n_lines - 1)}: the file ends inside the {k}-grams ({found} of the "
                f"{n} entries of 'ngram {k}={n}'); the file is truncated: copy or write it again"
            )

    def _check_values(self, i: int, p: np.ndarray, b: np.ndarray) -> None:
        bad_p = np.flatnonzero(~np.isfinite(p) | (p > 0.0))
        bad_b = np.flatnonzero(~np.isfinite(b))
        if not len(bad_p) and not len(bad_b):
            return
        first = min(bad_p[0] if len(bad_p) else len(p), bad_b[0] if len(bad_b) else len(b))
        j = i + int(first)
        parts = _fields(self.line(j))
        if len(bad_p) and bad_p[0] == first:
            text = parts[0]
            if np.isfinite(p[first]):
                raise RalmError(
                    f"{self.where(j)}: log10 probability {text!r} is above 0 (a probability above 1); "
                    "ARPA probabilities are log10 values <= 0"
                )
            raise RalmError(
                f"{self.where(j)}: log10 probability {text!r} is not a finite number; "
                "ARPA probabilities are log10 values <= 0 (-99 for an impossible n-gram)"
            )
        raise RalmError(
            f"{self.where(j)}: backoff weight {parts[-1]!r} is not a finite number; "
            "ARPA backoff weights are finite log10 values"
        )

    # ------------------------------------------------------------------ sections
    def _unigrams(self, i: int, n: int, order: int) -> tuple[np.ndarray, np.ndarray]:
        """log10 probs and backoffs of the unigrams; fills self.tokens, self.strings, self.table."""
        got = _bulk_section(self, i, n, 1, order > 1)
        if got is not None:
            p, b, (s, e) = got
            lo = int(s[0, 0]) if n else 0
            region = self.buf[lo : int(e[-1, 0]) if n else lo].tobytes()
            tokens = [
                region[x - lo : y - lo] for x, y in zip(s.ravel().tolist(), e.ravel().tolist(), strict=True)
            ]
            try:
                strings = [t.decode("utf-8") for t in tokens]
                if len(set(tokens)) == n:
                    self.tokens, self.strings = tokens, strings
            except UnicodeDecodeError:
                pass
        if not self.tokens and n:  # odd layout or a defect: line by line (names the bad line)
            p, b, _ = self._slow_section(i, n, 1, order)
        self.table = _WordTable(self.tokens)
        return p, b

    def _section(self, i: int, n: int, k: int, order: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(log10 probs (n,), backoffs (n,), word file-indexes (n, k)) of the n lines from i."""
        p = np.empty(n)
        b = np.zeros(n)
        words = np.empty((n, k), dtype=np.int64)
        for s in range(0, n, READ_CHUNK):
            e = min(n, s + READ_CHUNK)
            got = _bulk_section(self, i + s, e - s, k, k < order)
            if got is not None:
                p[s:e], b[s:e], (ws, we) = got
                assert self.table is not None
                ids = self.table.lookup(self.buf, self.U, ws.reshape(-1), we.reshape(-1)).reshape(e - s, k)
                if (ids >= 0).all():
                    words[s:e] = ids
                    continue
            # odd layout or a defect: line by line (names the bad line)
            p[s:e], b[s:e], words[s:e] = self._slow_section(i + s, e - s, k, order)
        return p, b, words

    def _slow_section(self, i: int, n: int, k: int, order: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Line-by-line parse of n entries from line i; raises RalmError naming the bad line."""
        p = np.empty(n)
        b = np.zeros(n)
        words = np.empty((n, k), dtype=np.int64)
        index = self.word_index() if k > 1 else {}
        tokens: list[bytes] = []
        for r in range(n):
            j = i + r
            parts = _fields(self.line(j))
            if len(parts) == k + 2 and k < order:
                b[r] = _parse_float(parts[-1], self.where(j))
            elif len(parts) != k + 1:
                if len(parts) == k + 2:
                    raise RalmError(f"{self.where(j)}: backoff weight on a highest-order ({k}-gram) entry")
                raise RalmError(
                    f"{self.where(j)}: expected 'log10prob' then {k} word(s) [then backoff], "
                    f"got {self.got(j)}"
                )
            p[r] = _parse_float(parts[0], self.where(j))
            if k == 1:
                tok = parts[1].encode()
                if tok in index:
                    raise RalmError(f"{self.where(j)}: unigram {parts[1]!r} listed twice")
                index[tok] = words[r, 0] = len(tokens)
                tokens.append(tok)
            else:
                for c, t in enumerate(parts[1 : k + 1]):
                    w = index.get(t.encode(), -1)
                    if w < 0:
                        raise RalmError(f"{self.where(j)}: word {t!r} is not among the unigrams")
                    words[r, c] = w
        if k == 1:
            self.tokens, self.strings = tokens, [t.decode("utf-8") for t in tokens]
            self._dict = index
        return p, b, words

    def _keys(
        self, i: int, k: int, w: np.ndarray, keys: list[np.ndarray], V: int
    ) -> tuple[np.ndarray, np.ndarray | None]:
        """Sorted int64 keys of the order-k entries (word ids w, (n, k)) and the sorting
        permutation (None when the file lists them in key order already, as ralm writes)."""
        row = w[:, 0].copy()
        for j in range(2, k):
            row = _find_rows(keys[j - 1], row * V + w[:, j - 1])
            bad = np.flatnonzero(row < 0)
            if len(bad):
                li = i + int(bad[0])
                ctx = " ".join(_fields(self.line(li))[1:k])
                raise RalmError(
                    f"{self.where(li)}: the context {ctx!r} of this {k}-gram is not listed among the "
                    f"{k - 1}-grams (pruned model?); ralm needs every n-gram's context listed"
                )
        key = row * V + w[:, k - 1]
        srt = None
        if len(key) > 1 and not (key[1:] > key[:-1]).all():
            srt = np.argsort(key, kind="stable")
            key = key[srt]
            dup = np.flatnonzero(key[1:] == key[:-1])
            if len(dup):
                raise RalmError(f"{self.where(i + int(srt[dup[0] + 1]))}: {k}-gram listed twice")
        return key, srt


def _parse_float(text: str, where: str) -> float:
    try:
        if "_" in text:
            raise ValueError
        return float(text)
    except ValueError:
        raise RalmError(f"{where}: expected a number, got {text!r}") from None
