"""Open-domain QA as REALM fine-tunes it (§3.2, §4.3, after ORQA): retrieve, read spans, marginalise.

For a question x the retriever returns the top-k chunks z (p(z|x), a softmax of q(x)·d(z) over
them; the document vectors stay fixed in the index, the query tower is tuned). The reader sees
``[CLS] x [SEP] z_body [SEP]`` and gives start and end distributions over z's tokens. With S(z, y)
the spans of z whose tokens equal an answer string's tokens,

    log p(y|z, x) = logsumexp_{s in S(z,y)} [log p_start(s) + log p_end(s)]
    log p(y|x)    = logsumexp_z [log p(z|x) + log p(y|z, x)]

and training maximises log p(y|x). A question none of whose top-k chunks holds an answer span
gives no gradient and is skipped (counted as `skipped` in the step metrics), as in ORQA. The
prediction is the span with the highest log p(z|x) + log p_start + log p_end over all chunks;
metrics are exact match and F1 (SQuAD normalisation, max over the answers) and the retriever's
answer recall@k (a chunk holds an answer as whole normalised tokens).

Regex answers (an example's `regex`, CuratedTREC): recall@k counts a chunk whose text a pattern
is found in (DPR), exact match is a pattern matching at the start of the prediction (DrQA), F1
is left out for them (`ralm.tasks.metrics.qa_metrics`). Their training spans S(z, y) are the
tokens each pattern match covers in z's text (`pattern_spans`, through the offsets mapping); the
pattern is searched as written there, not NFD-normalised as for recall, so a rare chunk counted
in recall may give no span.

Deviations: REALM scores a span with an MLP over [h_start; h_end]; here the span score is the sum
of a start and an end logit (the Hugging Face QA head), which normalises per chunk as above.
Answer spans are matched on the reader's token ids (answers tokenized alone), as ORQA does.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from ralm.answers import compile_answer, has_answer
from ralm.tasks import metrics as M
from ralm.tasks.adapter_base import Adapter, Item
from ralm.tasks.extractive_qa import best_span, span_log_probs
from ralm.tasks.retrieval import TaskRetriever, marginalize

__all__ = ["OpenQAAdapter", "answer_spans", "pattern_spans"]


def answer_spans(ids: list[int], answers: list[list[int]], lo: int, hi: int) -> list[tuple[int, int]]:
    """Token spans (start, end), inclusive, of `ids[lo:hi]` equal to one of the `answers` id lists.

    Example: answer_spans([1, 7, 8, 2, 7, 8], [[7, 8]], 1, 6) -> [(1, 2), (4, 5)].
    """
    out = []
    for a in answers:
        n = len(a)
        if not n:
            continue
        for s in range(lo, hi - n + 1):
            if ids[s] == a[0] and ids[s : s + n] == a:
                out.append((s, s + n - 1))
    return sorted(set(out))


def pattern_spans(
    text: str, offsets: Sequence[Sequence[int]], patterns: list[re.Pattern], lo: int, hi: int
) -> list[tuple[int, int]]:
    """Token spans (start, end), inclusive, of tokens lo..hi-1 covering a match of one of `patterns`
    in `text`; offsets[t] = (char start, char end) of token t in `text` (a tokenizer's offsets).

    Example: text "born 1969 ok", offsets [(0,4), (5,7), (7,9), (10,12)], [re.compile("19(6|7)\\d")],
    0, 4 -> [(1, 2)]. A match wholly or partly outside tokens lo..hi-1 (truncated away) gives none.
    """
    out = []
    for pat in patterns:
        for m in pat.finditer(text):
            a, b = m.span()
            if a == b:
                continue
            toks = [t for t in range(lo, hi) if offsets[t][1] > a and offsets[t][0] < b]
            if toks and offsets[toks[0]][0] <= a and offsets[toks[-1]][1] >= b:
                out.append((toks[0], toks[-1]))
    return sorted(set(out))


class OpenQAAdapter(Adapter):
    task = "open-qa"

    def __init__(self, tokenizer, model, labels, *, max_length: int = 256, lang: str = "en", **kw):
        super().__init__(tokenizer, model, labels, max_length=max_length)
        self.lang = lang
        self.max_answer_len = 10  # answers to open questions are short (ORQA: at most 10 tokens)
        self.skipped = 0

    def encode(self, examples: list) -> list[Item]:
        items = []
        for i, ex in enumerate(examples):
            regex = getattr(ex, "regex", False)  # SQuAD-format questions have string answers
            if regex:  # patterns, found in each chunk's text at training time
                ans = [compile_answer(a, nfd=False) for a in ex.answers]
            else:
                ans = [self.tokenizer(a, add_special_tokens=False)["input_ids"] for a in ex.answers]
            items.append(Item([], [], ex.question, ans, i, {"answers": ex.answers, "regex": regex}))
        return items

    def _read(self, items: list[Item], retriever: TaskRetriever):
        """Retrieve, build ``[CLS] x [SEP] z [SEP]`` rows and read them: (lpz (B, K), log p_start and
        log p_end (B, K, L), encoding, texts (B*K), retrieved ids (B, K))."""
        if retriever is None:
            raise ValueError("open-domain QA needs a retriever")
        r = retriever([it.query for it in items])
        ids = r.ids
        B, K = ids.shape
        texts = [retriever.store.get(int(i))["text"] for i in ids.ravel()]  # DocStore caches row groups
        enc = self.tokenizer(
            [it.query for it in items for _ in range(K)],
            texts,
            truncation="only_second",
            max_length=self.max_length,
            padding=True,
            return_offsets_mapping=True,
            return_token_type_ids=True,
            return_tensors="pt",
        )
        allowed = torch.tensor(
            [[s == 1 for s in enc.sequence_ids(j)] for j in range(B * K)], dtype=torch.bool
        )  # (B*K, L): chunk tokens
        dev = next(self.model.parameters()).device
        keep = ["input_ids", "attention_mask"] + (["token_type_ids"] if self.with_types else [])
        out = self.model(**{k: enc[k].to(dev) for k in keep})
        lps, lpe = span_log_probs(out.start_logits, out.end_logits, allowed.to(dev))
        L = lps.shape[-1]
        lpz = r.log_p_z[:, :K].to(dev)  # open QA retrieves no null document
        return lpz, lps.view(B, K, L), lpe.view(B, K, L), enc, allowed, texts, ids

    def loss(self, items: list[Item], retriever: TaskRetriever | None) -> torch.Tensor | None:
        lpz, lps, lpe, enc, allowed, texts, _ = self._read(items, retriever)
        B, K, L = lps.shape
        ninf = torch.tensor(float("-inf"), device=lps.device)
        lpy, keep = [], []
        for b, it in enumerate(items):
            row = []
            for k in range(K):
                j = b * K + k
                cols = allowed[j].nonzero().ravel()
                lo, hi = (int(cols[0]), int(cols[-1]) + 1) if len(cols) else (0, 0)
                if it.extra.get("regex"):
                    spans = pattern_spans(texts[j], enc["offset_mapping"][j].tolist(), it.target, lo, hi)
                else:
                    spans = answer_spans(enc["input_ids"][j].tolist(), it.target, lo, hi)
                if spans:
                    s = torch.tensor([a for a, _ in spans], device=lps.device)
                    e = torch.tensor([z for _, z in spans], device=lps.device)
                    row.append(torch.logsumexp(lps[b, k, s] + lpe[b, k, e], 0))
                else:
                    row.append(ninf)
            if any(torch.isfinite(x) for x in row):  # rows of only -inf would give NaN gradients
                lpy.append(torch.stack(row))
                keep.append(b)
        self.skipped += B - len(keep)
        if not keep:
            return None  # no top-k chunk holds an answer: nothing to learn from this batch
        log_p_y = marginalize(lpz[keep], torch.stack(lpy))  # (B',)
        return -log_p_y.mean()

    @torch.no_grad()
    def predict(self, examples, items, retriever, batch_size) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for st in range(0, len(items), batch_size):
            chunk = items[st : st + batch_size]
            lpz, lps, lpe, enc, allowed, texts, ids = self._read(chunk, retriever)
            B, K, L = lps.shape
            for b, it in enumerate(chunk):
                best = (float("-inf"), "", -1)
                for k in range(K):
                    j = b * K + k
                    s, e, sc = best_span(lps[b, k].cpu(), lpe[b, k].cpu(), allowed[j], self.max_answer_len)
                    if s < 0:
                        continue
                    total = float(lpz[b, k]) + sc
                    if total > best[0]:
                        offs = enc["offset_mapping"][j]
                        best = (total, texts[j][int(offs[s][0]) : int(offs[e][1])], int(ids[b, k]))
                ex = examples[it.example]
                regex = it.extra["regex"]
                hit = [has_answer(texts[b * K + k], ex.answers, self.lang, regex) for k in range(K)]
                out[ex.id] = {"answer": best[1], "chunk": best[2], "hits": hit, "ids": ids[b].tolist()}
        return out

    def score(self, examples, predictions) -> dict[str, float]:
        qa = M.qa_metrics({k: v["answer"] for k, v in predictions.items()}, examples, self.lang)
        hits = np.array([predictions[ex.id]["hits"] for ex in examples], dtype=bool)
        res = dict(qa)  # "f1" is absent when every answer is a pattern
        if hits.size:
            k = hits.shape[1]
            for kk in sorted({1, min(5, k), k}):
                res[f"recall@{kk}"] = 100.0 * float(hits[:, :kk].any(1).mean())
        return res
