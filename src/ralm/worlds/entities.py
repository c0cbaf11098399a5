"""The LUKE world: entity types that follow from an entity's identity, never from its name or context.

Every entity is an invented name (`ralm.worlds.words.Lexicon`: one or two words of consonant-vowel
syllables), drawn the same way for people (PER), places (LOC) and organisations (ORG), so the
surface form says nothing about the type. The world has two parts:

- a pre-training corpus (`corpus.jsonl`, what `ralm corpus build` reads) of one-sentence documents,
  each a type-revealing fact about one entity ("Kavelmor was born in Tarvessa.", "Ludomar builds
  ships and trains."), titled by its name; every mention (the entity and the other entity a fact
  may name) is a link to the entity's title, so every entity enters the entity vocabulary of
  `ralm luke pretrain` with several mentions in the contexts of its type. A document mentions an
  entity once: a masked entity can be told only from its name and its context, never copied from
  another mention of itself in the same chunk (the shortcut a long article offers, which does
  not carry over to NER);
- NER files (`ner/{train,dev,test}.conll`, token<TAB>IOB2 tag, what `ralm luke ner` and
  `ralm finetune ner` read) of neutral sentences ("Kavelmor was mentioned in the report."), whose
  templates are the same for every type. The entities are split three ways: NER training sentences
  mention only "train" entities, dev sentences only "dev" ones, test sentences only "test" ones.

So a tagger can find the names (they are the invented words) but can type a test entity only by
knowing which entity it is and what pre-training said about it: the knowledge a LUKE model stores
in its entity embeddings, which reaches NER when the span is linked to its entity
(`ralm luke ner --link-entities`: every entity's name is its title in the entity vocabulary). With
LUKE's `[MASK]` span entities only what the encoder learned about the name's words is read. A
word-only tagger that never saw the corpus is at chance (one type in three) on test entities.

`generate(EntityWorldConfig(seed=0))` builds the world in memory (deterministic under its seed;
well under a second at the default size), `EntityWorld.write(dir)` writes the files above plus
`entities.tsv` (name, type, split, mentions in the corpus) and `world.json` (the config and counts),
and `held_out_leaks(dir)` checks the written files: no dev or test entity name in the NER training
file, and every entity linked in the corpus.

Left out: nested or overlapping names, names shared by two entities (no ambiguity to resolve),
and types that a name's context in the NER sentences could reveal (there is none by design).
"""

from __future__ import annotations

import json
import os
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from ralm.atomic import staged_dir
from ralm.errors import RalmError
from ralm.worlds.words import Lexicon

__all__ = [
    "FACTS",
    "MENTIONS",
    "NEUTRAL",
    "TYPES",
    "Entity",
    "EntityWorld",
    "EntityWorldConfig",
    "generate",
    "held_out_leaks",
    "read_conll",
    "read_entities",
]

TYPES = ("PER", "LOC", "ORG")
SPLITS = ("train", "dev", "test")

# Type-revealing sentences of the pre-training corpus. {X} is the article's entity; {PER}, {LOC} and
# {ORG} are other entities of that type (linked too). Each type has the same number of templates.
FACTS: dict[str, tuple[str, ...]] = {
    "PER": (
        "{X} was born in {LOC} and grew up on a farm.",
        "{X} works as an engineer at {ORG}.",
        "{X} is a singer who wrote many songs about her childhood.",
        "{X} married a teacher from {LOC} when he was young.",
        "As a child, {X} played the violin every evening.",
        "{X} studied medicine and became a famous doctor.",
        "{X} founded {ORG} together with an old friend.",
        "{X} died at the age of eighty in {LOC}.",
    ),
    "LOC": (
        "{X} is a small town on the coast, not far from {LOC}.",
        "About ten thousand people live in {X}.",
        "The river flows through {X} before it reaches the sea.",
        "{ORG} has its headquarters in {X}.",
        "{PER} was born in {X} and left it at eighteen.",
        "{X} is surrounded by mountains and green valleys.",
        "In winter the lake near {X} freezes over.",
        "{X} is the capital of its province and has a busy harbour.",
    ),
    "ORG": (
        "{X} is a company that builds ships and trains.",
        "{X} was founded by {PER} many years ago.",
        "{X} has its headquarters in {LOC}.",
        "{X} employs four thousand workers in its factories.",
        "{PER} works as a manager at {X}.",
        "The shares of {X} rose after the annual meeting of its board.",
        "{X} sells its products in many countries.",
        "{X} opened a new office in {LOC} last year.",
    ),
}

# What a type-revealing sentence calls an entity when it does not name it ("The company builds ships
# and trains."): a linked mention whose words and context tell the type, never which entity it is.
DESCRIPTIONS: dict[str, str] = {"PER": "The doctor", "LOC": "The town", "ORG": "The company"}

