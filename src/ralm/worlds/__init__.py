"""Controlled worlds: small synthetic corpora in which one mechanism of a seed paper must work.

Each world is generated from a seed in seconds and written in ralm's ordinary input formats, so it
runs through ralm's own commands as a user's data would. A world is built so that (i) a model can
only succeed by using the mechanism, (ii) the starting model does not already solve it and
(iii) the effect is large at a CPU budget. Its held-out items (identifiers, entities, questions)
never appear in its training data. The benchmarks in `benchmarks/worlds/` train on them and the
tests in `tests/worlds/` train tiny versions that fail when the effect is lost.

- `ralm.worlds.records`: REALM and BRENT: fact documents about invented record identifiers and
  queries that restate one fact with its value as the salient span.
- `ralm.worlds.dialogues`: SUREALM: replies predictable from similar turns elsewhere in the store.
- `ralm.worlds.entities`: LUKE: entity types that follow from an entity's identity only.

`ralm.worlds.words` makes the invented words they share.
"""
