"""Reference data for the retrieval tests: (title, text) documents; for retriever training, contexts,
questions and a SQuAD file of them."""

from __future__ import annotations

# Six one-article documents of the retrieval command tests (index building, search, faults, export).
DOCS = [
    ("Oslo", "Oslo is the capital of Norway. The city lies at the end of the Oslofjord."),
    ("Bergen", "Bergen is a city on the west coast of Norway. It rains a lot in Bergen."),
    ("Albedo", "Albedo is the fraction of sunlight that a surface reflects. Snow has a high albedo."),
    ("Lincoln", "Abraham Lincoln was the 16th president of the United States. He was born in 1809."),
    ("Aristotle", "Aristotle was a Greek philosopher. He was a student of Plato."),
    ("Alabama", "Alabama is a state in the southern United States. Its capital is Montgomery."),
]

# Five short "articles"; each splits into several chunks at chunk size 24. Every question's answer
# occurs once in its own context.
CONTEXTS = [
    "Oslo is the capital of Norway. The city lies at the end of the Oslofjord. "
    "The royal palace was finished in 1849. Many ships leave the harbour every day.",
    "Bergen is a city on the west coast. It rains on most days of the year there. "
    "The fish market opened in 1276 and still sells crabs. The old wharf is called Bryggen.",
    "Tromso lies north of the arctic circle. In winter the sun stays below the horizon. "
    "The cathedral is built of concrete and glass. Whales visit the fjords in January.",
    "Trondheim was the first capital of the country. The Nidaros cathedral stands there. "
    "Students make up a large share of the people. The river Nidelva runs through the centre.",
    "Stavanger is known for oil. The offshore industry began there in 1969. "
    "Preikestolen is a cliff close to the town. Tourists climb it in summer.",
]
QUESTIONS = [  # (question, answer, context index)
    ("when was the royal palace finished", "1849", 0),
    ("where does the city of oslo lie", "Oslofjord", 0),
    ("when did the fish market open", "1276", 1),
    ("what is the old wharf in bergen called", "Bryggen", 1),
    ("what is the tromso cathedral built of", "concrete and glass", 2),
    ("when do whales visit the fjords", "January", 2),
    ("which cathedral stands in trondheim", "Nidaros", 3),
    ("which river runs through trondheim", "Nidelva", 3),
    ("when did the offshore industry begin", "1969", 4),
    ("which cliff is close to stavanger", "Preikestolen", 4),
]


def squad_json(questions=QUESTIONS, contexts=CONTEXTS) -> dict:
    data = []
    for c, ctx in enumerate(contexts):
        qas = [
            {"id": f"q{i}", "question": q, "answers": [{"text": a, "answer_start": ctx.index(a)}]}
            for i, (q, a, ci) in enumerate(questions)
            if ci == c
        ]
        data.append({"title": "", "paragraphs": [{"context": ctx, "qas": qas}]})
    return {"version": "1.1", "data": data}
