"""Evaluation metrics of the downstream tasks, all reported in percent (0-100).

- extractive and open-domain QA: SQuAD v1.1 exact match and token F1, each the maximum over the
  gold answers, on strings normalised by `ralm.retrieval.eval.evaluate.normalize_answer` (the same
  normalisation retrieval recall uses); a question whose answers are regular expressions
  (`regex`, CuratedTREC) scores exact match as DrQA's `regex_match_score` does (a pattern
  matches at the start of the prediction, `ralm.retrieval.eval.evaluate.regex_em`) and has no F1,
  so "f1" averages the string-answer questions only and is left out when there are none;
- NER: entity-level micro precision/recall/F1 from `seqeval` with its default CoNLL (conlleval)
  semantics, so an I- tag that follows O or another type starts a new entity;
- POS: token accuracy;
- classification: accuracy and macro-F1 from scikit-learn over the union of gold and predicted labels.

`PRIMARY` names the metric each task uses for early stopping and result tables.
Left out: SQuAD v2 no-answer scoring, strict (IOB2-scheme) seqeval mode, per-type reports.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from ralm.answers import regex_em, squad_scores

PRIMARY = {"extractive-qa": "f1", "ner": "f1", "pos": "accuracy", "classify": "macro_f1", "open-qa": "em"}


def qa_metrics(predictions: Mapping[str, str], examples: Iterable, lang: str = "en") -> dict[str, float]:
    """{"em", "f1"} in percent over `examples` (each with `.id`, `.answers` and maybe `.regex`).

    Example: qa_metrics({"q1": "Paris"}, [QAExample("q1", ..., answers=["Paris"], ...)]) -> em 100.
    An example without a prediction counts as predicted "" (scores 0), as in the official script.
    Examples with `regex` answers count in "em" (`regex_em`) but not in "f1", which is the mean over
    the others and absent when every example has regex answers.
    """
    n = n_f1 = 0
    em_sum = f1_sum = 0.0
    for ex in examples:
        prediction = predictions.get(ex.id, "")
        if getattr(ex, "regex", False):
            em_sum += regex_em(prediction, ex.answers)
        else:
            em, f1 = squad_scores(prediction, ex.answers, lang)
            em_sum += em
            f1_sum += f1
            n_f1 += 1
        n += 1
    if n == 0:
        return {"em": 0.0, "f1": 0.0}
    out = {"em": 100.0 * em_sum / n}
    if n_f1:
        out["f1"] = 100.0 * f1_sum / n_f1
    return out


def _check_lengths(y_true: Sequence[Sequence[str]], y_pred: Sequence[Sequence[str]]) -> None:
    if len(y_true) != len(y_pred):
        raise ValueError(f"{len(y_true)} gold sequences but {len(y_pred)} predicted")
    for i, (t, p) in enumerate(zip(y_true, y_pred, strict=True)):
        if len(t) != len(p):
            raise ValueError(f"sequence {i}: {len(t)} gold tags but {len(p)} predicted")


def entity_metrics(y_true: Sequence[Sequence[str]], y_pred: Sequence[Sequence[str]]) -> dict[str, float]:
    """Entity-level micro {"precision", "recall", "f1"} in percent (seqeval, CoNLL semantics).

    Example: entity_metrics([["B-PER", "I-PER", "O"]], [["B-PER", "I-PER", "O"]]) -> all 100.
    An entity counts only with exact boundaries and type; no entities at all gives 0, not a warning.
    """
    from seqeval.metrics import f1_score, precision_score, recall_score

    _check_lengths(y_true, y_pred)
    t = [list(s) for s in y_true]
    p = [list(s) for s in y_pred]
    return {
        "precision": 100.0 * precision_score(t, p, average="micro", zero_division=0),
        "recall": 100.0 * recall_score(t, p, average="micro", zero_division=0),
        "f1": 100.0 * f1_score(t, p, average="micro", zero_division=0),
    }


def tagging_accuracy(y_true: Sequence[Sequence[str]], y_pred: Sequence[Sequence[str]]) -> dict[str, float]:
    """{"accuracy"}: percent of tokens tagged correctly, over all sentences (UPOS).

    Example: tagging_accuracy([["NOUN", "VERB"]], [["NOUN", "NOUN"]]) -> {"accuracy": 50.0}.
    """
    _check_lengths(y_true, y_pred)
    total = sum(len(s) for s in y_true)
    correct = sum(a == b for t, p in zip(y_true, y_pred, strict=True) for a, b in zip(t, p, strict=True))
    return {"accuracy": 100.0 * correct / total if total else 0.0}


def classification_metrics(y_true: Sequence[str], y_pred: Sequence[str]) -> dict[str, float]:
    """{"accuracy", "macro_f1"} in percent (scikit-learn); macro over the gold and predicted labels.

    Example: classification_metrics(["a", "b"], ["a", "a"]) -> accuracy 50.0, macro_f1 33.3.
    A label never predicted (or never gold) has F1 0 and still counts in the macro average.
    """
    from sklearn.metrics import accuracy_score, f1_score

    if len(y_true) != len(y_pred):
        raise ValueError(f"{len(y_true)} gold labels but {len(y_pred)} predicted")
    if not y_true:
        return {"accuracy": 0.0, "macro_f1": 0.0}
    labels = sorted(set(y_true) | set(y_pred))
    return {
        "accuracy": 100.0 * float(accuracy_score(y_true, y_pred)),
        "macro_f1": 100.0 * float(f1_score(y_true, y_pred, labels=labels, average="macro", zero_division=0)),
    }