# Neutral pre-training sentences (other words than the NER ones): a mention whose context says nothing
# of the type, so a masked entity there is told by its name alone.
MENTIONS: tuple[str, ...] = (
    "There was a short note about {X} in yesterday's paper.",
    "I have heard the name {X} before.",
    "The old book has a chapter on {X}.",
    "Many people still remember {X}.",
    "My neighbour often talks about {X}.",
    "The radio had a story about {X} tonight.",
)

# Neutral NER sentences: nothing in them depends on the type. {X} (and {Y}) are entities.
NEUTRAL: tuple[str, ...] = (
    "{X} was mentioned in the report .",
    "We read about {X} in the newspaper .",
    "Nobody had heard of {X} before that day .",
    "The letter was about {X} .",
    "{X} appeared in the news again .",
    "Everyone was talking about {X} this morning .",
    "The article says a lot about {X} .",
    "She asked me what I knew about {X} .",
    "{X} and {Y} were mentioned in the report .",
    "The letter was about {X} and {Y} .",
    "We read about {X} and {Y} in the newspaper .",
    "Nobody had heard of {X} or {Y} before .",
)


@dataclass(frozen=True)
class EntityWorldConfig:
    """The size and shape of a LUKE world (see the module docstring); `seed` fixes everything else."""

    seed: int = 0
    entities_per_type: int = 80  # each of PER, LOC, ORG
    dev_share: float = 0.15  # of each type's entities, held out for the NER dev split
    test_share: float = 0.35  # of each type's entities, held out for the NER test split
    two_word_share: float = 0.2  # names of two invented words ("Kavel Mortan"), for every type alike
    syllables: tuple[int, ...] = (2, 3)  # syllables of a name word, drawn uniformly for every type
    facts_per_entity: int = 6  # documents (type-revealing sentences) about each entity
    mentions_per_entity: int = 0  # documents that only mention the entity (neutral MENTIONS sentences)
    described_per_entity: int = 0  # FACTS documents that call the entity by its DESCRIPTIONS phrase
    ner_train_sentences: int = 600
    ner_dev_sentences: int = 150
    ner_test_sentences: int = 300

    def __post_init__(self) -> None:
        checks = [
            (self.entities_per_type >= 3, "entities_per_type must be >= 3 (one per split)"),
            (self.dev_share > 0 and self.test_share > 0, "dev_share and test_share must be > 0"),
            (self.dev_share + self.test_share < 1, "dev_share + test_share must leave training entities"),
            (0 <= self.two_word_share <= 1, "two_word_share must be in [0, 1]"),
            (bool(self.syllables) and min(self.syllables) >= 1, "syllables: give counts >= 1"),
            (
                1 <= self.facts_per_entity <= len(FACTS["PER"]),
                f"facts_per_entity must be 1..{len(FACTS['PER'])}",
            ),
            (
                min(self.ner_train_sentences, self.ner_dev_sentences, self.ner_test_sentences) >= 1,
                "every NER split needs at least one sentence",
            ),
        ]
        for ok, msg in checks:
            if not ok:
                raise RalmError(f"EntityWorldConfig: {msg}")


@dataclass(frozen=True)
class Entity:
    """One entity: its name (also its article title and link target), type and NER split."""

    name: str
    type: str  # PER | LOC | ORG
    split: str  # train | dev | test: which NER split may mention it


Sentence = list[tuple[str, str]]  # (word, IOB2 tag) per word


