"""One adapter per task: examples -> model inputs -> log-probabilities -> loss, predictions, metrics.

Every task runs the same path with and without retrieval (BRENT Table 1's two columns):

    x rows (the task's own input, special tokens included)
      -> with retrieval: K rows ``x title [SEP] body [SEP]`` per input (`join_docs`), p(z|x) (B, K)
         without:        one row x per input, p(z|x) = 1 (K = 1)
      -> the HF task model on B*K rows -> per-document log-probs (B, K, ...) at x's own positions
      -> log p(y|x) = logsumexp_z [log p(z|x) + log p(y|z,x)] (`marginalize`)

Classification marginalises p(label|z,x); tagging marginalises each token's label distribution;
extractive QA marginalises the start and end distributions over x's positions (the loss uses
the joint: log Σ_z p(z|x) p(start|z,x) p(end|z,x)), so a retrieved chunk can only help
choose the answer inside x, never be the answer. Open-domain QA (where the answer is in the
retrieved chunks) is `ralm.tasks.openqa`.

An adapter's `encode(examples)` gives training items (QA: one per doc-stride window); `loss`
and `predict` take a list of items; `score(examples, predictions)` gives the task's metrics.
"""

from __future__ import annotations

import numpy as np
import torch

from ralm.tasks import metrics as M
from ralm.tasks.adapter_base import Adapter, Item
from ralm.tasks.retrieval import marginalize
from ralm.tasks.tagging import IGNORE_INDEX, align_labels, encode_words_by_offsets, word_predictions

__all__ = ["ADAPTERS", "Adapter", "make_adapter"]


# ----------------------------------------------------------------------------- classification
class ClassifyAdapter(Adapter):
    task = "classify"

    def encode(self, examples: list) -> list[Item]:
        enc = self.tokenizer(
            [ex.text for ex in examples],
            truncation=True,
            max_length=self.max_length,
            return_token_type_ids=True,
        )
        return [
            Item(enc["input_ids"][i], enc["token_type_ids"][i], ex.text, self.label2id.get(ex.label, -1), i)
            for i, ex in enumerate(examples)
        ]

    def log_probs(self, out, items, K):
        return out.logits.float().log_softmax(-1).view(len(items), K, -1)  # (B, K, C)

    def nll(self, lpz, lp, items):
        y = torch.tensor([it.target for it in items], device=lp.device)
        return -marginalize(lpz, lp).gather(1, y[:, None]).mean()

    def predict(self, examples, items, retriever, batch_size):
        out = {}
        for s in range(0, len(items), batch_size):
            chunk = items[s : s + batch_size]
            marg, _ = self.marginal(chunk, retriever)
            for it, c in zip(chunk, marg.argmax(-1).tolist(), strict=True):
                out[examples[it.example].id] = self.labels[c]
        return out

    def score(self, examples, predictions):
        return M.classification_metrics(
            [ex.label for ex in examples], [predictions[ex.id] for ex in examples]
        )


# ----------------------------------------------------------------------------- tagging (NER, POS)
class TaggingAdapter(Adapter):
    task = "ner"

    def encode(self, examples: list) -> list[Item]:
        if getattr(self.model, "words_by_offsets", False):
            return self._encode_by_offsets(examples)
        enc = self.tokenizer(
            [list(ex.tokens) for ex in examples],
            is_split_into_words=True,
            truncation=True,
            max_length=self.max_length,
            return_token_type_ids=True,
        )
        items = []
        for i, ex in enumerate(examples):
            wids = enc.word_ids(i)
            target = align_labels(wids, [self.label2id.get(lab, -1) for lab in ex.labels])
            items.append(
                Item(
                    enc["input_ids"][i],
                    enc["token_type_ids"][i],
                    " ".join(ex.tokens),
                    target,
                    i,
                    {"wids": wids},
                )
            )
        return items

    def _encode_by_offsets(self, examples: list) -> list[Item]:
        """Decoder-LM tokenizers: the sentence as running text, words found by offsets."""
        ids, wids = encode_words_by_offsets(
            self.tokenizer, [list(ex.tokens) for ex in examples], self.max_length
        )
        return [
            Item(
                ids[i],
                [0] * len(ids[i]),
                " ".join(ex.tokens),
                align_labels(wids[i], [self.label2id.get(lab, -1) for lab in ex.labels]),
                i,
                {"wids": wids[i]},
            )
            for i, ex in enumerate(examples)
        ]

    def log_probs(self, out, items, K):
        Lx = self.x_length(items)
        lp = out.logits[:, :Lx].float().log_softmax(-1)  # x sits at the same positions in every row
        return lp.view(len(items), K, Lx, -1)  # (B, K, Lx, C)

    def nll(self, lpz, lp, items):
        Lx = lp.shape[2]
        y = torch.full((len(items), Lx), IGNORE_INDEX, dtype=torch.long)
        for b, it in enumerate(items):
            y[b, : len(it.target)] = torch.tensor(it.target)
        y = y.to(lp.device)
        marg = marginalize(lpz, lp)  # (B, Lx, C)
        keep = y != IGNORE_INDEX
        return -marg[keep].gather(1, y[keep][:, None]).mean()

    fill_label: str | None = None  # tag of words cut off by truncation (default "O", else the first)

    def predict(self, examples, items, retriever, batch_size):
        fill = self.label2id.get(self.fill_label or "O", 0)
        out = {}
        for s in range(0, len(items), batch_size):
            chunk = items[s : s + batch_size]
            marg, _ = self.marginal(chunk, retriever)
            for it, row in zip(chunk, marg.argmax(-1).tolist(), strict=True):
                ex = examples[it.example]
                ids = word_predictions(row, it.extra["wids"], len(ex.tokens), fill)
                out[ex.id] = [self.labels[i] for i in ids]
        return out

    def score(self, examples, predictions):
        gold = [ex.labels for ex in examples]
        pred = [predictions[ex.id] for ex in examples]
        if self.task == "pos":
            return M.tagging_accuracy(gold, pred)
        return {**M.entity_metrics(gold, pred), **M.tagging_accuracy(gold, pred)}


