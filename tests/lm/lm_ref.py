"""Reference data of the n-gram LM tests: a toy corpus of six short sentences."""

from __future__ import annotations

TOY = [
    "the cat sat on the mat",
    "the dog sat on the log",
    "a cat saw a dog",
    "the cat ran",
    "a dog ran on the mat",
    "the mat",
]
