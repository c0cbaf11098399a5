"""Diagnostic: how much do SUREALM's retrieved entries say about the next token?

For every prediction w_{L+1} of a held-out sentence (L = 1..N-1) and its K offline neighbours
(query w_1..w_L), counts how often the target token is
* the current word w_i of some neighbour (the word the default data store leaves out, and the
  first word of the suffix in the `--include-current-word` variant);
* anywhere in some neighbour's stored suffix (w_{i+1}..w_{i+m}, or w_i..w_{i+m-1} in an
  `--include-current-word` store).
These are upper bounds on what the memory can pass on: the model sees each suffix only as one
pooled sentence embedding.

Run: python benchmarks/surealm/surealm_neighbour_hits.py DATASTORE [--split test] [--k 8]
Writes benchmarks/results/surealm_neighbour_hits.json.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/
from common import script_command, write_result  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("datastore")
    ap.add_argument("--split", default="test", choices=["valid", "test"])
    ap.add_argument("--k", type=int, default=8)
    ap.add_argument("--name", default="surealm_neighbour_hits", help="results/NAME.json")
    args = ap.parse_args()

    from ralm.surealm.datastore import Datastore

    store = Datastore(args.datastore)
    if args.k > store.k:
        raise SystemExit(f"--k {args.k}: the store kept {store.k} neighbours per query")
    positions = word_hits = suffix_hits = 0
    for s in store.split_ids(args.split):
        w = store.tokens(int(s))
        nbr = store.sentence_neighbors(int(s), args.k)  # row L-1: neighbours of w_1..w_L
        for L in range(1, len(w)):
            target = int(w[L])
            words, suffix = False, False
            for e in nbr[L - 1]:
                word, stored = store.entry_tokens(int(e))
                words |= word == target
                suffix |= bool((stored == target).any())
            positions += 1
            word_hits += words
            suffix_hits += suffix
    rates = {"current_word": word_hits / positions, "suffix": suffix_hits / positions}
    print(f"{positions:,} predictions: target = a neighbour's current word {rates['current_word']:.3f}, "
          f"in a neighbour's suffix {rates['suffix']:.3f}")  # fmt: skip
    write_result(
        args.name,
        script_command(__file__),
        {
            "predictions": positions,
            "target_is_a_neighbour_current_word": rates["current_word"],
            "target_in_a_neighbour_suffix": rates["suffix"],
        },
        {"target_is_a_neighbour_current_word": "diagnostic, no bar"},
        settings={**vars(args), "m": store.m, "include_current_word": store.include_current_word},
    )


if __name__ == "__main__":
    main()
