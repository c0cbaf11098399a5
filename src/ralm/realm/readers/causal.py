"""A causal LM as REALM's reader: log p(y | x, z) of the masked spans, generated after chunk and text.

One reader row per (query x, document z), all tokens of the reader's own tokenizer:

    [bos] z_title "\\n" z_text "\\n\\n"  x_masked "\\n"  "[1] " y_1 "\\n" "[2] " y_2 "\\n" ...
    \\_______ document ________/  \\___ query ___/  \\________ target ________/

(`ralm.realm.masking.causal` makes the query and target). The null document is no document at all:
``[bos] x_masked "\\n" target``, which is also the closed-book row (the MLM-only baseline of a
causal run, and the reader extracted on its own). log p(y | x, z) is the sum of the LM's next-token
log-probabilities of the span tokens only (each span with the line break that ends it, so the
reader learns where a span stops); the base model runs on every position, the output
layer only on the positions that predict a span token (the vocabulary is 262k wide for Gemma-3,
so logits everywhere would cost more than the model). The query and target are never cut; a
document that does not fit in `max_length` is cut from its end. Rows are right-padded: under
causal attention a real token never sees the padding after it.

With `layout = "query_first"` the query comes first and its K documents share it: one packed
sequence a query,

    [bos] x_masked "\n" | z_1 "\n\n" target | z_2 "\n\n" target | ... | target (the null document)

each segment attending to the shared prefix and to itself only (a 4D attention mask) and counting
its positions on from the prefix, so every segment computes exactly what the separate row
``[bos] x_masked "\n" z_k "\n\n" target`` would (tested), while the query's tokens run once instead
of K times: about 1.8x fewer tokens a query at k = 4 (64-token chunks). REALM's own reader reads
the query first too (``[CLS] x [SEP] z``). A model with sliding-window layers (Gemma-3) gets a second
mask for them that keeps each virtual row's window by position.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from ralm.errors import RalmError
from ralm.models.position_logits import position_logits

LAYOUTS = ("doc_first", "query_first")

__all__ = ["LAYOUTS", "CausalReader", "ReaderRows", "length_buckets"]

DOC_CACHE = 65536  # chunks whose LM token ids are kept


@dataclass
class ReaderRows:
    """Reader rows for B queries x K documents (row b*K + k: query b, document k).

    input_ids / attention_mask: (B*K, L), right-padded. The M scored positions: the token at
    ``cols[i]`` of row ``rows[i]`` is ``targets[i]`` and belongs to span ``span[i]`` of its query;
    ``content[i]`` is False for a span's closing line break. S: the most spans of a query.
    """

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    rows: torch.Tensor
    cols: torch.Tensor
    targets: torch.Tensor
    span: torch.Tensor
    B: int
    K: int
    content: torch.Tensor | None = None
    S: int = 1
    # query_first layout: the packed sequence of each scored token (`rows` stays its virtual row
    # b*K + k), and per packed token its position id and segment (-1: the shared prefix)
    seq: torch.Tensor | None = None
    position_ids: torch.Tensor | None = None
    segments: torch.Tensor | None = None

    def sums(self, lp: torch.Tensor, *, per_span: bool = False, content_only: bool = False) -> torch.Tensor:
        """Scored-token log-probabilities `lp` (M,) summed per row: (B, K), or per row and span:
        (B, K, S); `content_only` leaves the spans' closing line breaks out."""
        dev = lp.device
        if content_only and self.content is not None:
            lp = lp * self.content.to(dev, lp.dtype)
        rows = self.rows.to(dev)
        if not per_span:
            out = torch.zeros(self.B * self.K, dtype=lp.dtype, device=dev)
            return out.index_add(0, rows, lp).view(self.B, self.K)
        flat = rows * self.S + self.span.to(dev)
        out = torch.zeros(self.B * self.K * self.S, dtype=lp.dtype, device=dev).index_add(0, flat, lp)
        return out.view(self.B, self.K, self.S)


