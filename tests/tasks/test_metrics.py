import pytest

from ralm.answers import squad_scores
from ralm.formats.types import QAExample
from ralm.tasks.metrics import (
    PRIMARY,
    classification_metrics,
    entity_metrics,
    qa_metrics,
    tagging_accuracy,
)


def test_squad_exact_match_normalises_articles_case_and_punctuation():
    assert squad_scores("The Eiffel Tower!", ["Eiffel Tower"]) == (1.0, 1.0)
    assert squad_scores("an  apple.", ["Apple"]) == (1.0, 1.0)
    assert squad_scores("Paris", ["London", "paris."]) == (1.0, 1.0)  # max over answers
    assert squad_scores("Rome", ["London", "Paris"]) == (0.0, 0.0)
    assert squad_scores("anything", []) == (0.0, 0.0)


def test_squad_f1_partial_overlap():
    # pred tokens: eiffel tower in paris (4), gold: eiffel tower (2), common 2
    # P = 2/4, R = 2/2, F1 = 2 * 0.5 * 1 / 1.5 = 0.6667
    em, f1 = squad_scores("the Eiffel Tower in Paris", ["Eiffel Tower"])
    assert em == 0.0
    assert f1 == pytest.approx(2 / 3)
    # max over answers: "eiffel tower" gives P 2/3, R 1 -> 0.8; "tower" gives P 1/3, R 1 -> 0.5
    assert squad_scores("tall Eiffel Tower", ["Eiffel Tower", "tower"])[1] == pytest.approx(0.8)
    # repeated tokens are counted once per gold occurrence: common 1, P 1/2, R 1 -> 2/3
    assert squad_scores("tower tower", ["tower"])[1] == pytest.approx(2 / 3)


def test_squad_articles_depend_on_language():
    assert squad_scores("the Oslo", ["Oslo"], lang="en") == (1.0, 1.0)
    em, f1 = squad_scores("the Oslo", ["Oslo"], lang="nb")  # "the" is kept: P 1/2, R 1
    assert em == 0.0
    assert f1 == pytest.approx(2 / 3)


def test_qa_metrics_percent_and_missing_prediction_scores_zero():
    examples = [
        QAExample("q1", "?", "ctx", ["Eiffel Tower"], [0]),
        QAExample("q2", "?", "ctx", ["Eiffel Tower"], [0]),
        QAExample("q3", "?", "ctx", ["Oslo"], [0]),
    ]
    m = qa_metrics({"q1": "eiffel tower", "q2": "the Eiffel Tower in Paris"}, examples)
    assert m["em"] == pytest.approx(100 / 3)
    assert m["f1"] == pytest.approx(100 * (1 + 2 / 3 + 0) / 3)


def test_entity_metrics_hand_computed():
    y_true = [
        ["B-PER", "I-PER", "O", "B-LOC", "O", "B-ORG", "I-ORG"],
        ["O", "B-MISC"],
    ]
    y_pred = [
        ["B-PER", "I-PER", "O", "B-ORG", "O", "B-ORG", "O"],
        ["O", "O"],
    ]
    # gold entities: PER[0:2], LOC[3], ORG[5:7], MISC[1]  -> 4
    # predicted:     PER[0:2], ORG[3] (type mismatch), ORG[5] (boundary error) -> 3
    # correct: PER only -> P = 1/3, R = 1/4, F1 = 2 * (1/12) / (7/12) = 2/7
    m = entity_metrics(y_true, y_pred)
    assert m["precision"] == pytest.approx(100 / 3)
    assert m["recall"] == pytest.approx(25.0)
    assert m["f1"] == pytest.approx(200 / 7)


def test_entity_metrics_i_tag_starts_an_entity_conll_semantics():
    # CoNLL (conlleval) semantics: I-PER after O, or after another type, opens a PER entity.
    y_true = [["O", "I-PER", "I-PER", "O"], ["B-LOC", "I-PER"]]
    y_pred = [["O", "B-PER", "I-PER", "O"], ["B-LOC", "B-PER"]]
    assert entity_metrics(y_true, y_pred) == pytest.approx({"precision": 100.0, "recall": 100.0, "f1": 100.0})
    # I-PER I-PER is one entity, not two: predicting B-PER B-PER gets 0 of 1 right (and 2 predicted)
    m = entity_metrics([["I-PER", "I-PER"]], [["B-PER", "B-PER"]])
    assert m == pytest.approx({"precision": 0.0, "recall": 0.0, "f1": 0.0})


def test_entity_metrics_no_entities_is_zero_and_lengths_checked():
    assert entity_metrics([["O", "O"]], [["O", "O"]]) == {"precision": 0.0, "recall": 0.0, "f1": 0.0}
    with pytest.raises(ValueError, match="sequence 0"):
        entity_metrics([["O", "O"]], [["O"]])


def test_tagging_accuracy():
    y_true = [["NOUN", "VERB", "DET"], ["ADJ"]]
    y_pred = [["NOUN", "NOUN", "DET"], ["ADJ"]]
    assert tagging_accuracy(y_true, y_pred) == {"accuracy": 75.0}
    with pytest.raises(ValueError):
        tagging_accuracy(y_true, y_pred[:1])


def test_classification_metrics_hand_computed():
    y_true = ["pos", "pos", "neg", "neu"]
    y_pred = ["pos", "neg", "neg", "pos"]
    # accuracy 2/4. pos: P 1/2 R 1/2 F1 1/2; neg: P 1/2 R 1 F1 2/3; neu: F1 0 -> macro 7/18
    m = classification_metrics(y_true, y_pred)
    assert m["accuracy"] == pytest.approx(50.0)
    assert m["macro_f1"] == pytest.approx(100 * 7 / 18)


def test_classification_macro_f1_uses_predicted_only_labels_too():
    # labels = {a, b}: a: P 1 R 1/2 F1 2/3; b (never gold): F1 0 -> macro 1/3 (2/3 if b were ignored)
    m = classification_metrics(["a", "a"], ["a", "b"])
    assert m["accuracy"] == pytest.approx(50.0)
    assert m["macro_f1"] == pytest.approx(100 / 3)


def test_primary_metric_is_one_the_task_metric_returns():
    assert PRIMARY["extractive-qa"] in qa_metrics({}, [])
    assert PRIMARY["open-qa"] in qa_metrics({}, [])
    assert PRIMARY["ner"] in entity_metrics([["O"]], [["O"]])
    assert PRIMARY["pos"] in tagging_accuracy([["X"]], [["X"]])
    assert PRIMARY["classify"] in classification_metrics(["a"], ["a"])
