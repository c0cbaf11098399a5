"""Diagnostic: how much do SUREALM's retrieved entries say about the next token, in training and at test?

For every prediction w_{L+1} of a sentence (L = 1..N-1) and its K offline neighbours (query
w_1..w_L), counts how often the target token is
* the current word w_i of some neighbour (the word the default data store leaves out, and the
  first word of the suffix in the `--include-current-word` variant);
* anywhere in some neighbour's stored suffix (w_{i+1}..w_{i+m}, or w_i..w_{i+m-1} in an
  `--include-current-word` store);
and which share of the neighbours come from the sentence's own group (its conversation).
These are upper bounds on what the memory can pass on: the model sees each suffix only as one
pooled sentence embedding.

Per split (`--splits`, default train,test): a training sentence's neighbours are searched in the
training entries with only its own entries left out (the paper's rule), so they may come from the
same conversation, which a valid or test sentence's never do (splits are drawn per conversation).
The gap between the train and test rows is what the model learns to expect from memory and does
not get at test time. `--max-sentences N` reads N sentences of each split drawn with `--seed`.

Run: python -m benchmarks.surealm.surealm_neighbour_hits DATASTORE [--splits train,test] [--k 8]
Writes benchmarks/results/surealm_neighbour_hits.json: per split SPLIT_target_is_a_neighbour_current_word,
SPLIT_target_in_a_neighbour_suffix, SPLIT_neighbours_same_group and SPLIT_predictions; the test
split's first two also under their old names (target_is_a_neighbour_current_word, ...).
"""

from __future__ import annotations

import argparse

import numpy as np

from benchmarks.common import script_command, write_result

SPLITS = ("train", "valid", "test")


def split_hits(store, sids: np.ndarray, k: int, group_of: np.ndarray) -> dict[str, float]:
    """Hit rates over the predictions of sentences `sids` (see the module docstring)."""
    positions = word_hits = suffix_hits = same = slots = 0
    for s in sids:
        w = store.tokens(int(s))
        nbr = store.sentence_neighbors(int(s), k)  # row L-1: neighbours of w_1..w_L
        for L in range(1, len(w)):
            target = int(w[L])
            words, suffix = False, False
            for e in nbr[L - 1]:
                if e < 0:
                    continue
                word, stored = store.entry_tokens(int(e))
                words |= word == target
                suffix |= bool((stored == target).any())
                same += int(group_of[store.entry_sid[int(e)]] == group_of[int(s)])
                slots += 1
            positions += 1
            word_hits += words
            suffix_hits += suffix
    return {
        "predictions": positions,
        "target_is_a_neighbour_current_word": word_hits / max(positions, 1),
        "target_in_a_neighbour_suffix": suffix_hits / max(positions, 1),
        "neighbours_same_group": same / max(slots, 1),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("datastore")
    ap.add_argument("--splits", default="train,test", help="comma-separated, of train, valid, test")
    ap.add_argument("--k", type=int, default=8)
    ap.add_argument("--max-sentences", type=int, default=None, help="sentences read per split (default all)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--name", default="surealm_neighbour_hits", help="results/NAME.json")
    args = ap.parse_args()
    splits = [s.strip() for s in args.splits.split(",") if s.strip()]
    bad = [s for s in splits if s not in SPLITS]
    if bad or not splits:
        raise SystemExit(f"--splits {args.splits}: choose from {', '.join(SPLITS)}")

    from ralm.surealm.datastore import Datastore

    store = Datastore(args.datastore)
    if args.k > store.k:
        raise SystemExit(f"--k {args.k}: the store kept {store.k} neighbours per query")
    groups = store.sentences().column("group").to_numpy(zero_copy_only=False)
    _, group_of = np.unique(groups, return_inverse=True)
    metrics: dict[str, float] = {}
    rng = np.random.default_rng(args.seed)
    for split in splits:
        sids = store.require_split(split, "the diagnostic reads its sentences")
        if args.max_sentences is not None and len(sids) > args.max_sentences:
            sids = np.sort(rng.choice(sids, args.max_sentences, replace=False))
        r = split_hits(store, sids, args.k, group_of)
        print(
            f"{split}: {r['predictions']:,} predictions: target = a neighbour's current word "
            f"{r['target_is_a_neighbour_current_word']:.3f}, in a neighbour's suffix "
            f"{r['target_in_a_neighbour_suffix']:.3f}; neighbours from the same conversation "
            f"{r['neighbours_same_group']:.3f}"
        )
        metrics.update({f"{split}_{key}": float(v) for key, v in r.items()})
        if split == "test":
            metrics["predictions"] = float(r["predictions"])
            for key in ("target_is_a_neighbour_current_word", "target_in_a_neighbour_suffix"):
                metrics[key] = float(r[key])
    if "train" in splits and "test" in splits:
        metrics["train_minus_test_suffix_hits"] = (
            metrics["train_target_in_a_neighbour_suffix"] - metrics["test_target_in_a_neighbour_suffix"]
        )
    write_result(
        args.name,
        script_command(__file__),
        metrics,
        {"target_is_a_neighbour_current_word": "diagnostic, no bar"},
        settings={**vars(args), "m": store.m, "include_current_word": store.include_current_word},
    )


if __name__ == "__main__":
    main()
