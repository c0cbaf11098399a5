"""The examples and datasets every downstream task works on (what the readers return).

One dataclass per task family; a `TaskData` holds a task's named splits ("train", "dev",
"test"), each a list of examples, plus where they came from. Readers live in
`ralm.tasks.datasets`; the task code (`extractive_qa`, `tagging`, `classification`, `openqa`)
only ever sees these types, so a user's own files in any supported format work the same way.
"""

from __future__ import annotations

from dataclasses import dataclass, field

TASKS = ("extractive-qa", "ner", "pos", "classify", "open-qa")
SPLITS = ("train", "dev", "test")


@dataclass
class QAExample:
    """Extractive QA (SQuAD v1.1): answer spans are character offsets into `context`.

    answers: gold answer texts (SQuAD dev/test may list several); answer_starts[i] is the
    character offset of answers[i] in `context` (``context[s:s+len(a)] == a``, checked by readers).
    """

    id: str
    question: str
    context: str
    answers: list[str]
    answer_starts: list[int]
    title: str = ""


@dataclass
class TaggingExample:
    """Token tagging (NER in IOB2, or UPOS): one label per whitespace word."""

    id: str
    tokens: list[str]
    labels: list[str]


@dataclass
class TextExample:
    """Sequence classification (sentiment): a text and its label as a string ("0", "Positive")."""

    id: str
    text: str
    label: str


@dataclass
class OpenQAExample:
    """Open-domain QA: a question and the answers that count as correct.

    regex: the answers are regular expressions (CuratedTREC), matched as DPR does
    (`ralm.retrieval.eval.evaluate.regex_hit`, `regex_em`), not normalised strings.
    """

    id: str
    question: str
    answers: list[str]
    regex: bool = False


Example = QAExample | TaggingExample | TextExample | OpenQAExample


@dataclass
class TaskData:
    """A task's splits as the readers found them.

    splits: "train"/"dev"/"test" -> examples (a split may be absent).
    sources: split -> the file(s) it was read from (for messages and results.json).
    format: the detected or given format name ("squad", "conllu", "conll", "tsv", "jsonl", ...).
    notes: what a reader did that a user should know (a dev split carved out of train, tokens
    dropped, answer offsets repaired), printed by the CLI and kept in results.json.
    """

    task: str
    format: str
    splits: dict[str, list] = field(default_factory=dict)
    sources: dict[str, list[str]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def labels(self) -> list[str]:
        """Sorted label set of the train split (tagging: every tag; classify: every class)."""
        out: set[str] = set()
        for ex in self.splits.get("train", []):
            if isinstance(ex, TaggingExample):
                out.update(ex.labels)
            elif isinstance(ex, TextExample):
                out.add(ex.label)
        return sorted(out)