class PosAdapter(TaggingAdapter):
    task = "pos"


# ----------------------------------------------------------------------------- extractive QA
class ExtractiveQAAdapter(Adapter):
    task = "extractive-qa"

    def __init__(self, *args, doc_stride: int = 128, max_answer_len: int = 30, lang: str = "en", **kw):
        super().__init__(*args, **kw)
        self.doc_stride = int(doc_stride)
        self.max_answer_len = int(max_answer_len)
        self.lang = lang

    def encode(self, examples: list) -> list[Item]:
        from ralm.tasks.extractive_qa import qa_features

        q = min(64, self.max_length // 4)  # question budget; short windows (tests, tiny models) scale down
        stride = min(self.doc_stride, (self.max_length - q - 3) // 2)
        f = qa_features(self.tokenizer, examples, self.max_length, doc_stride=stride, max_query_length=q)
        items = []
        n = f.attention_mask.sum(1).tolist()
        for i in range(len(f.example_index)):
            ex_i = int(f.example_index[i])
            m = n[i]
            items.append(
                Item(
                    f.input_ids[i, :m].tolist(),
                    f.token_type_ids[i, :m].tolist(),
                    examples[ex_i].question,
                    (int(f.start_positions[i]), int(f.end_positions[i])),
                    ex_i,
                    {"feature": i, "features": f},
                )
            )
        return items

    def log_probs(self, out, items, K):
        Lx = self.x_length(items)
        allowed = torch.zeros(len(items), Lx, dtype=torch.bool)
        for b, it in enumerate(items):
            allowed[b, : len(it.ids)] = True
        allowed = allowed.repeat_interleave(K, 0).to(out.start_logits.device)
        ninf = float("-inf")
        s = out.start_logits[:, :Lx].float().masked_fill(~allowed, ninf).log_softmax(-1)
        e = out.end_logits[:, :Lx].float().masked_fill(~allowed, ninf).log_softmax(-1)
        return torch.stack([s, e], 1).view(len(items), K, 2, Lx)  # (B, K, 2, Lx)

    def nll(self, lpz, lp, items):
        gs = torch.tensor([it.target[0] for it in items], device=lp.device)
        ge = torch.tensor([it.target[1] for it in items], device=lp.device)
        B, K = lpz.shape
        idx = torch.arange(B, device=lp.device)
        joint = lp[idx, :, 0, gs] + lp[idx, :, 1, ge]  # (B, K): log p(start, end | z, x)
        return -marginalize(lpz, joint).mean()

    def predict(self, examples, items, retriever, batch_size):
        from ralm.tasks.extractive_qa import decode_predictions

        feats = items[0].extra["features"] if items else None
        if feats is None:
            return {}
        F, L = feats.input_ids.shape
        start = torch.full((F, L), -1e4)
        end = torch.full((F, L), -1e4)
        for s in range(0, len(items), batch_size):
            chunk = items[s : s + batch_size]
            marg, _ = self.marginal(chunk, retriever)  # (B, 2, Lx)
            for it, row in zip(chunk, marg.cpu(), strict=True):
                f = it.extra["feature"]
                n = len(it.ids)
                start[f, :n] = row[0, :n].clamp(min=-1e4)
                end[f, :n] = row[1, :n].clamp(min=-1e4)
        return decode_predictions(feats, examples, start, end, self.max_answer_len)

    def score(self, examples, predictions):
        return M.qa_metrics(predictions, examples, self.lang)


ADAPTERS = {
    "classify": ClassifyAdapter,
    "ner": TaggingAdapter,
    "pos": PosAdapter,
    "extractive-qa": ExtractiveQAAdapter,
}


def make_adapter(task: str, tokenizer, model, labels, **kw) -> Adapter:
    """The adapter for `task` (open-qa has its own, `ralm.tasks.openqa.OpenQAAdapter`)."""
    if task == "open-qa":
        from ralm.tasks.openqa import OpenQAAdapter

        return OpenQAAdapter(tokenizer, model, labels, **kw)
    kw = {k: v for k, v in kw.items() if k in ("max_length", "doc_length", "doc_stride", "lang")}
    if task != "extractive-qa":
        kw.pop("doc_stride", None)
        kw.pop("lang", None)
    return ADAPTERS[task](tokenizer, model, labels, **kw)


def shuffled(n: int, seed: int, epoch: int) -> np.ndarray:
    """The order of n training items in `epoch` (one seeded permutation per epoch)."""
    return np.random.default_rng([seed, 17, epoch]).permutation(n)