def length_buckets(lengths: np.ndarray, slack: float = 1.25) -> list[np.ndarray]:
    """Row indices in groups of similar length, longest first: a group takes the next row while its
    padded size (rows x its longest row) stays within `slack` x its real tokens; slack = inf keeps
    every row in one group.

    Example: lengths [100, 40, 98, 41], slack 1.25 -> [[0, 2], [3, 1]] (one group of all four would be
    400 padded tokens for 279 real ones).
    """
    lengths = np.asarray(lengths, dtype=np.int64)
    if not np.isfinite(slack):
        return [np.arange(len(lengths))]
    groups: list[list[int]] = []
    cur: list[int] = []
    real = 0
    for i in np.argsort(-lengths, kind="stable").tolist():
        if cur and (len(cur) + 1) * int(lengths[cur[0]]) > slack * (real + int(lengths[i])):
            groups.append(cur)
            cur, real = [], 0
        cur.append(i)
        real += int(lengths[i])
    if cur:
        groups.append(cur)
    return [np.asarray(g, dtype=np.int64) for g in groups]


def _padded(seqs: Sequence[Sequence[int]], fill: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """(N, L) long tensor of the right-padded sequences (`fill` after each) and its 0/1 mask."""
    L = max((len(x) for x in seqs), default=0)
    out = torch.full((len(seqs), L), fill, dtype=torch.long)
    mask = torch.zeros((len(seqs), L), dtype=torch.long)
    for i, x in enumerate(seqs):
        out[i, : len(x)] = torch.tensor(list(x), dtype=torch.long)
        mask[i, : len(x)] = 1
    return out, mask


def _reader_rows(ids, am, scored, B: int, K: int, span: torch.Tensor, **packed) -> ReaderRows:
    """ReaderRows from the padded rows and the scored positions' (rows, cols, targets, spans,
    contents) lists; S from the batch's span index."""
    rows, cols, targets, spans, contents = scored
    long = [torch.tensor(x, dtype=torch.long) for x in (rows, cols, targets, spans)]
    S = max(1, int(span.max()) + 1) if span.numel() else 1
    return ReaderRows(ids, am, *long, B, K, torch.tensor(contents, dtype=torch.bool), S, **packed)


class CausalReader(nn.Module):
    """A decoder-only LM scoring (x, z) pairs; `lm` is any `AutoModelForCausalLM`.

    store: the knowledge corpus (a DocStore) whose chunks the documents are; None for a closed-book
    model. max_length: the longest reader row in LM tokens.
    """

    kind = "causal"

    def __init__(
        self,
        lm: nn.Module,
        tokenizer: Any,
        *,
        max_length: int = 512,
        store=None,
        bucket_slack: float = 1.1,
        layout: str = "doc_first",
    ) -> None:
        super().__init__()
        if layout not in LAYOUTS:
            raise RalmError(f"reader_layout {layout!r}: choose {' or '.join(LAYOUTS)}")
        self.lm = lm
        self.layout = layout
        self.bucket_slack = float(bucket_slack)
        self.tokenizer = tokenizer
        self.max_length = int(max_length)
        self.store = store
        self.prefix = [int(i) for i in tokenizer("", add_special_tokens=True)["input_ids"]]  # [bos] or []
        self._docs: OrderedDict[int, list[int]] = OrderedDict()
        self._texts: OrderedDict[int, str] = OrderedDict()

    # ------------------------------------------------------------------ documents
    def doc_text(self, cid: int) -> str:
        """Chunk `cid` as the reader reads it: its title and text ("title\\ntext")."""
        cid = int(cid)
        if cid not in self._texts:
            if self.store is None:
                raise ValueError("a closed-book reader has no documents")
            row = self.store.get(cid)
            title = (row.get("title") or "").strip()
            self._texts[cid] = f"{title}\n{row['text']}" if title else str(row["text"])
            if len(self._texts) > DOC_CACHE:
                self._texts.popitem(last=False)
        return self._texts[cid]

    def doc_ids(self, cid: int) -> list[int]:
        """LM token ids of chunk `cid` followed by a blank line (cached)."""
        cid = int(cid)
        got = self._docs.get(cid)
        if got is None:
            got = self.tokenizer(self.doc_text(cid) + "\n\n", add_special_tokens=False)["input_ids"]
            self._docs[cid] = got
            if len(self._docs) > DOC_CACHE:
                self._docs.popitem(last=False)
        return got

    # ------------------------------------------------------------------ rows
    def build_rows(self, batch: Mapping[str, torch.Tensor], doc_ids: Sequence[Sequence[int]]) -> ReaderRows:
        """The reader rows of B queries (a `CausalMaskingCollator` batch) with K documents each
        (chunk ids; -1 = the null document, no document at all). Row b*K + k is query b with its
        k-th document."""
        qids, qlen = batch["lm_query_ids"].cpu(), batch["lm_query_len"].cpu()
        tids, tlen = batch["lm_target_ids"].cpu(), batch["lm_target_len"].cpu()
        lab, span = batch["lm_target_labels"].cpu(), batch["lm_target_span"].cpu()
        content = batch["lm_target_content"].cpu() if "lm_target_content" in batch else lab
        B = qids.shape[0]
        if len(doc_ids) != B:
            raise ValueError(f"{len(doc_ids)} document lists for {B} queries")
        K = len(doc_ids[0]) if B else 0
        if self.layout == "query_first":
            return self._packed_rows(batch, doc_ids, K)
        seqs: list[list[int]] = []
        rows, cols, targets, spans, contents = [], [], [], [], []
        for b in range(B):
            q = qids[b, : int(qlen[b])].tolist()
            t = tids[b, : int(tlen[b])].tolist()
            fixed = len(self.prefix) + len(q) + len(t)
            budget = self.max_length - fixed
            if budget < 0:
                raise RalmError(
                    f"a masked text with its spans takes {fixed} reader tokens, more than reader_max_length="
                    f"{self.max_length}; raise reader_max_length, or use shorter chunks or fewer masked spans"
                )
            scored = lab[b, : int(tlen[b])].nonzero().flatten().tolist()
            if len(doc_ids[b]) != K:
                raise ValueError("every query needs the same number of documents")
            for cid in doc_ids[b]:
                d = self.doc_ids(int(cid))[:budget] if int(cid) >= 0 else []
                start = len(self.prefix) + len(d) + len(q)
                r = len(seqs)
                seqs.append(self.prefix + d + q + t)
                for j in scored:
                    rows.append(r)
                    cols.append(start + j)
                    targets.append(t[j])
                    spans.append(int(span[b, j]))
                    contents.append(bool(content[b, j]))
        ids, am = _padded(seqs)
        return _reader_rows(ids, am, (rows, cols, targets, spans, contents), B, K, span)

    def _packed_rows(self, batch: Mapping[str, torch.Tensor], doc_ids: Sequence[Sequence[int]], K: int):
        """`build_rows` for the query_first layout: one packed sequence a query (module docstring)."""
        qids, qlen = batch["lm_query_ids"].cpu(), batch["lm_query_len"].cpu()
        tids, tlen = batch["lm_target_ids"].cpu(), batch["lm_target_len"].cpu()
        lab, span = batch["lm_target_labels"].cpu(), batch["lm_target_span"].cpu()
        content = batch["lm_target_content"].cpu() if "lm_target_content" in batch else lab
        B = qids.shape[0]
        seqs, poss, segs = [], [], []
        rows, seq, cols, targets, spans, contents = [], [], [], [], [], []
        for b in range(B):
            q = qids[b, : int(qlen[b])].tolist()
            t = tids[b, : int(tlen[b])].tolist()
            head = self.prefix + q
            budget = self.max_length - len(head) - len(t)
            if budget < 0:
                raise RalmError(
                    f"a masked text with its spans takes {len(head) + len(t)} reader tokens, more than "
                    f"reader_max_length={self.max_length}; raise reader_max_length, or use shorter chunks or "
                    "fewer masked spans"
                )
            if len(doc_ids[b]) != K:
                raise ValueError("every query needs the same number of documents")
            scored = lab[b, : int(tlen[b])].nonzero().flatten().tolist()
            ids, pos, sg = list(head), list(range(len(head))), [-1] * len(head)
            for k, cid in enumerate(doc_ids[b]):
                d = self.doc_ids(int(cid))[:budget] if int(cid) >= 0 else []
                at = len(ids)  # where the segment starts in the packed sequence
                ids += d + t
                pos += list(range(len(head), len(head) + len(d) + len(t)))
                sg += [k] * (len(d) + len(t))
                for j in scored:
                    rows.append(b * K + k)
                    seq.append(b)
                    cols.append(at + len(d) + j)
                    targets.append(t[j])
                    spans.append(int(span[b, j]))
                    contents.append(bool(content[b, j]))
            seqs.append(ids)
            poss.append(pos)
            segs.append(sg)
        ids_t, am = _padded(seqs)
        pos_t, _ = _padded(poss)
        seg_t, _ = _padded(segs, fill=-2)  # -2: padding
        return _reader_rows(
            ids_t,
            am,
            (rows, cols, targets, spans, contents),
            B,
            K,
            span,
            seq=torch.tensor(seq, dtype=torch.long),
            position_ids=pos_t,
            segments=seg_t,
        )

    # ------------------------------------------------------------------ scoring
    def token_log_probs(self, rr: ReaderRows) -> torch.Tensor:
        """(M,) log p of each scored token given everything before it in its row.

        Rows (packed sequences in the query_first layout) are run in groups of similar length
        (`length_buckets`), each cut to its own longest row, so a short row (the null document's, a
        short chunk's, a query with few spans) is not padded to the longest of the batch: right
        padding never changes a real token's logits under causal attention.
        """
        dev = next(self.lm.parameters()).device
        row_t = rr.seq if rr.seq is not None else rr.rows  # the (packed) row of each scored token
        row_of = row_t.numpy()
        lengths = rr.attention_mask.sum(1).numpy()
        groups = length_buckets(lengths, self.bucket_slack)
        if len(groups) <= 1:
            return self._group_log_probs(rr, slice(None), row_t, slice(None), dev)
        out: torch.Tensor | None = None
        for g in groups:
            where = torch.from_numpy(np.flatnonzero(np.isin(row_of, g)))
            if not len(where):
                continue
            local = torch.full((len(lengths),), -1, dtype=torch.long)
            gi = torch.from_numpy(g)
            local[gi] = torch.arange(len(g))
            L = int(lengths[g].max())
            lp = self._group_log_probs(rr, (gi, slice(0, L)), local[row_t[where]], where, dev)
            if out is None:
                out = torch.zeros(len(row_of), dtype=lp.dtype, device=lp.device)
            out = out.index_put((where.to(lp.device),), lp)
        assert out is not None
        return out

    def _group_log_probs(self, rr: ReaderRows, cut, rows: torch.Tensor, where, dev) -> torch.Tensor:
        """Log-probabilities of the scored tokens `where` of rows `cut` (an index into the padded rows
        and columns), `rows` their row within the cut."""
        ids, am, cols, y = rr.input_ids[cut], rr.attention_mask[cut], rr.cols[where], rr.targets[where]
        if rr.seq is None:
            return self._token_log_probs(ids, am, rows, cols, y, dev)
        assert rr.segments is not None and rr.position_ids is not None
        attn = self._packed_mask(rr.segments[cut], rr.position_ids[cut])
        return self._token_log_probs(ids, attn, rows, cols, y, dev, position_ids=rr.position_ids[cut])

    def _token_log_probs(self, ids, am, rows, cols, y, dev, **kw) -> torch.Tensor:
        ids, rows, cols, y = ids.to(dev), rows.to(dev), cols.to(dev), y.to(dev)
        am = {k: v.to(dev) for k, v in am.items()} if isinstance(am, dict) else am.to(dev)
        kw = {k: v.to(dev) for k, v in kw.items()}
        logits = position_logits(
            self.lm, ids, am, rows, cols - 1, **kw
        )  # (M, V), never (N, L, V) where it can
        return torch.log_softmax(logits, dim=-1).gather(1, y[:, None])[:, 0]

    def _packed_mask(self, seg: torch.Tensor, pos: torch.Tensor) -> torch.Tensor | dict[str, torch.Tensor]:
        """The 4D attention mask (N, 1, L, L) of packed rows with segments `seg` (N, L) (-1: the shared
        prefix, -2: padding) and position ids `pos` (N, L): a token sees the shared prefix and its own
        segment, causally; positions restart after the prefix in every segment. A model with
        sliding-window layers gets a second mask for them, keyed by layer type."""
        real = seg > -2
        causal = torch.ones(seg.shape[1], seg.shape[1], dtype=torch.bool).tril()
        same = (seg[:, None, :] == -1) | (seg[:, None, :] == seg[:, :, None])  # key j: prefix, or i's segment
        mask = causal[None] & same & real[:, None, :] & real[:, :, None]
        eye = torch.eye(seg.shape[1], dtype=torch.bool)[None]  # padding rows see themselves (no NaN)
        attn: torch.Tensor | dict[str, torch.Tensor] = (mask | eye)[:, None]
        window = getattr(self.lm.config, "sliding_window", None)
        if window and "sliding_attention" in (getattr(self.lm.config, "layer_types", None) or []):
            # sliding-window layers see the last `window` positions of the virtual row (position ids)
            near = (pos[:, :, None] - pos[:, None, :]) < int(window)
            attn = {"full_attention": attn, "sliding_attention": ((mask & near) | eye)[:, None]}
        return attn

    def log_p_y_given_docs(
        self,
        batch: Mapping[str, torch.Tensor],
        doc_ids: Sequence[Sequence[int]],
        *,
        per_span: bool = False,
        content_only: bool = False,
    ) -> torch.Tensor:
        """(B, K) log p(y | x, z): summed log-probabilities of the span tokens, per query and document;
        (B, K, S) per span with `per_span`; `content_only` leaves each span's closing line break out."""
        rr = self.build_rows(batch, doc_ids)
        return rr.sums(self.token_log_probs(rr), per_span=per_span, content_only=content_only)

    def closed_book(self, batch: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """(B,) log p(y | x) with no document: the closed-book reader (and the null document's score)."""
        B = batch["lm_query_ids"].shape[0]
        return self.log_p_y_given_docs(batch, [[-1]] * B)[:, 0]

    @staticmethod
    def n_target(batch: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """(B,) scored span tokens per query."""
        return batch["lm_target_labels"].sum(1)

    def span_texts(self, batch: Mapping[str, torch.Tensor]) -> list[list[str]]:
        """Per query, the text of each span (decoded from its scored target tokens)."""
        tids, span = batch["lm_target_ids"].cpu(), batch["lm_target_span"].cpu()
        out = []
        for b in range(tids.shape[0]):
            n = int(span[b].max()) + 1 if span.shape[1] else 0
            out.append(
                [self.tokenizer.decode(tids[b][span[b] == j].tolist()).strip() for j in range(max(n, 0))]
            )
        return out

    def answers_found(self, batch: Mapping[str, torch.Tensor], doc_ids: np.ndarray) -> np.ndarray:
        """(B,) scored span tokens of each query whose span text occurs (case-folded) in one of its
        retrieved chunks: how often retrieval can hand the reader the answer to copy."""
        span = batch["lm_target_span"].cpu()
        out = np.zeros(len(doc_ids), dtype=np.int64)
        for b, texts in enumerate(self.span_texts(batch)):
            docs = [self.doc_text(int(c)).casefold() for c in doc_ids[b] if int(c) >= 0]
            for j, s in enumerate(texts):
                if s and any(s.casefold() in d for d in docs):
                    out[b] += int((span[b] == j).sum())
        return out