@dataclass
class EntityWorld:
    """A generated world: the entities, the corpus records and the NER sentences per split."""

    config: EntityWorldConfig
    entities: list[Entity]
    articles: list[dict]  # {"id", "title", "text", "links": [{"start", "end", "target"}]}
    ner: dict[str, list[Sentence]] = field(default_factory=dict)

    def mentions(self) -> Counter:
        """Entity name -> linked mentions in the corpus."""
        return Counter(link["target"] for a in self.articles for link in a["links"])

    def write(self, out: str | os.PathLike) -> Path:
        """Write the world into `out` (replaced whole, atomically): corpus.jsonl, ner/{train,dev,test}.conll,
        entities.tsv and world.json. Returns `out`."""
        out = Path(out)
        counts = self.mentions()
        with staged_dir(out) as tmp:
            with open(tmp / "corpus.jsonl", "w", encoding="utf-8", newline="\n") as f:
                for a in self.articles:
                    f.write(json.dumps(a, ensure_ascii=False) + "\n")
            (tmp / "ner").mkdir()
            for split, sents in self.ner.items():
                text = "\n".join("".join(f"{w}\t{t}\n" for w, t in s) for s in sents)
                (tmp / "ner" / f"{split}.conll").write_text(text, encoding="utf-8")
            rows = ["name\ttype\tsplit\tmentions"]
            rows += [f"{e.name}\t{e.type}\t{e.split}\t{counts[e.name]}" for e in self.entities]
            (tmp / "entities.tsv").write_text("\n".join(rows) + "\n", encoding="utf-8")
            summary = {
                "config": asdict(self.config),
                "entities": {s: sum(e.split == s for e in self.entities) for s in SPLITS},
                "articles": len(self.articles),
                "links": sum(counts.values()),
                "min_mentions": min(counts[e.name] for e in self.entities),
                "ner_sentences": {s: len(v) for s, v in self.ner.items()},
            }
            (tmp / "world.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
        return out


def _template_words() -> set[str]:
    """Every word of the templates, so no invented name coincides with one."""
    text = " ".join([*NEUTRAL, *MENTIONS, *(t for ts in FACTS.values() for t in ts)])
    for slot in ("{X}", "{Y}", "{PER}", "{LOC}", "{ORG}"):
        text = text.replace(slot, " ")
    return {w.strip(".,").lower() for w in text.split() if w.strip(".,")}


def _fill(template: str, values: dict[str, tuple[str, str]]) -> tuple[str, list[dict]]:
    """Fill a template's {SLOT}s with (words, link target) pairs; returns the text and a link
    {start, end, target} per filled slot.

    Example: _fill("{X} was born in {LOC}.", {"X": ("Kavelmor", "Kavelmor"), "LOC": ("Tarvo", "Tarvo")})
    -> ("Kavelmor was born in Tarvo.", [{"start": 0, "end": 8, ...}, {"start": 21, "end": 26, ...}]).
    """
    text, links, rest = "", [], template
    while "{" in rest:
        head, _, tail = rest.partition("{")
        slot, _, rest = tail.partition("}")
        text += head
        words, target = values[slot]
        links.append({"start": len(text), "end": len(text) + len(words), "target": target})
        text += words
    return text + rest, links


def _fact(
    rng: np.random.Generator,
    e: Entity,
    template: str,
    by_type: dict[str, list[Entity]],
    words: str | None = None,
) -> dict:
    """A one-sentence document about `e`: `template` with X = `e` (called `words`, default its name) and
    each other slot a random other entity of that type, every mention linked."""
    values = {"X": (words or e.name, e.name)}
    for typ in TYPES:
        if "{" + typ + "}" in template:
            others = [o for o in by_type[typ] if o is not e]
            o = others[int(rng.integers(len(others)))]
            values[typ] = (o.name, o.name)
    text, links = _fill(template, values)
    return {"title": e.name, "text": text, "links": links}


def generate(config: EntityWorldConfig | None = None) -> EntityWorld:
    """The world of `config` (default `EntityWorldConfig()`), the same for the same config.

    Names come from one `Lexicon` for all types; types are assigned to names by a seeded shuffle,
    and each type's entities are split into train/dev/test by `dev_share`/`test_share`.
    """
    cfg = config or EntityWorldConfig()
    rng = np.random.default_rng([cfg.seed, 64, 4])
    lex = Lexicon(cfg.seed, reserved=_template_words())
    n = cfg.entities_per_type * len(TYPES)
    names = []
    for _ in range(n):
        k = 2 if rng.random() < cfg.two_word_share else 1
        names.append(" ".join(lex.word(int(rng.choice(cfg.syllables))) for _ in range(k)))
    order = rng.permutation(n)
    n_dev = max(1, round(cfg.dev_share * cfg.entities_per_type))
    n_test = max(1, round(cfg.test_share * cfg.entities_per_type))
    if n_dev + n_test >= cfg.entities_per_type:
        raise RalmError(
            f"EntityWorldConfig: {cfg.entities_per_type} entities per type leave none for training"
        )
    entities = []
    for t, typ in enumerate(TYPES):
        for i in range(cfg.entities_per_type):
            split = "dev" if i < n_dev else "test" if i < n_dev + n_test else "train"
            entities.append(Entity(names[int(order[t * cfg.entities_per_type + i])], typ, split))
    by_type = {typ: [e for e in entities if e.type == typ] for typ in TYPES}

    articles = []
    for i in rng.permutation(len(entities)):
        e = entities[int(i)]
        facts = FACTS[e.type]
        for f in rng.choice(len(facts), size=cfg.facts_per_entity, replace=False).tolist():
            articles.append(_fact(rng, e, facts[f], by_type))
        for f in rng.choice(len(facts), size=cfg.described_per_entity, replace=False).tolist():
            described = DESCRIPTIONS[e.type] if facts[f].startswith("{X}") else DESCRIPTIONS[e.type].lower()
            articles.append(_fact(rng, e, facts[f], by_type, described))
        for f in rng.choice(len(MENTIONS), size=cfg.mentions_per_entity, replace=False).tolist():
            articles.append(_fact(rng, e, MENTIONS[f], by_type))
    articles = [{"id": f"w{k}", **articles[int(i)]} for k, i in enumerate(rng.permutation(len(articles)))]

    sizes = {"train": cfg.ner_train_sentences, "dev": cfg.ner_dev_sentences, "test": cfg.ner_test_sentences}
    ner = {
        split: _ner_split(rng, [e for e in entities if e.split == split], sizes[split]) for split in SPLITS
    }
    return EntityWorld(cfg, entities, articles, ner)


def _ner_split(rng: np.random.Generator, pool: list[Entity], n: int) -> list[Sentence]:
    """`n` neutral sentences over the entities of `pool`, each entity cycled through in a seeded order
    so that every one is mentioned about equally often."""
    queue: list[Entity] = []

    def take() -> Entity:
        if not queue:
            queue.extend(pool[int(i)] for i in rng.permutation(len(pool)))
        return queue.pop()

    out = []
    for _ in range(n):
        template = NEUTRAL[int(rng.integers(len(NEUTRAL)))]
        x = take()
        y = take() if "{Y}" in template else None
        while y is not None and y.name == x.name and len(pool) > 1:
            y = take()
        sent: Sentence = []
        for tok in template.split():
            e = x if tok == "{X}" else y if tok == "{Y}" else None
            if e is None:
                sent.append((tok, "O"))
                continue
            for j, w in enumerate(e.name.split()):
                sent.append((w, f"{'B' if j == 0 else 'I'}-{e.type}"))
        out.append(sent)
    return out


# ----------------------------------------------------------------------------- checking written files


def read_conll(path: str | os.PathLike) -> list[Sentence]:
    """The sentences of a token<TAB>tag file (blank lines between sentences)."""
    sents: list[Sentence] = [[]]
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        if line.strip():
            w, t = line.split("\t")
            sents[-1].append((w, t))
        elif sents[-1]:
            sents.append([])
    return [s for s in sents if s]


def read_entities(world_dir: str | os.PathLike) -> list[Entity]:
    """The entities of a written world (its entities.tsv)."""
    rows = Path(world_dir, "entities.tsv").read_text(encoding="utf-8").splitlines()[1:]
    return [Entity(*r.split("\t")[:3]) for r in rows if r]


def held_out_leaks(world_dir: str | os.PathLike) -> list[str]:
    """What breaks the world's promise in its written files; [] when it holds.

    Checked: no word of a dev or test entity's name occurs in ner/train.conll, no word of a test
    entity in ner/dev.conll, every entity has at least one link in corpus.jsonl (so it is in the
    entity vocabulary of pre-training), and every entity tagged in an NER split belongs to it.
    Example: ["test entity 'Kavelmor' occurs in ner/train.conll line-sentence 12"].
    """
    d = Path(world_dir)
    entities = read_entities(d)
    problems = []
    words_of = {s: {w.lower() for e in entities if e.split == s for w in e.name.split()} for s in SPLITS}
    split_of = {e.name: e.split for e in entities}
    for split, forbidden in (("train", ("dev", "test")), ("dev", ("test",))):
        for i, sent in enumerate(read_conll(d / "ner" / f"{split}.conll")):
            for w, _ in sent:
                for other in forbidden:
                    if w.lower() in words_of[other]:
                        problems.append(f"{other} entity word {w!r} occurs in ner/{split}.conll sentence {i}")
    for split in SPLITS:
        for i, sent in enumerate(read_conll(d / "ner" / f"{split}.conll")):
            for name in _tagged_names(sent):
                if split_of.get(name) != split:
                    problems.append(f"ner/{split}.conll sentence {i} tags {name!r}, not a {split} entity")
    linked = Counter()
    with open(d / "corpus.jsonl", encoding="utf-8") as f:
        for line in f:
            for link in json.loads(line)["links"]:
                linked[link["target"]] += 1
    problems += [f"entity {e.name!r} has no link in corpus.jsonl" for e in entities if not linked[e.name]]
    return problems


def _tagged_names(sent: Sentence) -> list[str]:
    """The names an IOB2 sentence tags: [("Kavel", "B-PER"), ("Mor", "I-PER"), ("ran", "O")] -> ["Kavel Mor"]."""
    names: list[list[str]] = []
    for w, t in sent:
        if t.startswith("B-"):
            names.append([w])
        elif t.startswith("I-") and names:
            names[-1].append(w)
    return [" ".join(n) for n in names]
