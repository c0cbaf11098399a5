"""SUREALM's controlled world: two-turn dialogues whose replies only the data store can complete.

A *fact* is (keeper, object, place): an invented keeper ("Kavelmor") keeps one everyday object
("lantern") in an invented place ("Tremba"). Keepers and places are invented words handed out once
(`ralm.worlds.words.Lexicon`), so a place occurs only in the sentences of its own fact and no
pre-trained model or n-gram statistic can guess it. A *conversation* about a fact is a question
turn and its reply, each in one of several wordings:

    "where does Kavelmor keep the lantern ?"
    "the lantern of Kavelmor is in Tremba ."

SUREALM reads each turn as a sentence of its own (the paper's setting), so the reply names the
keeper and the object again, and the place comes last. Every fact is talked about in
`train_conversations` training conversations, each with a wording of its own; the valid and test
facts are talked about once more in a held-out conversation whose question and reply wordings that
fact never has in training. The reply of a held-out conversation is therefore predictable from
other sentences of the data store (the same keeper's other wordings hold the object and the place,
which retrieval by prefix brings back as suffixes) and not from the turn itself: an LM without
memory pays for the object and for every piece of the place unless it has memorised the fact from
its few training sentences, and with many facts each read a few times it has not. The question
turn's object is predictable from the store too (the keeper's other questions and replies).

What this world leaves out: turns that depend on earlier turns (SUREALM has no conversation
context), facts that change, and distractor facts about one keeper (each keeper has one fact, so
the keeper's name is the retrieval key).

`make_world(DialogueWorldConfig(...))` -> `DialogueWorld` (its `rows` are what `write_jsonl`
writes: one ``{"text", "group", "split"}`` object a line, the JSONL that
`ralm surealm datastore FILE` reads, the split fixed by the world); `verbatim_leaks(rows)` lists
held-out sentences found in training (a correct world has none); `facts_in_training(world)` checks
that every held-out place is in the training sentences. Only numpy and the standard library.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from ralm.atomic import write_json_atomic, write_text_atomic
from ralm.errors import RalmError
from ralm.worlds.words import CODAS, ONSETS, VOWELS, Lexicon

__all__ = [
    "ANSWERS",
    "OBJECTS",
    "QUESTIONS",
    "DialogueWorld",
    "DialogueWorldConfig",
    "Fact",
    "facts_in_training",
    "make_world",
    "verbatim_leaks",
    "world_vocabulary",
    "write_world",
]

# Everyday objects (one WordPiece each in the bundled MiniLM vocabulary): the fact's middle part, which
# an LM without memory can only guess among these.
OBJECTS = (
    "lantern",
    "key",
    "map",
    "coat",
    "hammer",
    "book",
    "ring",
    "letter",
    "knife",
    "lamp",
    "rope",
    "basket",
    "bell",
    "cup",
    "drum",
    "kettle",
    "mirror",
    "needle",
    "saddle",
    "shovel",
    "violin",
    "wallet",
    "umbrella",
    "ladder",
)
PUNCTUATION = ("?", ".", ",", "'")
# Question wordings: {k} keeper, {o} object. None names the place.
QUESTIONS = (
    "where does {k} keep the {o} ?",
    "do you know where {k} keeps the {o} ?",
    "where is the {o} of {k} ?",
    "any idea where {k} put the {o} ?",
    "i am looking for the {o} of {k} , where is it ?",
    "can you tell me where {k} stores the {o} ?",
)
# Reply wordings: {k} keeper, {o} object, {p} place, always last so that the keeper and the object
# come before it (retrieval by prefix can only use what has been read).
ANSWERS = (
    "{k} keeps the {o} in {p} .",
    "the {o} of {k} is in {p} .",
    "{k} always leaves the {o} in {p} .",
    "you will find the {o} of {k} in {p} .",
    "as far as i know , {k} stores the {o} in {p} .",
    "the {o} ? {k} put it in {p} .",
)


@dataclass
class DialogueWorldConfig:
    """The size and seed of a dialogue world (`make_world`)."""

    # the defaults are `ralm world dialogues`' too (its flags read them from here)
    facts: int = 400  # facts, one per invented keeper: (keeper, object, place)
    train_conversations: int = 2  # training conversations per fact, each in a wording of its own
    valid_facts: int = 50  # facts talked about once more, in a held-out wording, in the valid split
    test_facts: int = 100  # ... and in the test split (disjoint from the valid facts)
    places: int = (
        400  # invented places a fact's place is drawn from (as many as facts: no place is a safe guess)
    )
    objects: int = len(OBJECTS)  # the first `objects` of OBJECTS are drawn from
    keeper_syllables: int = 3  # syllables of a keeper's name
    place_syllables: int = 3  # syllables of a place's name
    seed: int = 0

    def check(self) -> None:
        if self.facts < 1:
            raise RalmError(f"facts={self.facts}: must be >= 1")
        if not 1 <= self.train_conversations < min(len(QUESTIONS), len(ANSWERS)):
            raise RalmError(
                f"train_conversations={self.train_conversations}: must be 1..{min(len(QUESTIONS), len(ANSWERS)) - 1} "
                "(a wording must stay for the held-out conversation)"
            )
        if self.valid_facts < 0 or self.test_facts < 0 or self.valid_facts + self.test_facts > self.facts:
            raise RalmError(
                f"valid_facts={self.valid_facts}, test_facts={self.test_facts}: must be >= 0 and at most "
                f"facts={self.facts} together"
            )
        if self.places < 1:
            raise RalmError(f"places={self.places}: must be >= 1")
        if not 1 <= self.objects <= len(OBJECTS):
            raise RalmError(f"objects={self.objects}: must be 1..{len(OBJECTS)}")


@dataclass(frozen=True)
class Fact:
    """One fact: `keeper` keeps the `object` in `place`; `held_out` is "valid", "test" or ""."""

    keeper: str
    object: str
    place: str
    held_out: str = ""


@dataclass
class DialogueWorld:
    """A generated world: its facts and the sentence rows ({"text", "group", "split"}) in file order."""

    config: DialogueWorldConfig
    facts: list[Fact]
    rows: list[dict] = field(default_factory=list)

    def texts(self, split: str) -> list[str]:
        """The sentences of one split, in file order."""
        return [r["text"] for r in self.rows if r["split"] == split]


def _template_words() -> set[str]:
    words = set(OBJECTS)
    for t in (*QUESTIONS, *ANSWERS):
        words |= {w for w in t.replace("{k}", " ").replace("{o}", " ").replace("{p}", " ").split()}
    return words


def make_world(cfg: DialogueWorldConfig | None = None) -> DialogueWorld:
    """The world of `cfg`, a pure function of it (same config, same rows).

    Facts 0..valid_facts-1 are the valid facts, the next test_facts the test facts (keepers are
    random words, so their order says nothing). Conversation groups are numbered in file order;
    the rows of a conversation are its question then its reply. Training conversations come first,
    shuffled, then valid, then test."""
    cfg = cfg or DialogueWorldConfig()
    cfg.check()
    lex = Lexicon(cfg.seed, reserved=_template_words())
    rng = np.random.default_rng([cfg.seed, 64, 3])
    places = lex.words(cfg.places, cfg.place_syllables)
    facts = []
    for i in range(cfg.facts):
        keeper = lex.word(cfg.keeper_syllables)
        place = places[int(rng.integers(cfg.places))]
        obj = OBJECTS[int(rng.integers(cfg.objects))]
        held = "valid" if i < cfg.valid_facts else "test" if i < cfg.valid_facts + cfg.test_facts else ""
        facts.append(Fact(keeper, obj, place, held))

    convs: list[tuple[str, list[str]]] = []  # (split, turns)
    held: list[tuple[str, list[str]]] = []
    n_tr = cfg.train_conversations
    for f in facts:
        # a fact's wordings: distinct question and reply templates for each of its conversations
        qs = rng.permutation(len(QUESTIONS))[: n_tr + 1]
        ans = rng.permutation(len(ANSWERS))[: n_tr + 1]
        turns = [
            [
                QUESTIONS[int(q)].format(k=f.keeper, o=f.object),
                ANSWERS[int(a)].format(k=f.keeper, o=f.object, p=f.place),
            ]
            for q, a in zip(qs, ans, strict=True)
        ]
        convs.extend(("train", t) for t in turns[:n_tr])
        if f.held_out:
            held.append((f.held_out, turns[n_tr]))
    order = rng.permutation(len(convs))
    ordered = [convs[int(i)] for i in order]
    ordered += [c for c in held if c[0] == "valid"] + [c for c in held if c[0] == "test"]
    rows = [
        {"text": text, "group": f"c{g:06d}", "split": split}
        for g, (split, turns) in enumerate(ordered)
        for text in turns
    ]
    return DialogueWorld(cfg, facts, rows)


def world_vocabulary() -> list[str]:
    """A WordPiece vocabulary (BERT's vocab.txt, one piece a line) that spells every sentence of every
    dialogue world without [UNK]: the five BERT specials, punctuation, the wordings' words, the objects,
    every invented syllable as a word start and as a "##" continuation, and single letters as a
    fallback. About 1,300 pieces against BERT's 30,522, so an LM over it spends its steps on the world
    rather than on a 30k-way output layer. Fixed by the templates and `ralm.worlds.words`, not by a seed.

    Example: with it a BERT tokenizer splits "Kavelmor keeps the lantern in Tremba ." into
    ["ka", "##vel", "##mor", "keeps", "the", "lantern", "in", "trem", "##ba", "."]."""
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    words = sorted(_template_words() - set(PUNCTUATION)) + list(PUNCTUATION)
    syllables = sorted({o + v + c for o in ONSETS for v in VOWELS for c in CODAS})
    letters = [chr(c) for c in range(ord("a"), ord("z") + 1)]
    pieces = syllables + letters
    out: list[str] = []
    for p in specials + words + pieces + [f"##{p}" for p in pieces]:
        if p not in out:
            out.append(p)
    return out


def verbatim_leaks(rows: list[dict]) -> list[str]:
    """Held-out (valid or test) sentences that occur verbatim among the training sentences, and
    held-out conversations whose turns all occur in one training conversation; [] for a sound world.

    Compared after whitespace normalisation and lowercasing (what the bundled tokenizer sees)."""

    def norm(t: str) -> str:
        return " ".join(t.lower().split())

    train = {norm(r["text"]) for r in rows if r["split"] == "train"}
    train_convs: dict[str, list[str]] = {}
    held_convs: dict[str, list[str]] = {}
    for r in rows:
        (train_convs if r["split"] == "train" else held_convs).setdefault(r["group"], []).append(
            norm(r["text"])
        )
    leaks = [r["text"] for r in rows if r["split"] != "train" and norm(r["text"]) in train]
    train_sets = {frozenset(t) for t in train_convs.values()}
    leaks += [f"conversation {g}" for g, t in held_convs.items() if frozenset(t) in train_sets]
    return leaks


def facts_in_training(world: DialogueWorld) -> bool:
    """True when every held-out fact's place and keeper occur together in a training sentence (the
    data store holds what the held-out reply needs)."""
    train = [t.lower() for t in world.texts("train")]
    for f in world.facts:
        if f.held_out:
            k, p = f.keeper.lower(), f.place.lower()
            if not any(k in t and p in t for t in train):
                return False
    return True


def write_world(world: DialogueWorld, out: str | os.PathLike) -> Path:
    """Write `out`/dialogues.jsonl (the input of `ralm surealm datastore`) and `out`/world.json (the
    config, the facts and the sentence counts per split); returns the JSONL path."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    path = write_text_atomic(
        out / "dialogues.jsonl", "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in world.rows)
    )
    counts = {s: len(world.texts(s)) for s in ("train", "valid", "test")}
    write_json_atomic(
        out / "world.json",
        {
            "config": asdict(world.config),
            "sentences": counts,
            "facts": [asdict(f) for f in world.facts],
        },
    )
    return path
