"""`ralm world NAME --out DIR`: write a controlled world's files (see `ralm.worlds`).

    ralm world records --out runs/world/data            # REALM / BRENT: records, queries, gold
    ralm world dialogues --out runs/dworld/data         # SUREALM: dialogues and a world-sized LM

Each world prints the commands that build and train on it. The worlds are deterministic under
--seed; the defaults are the benchmarks' sizes.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from ralm.cli_flags import add_command_group, add_out, add_seed, dataclass_from_args
from ralm.errors import RalmError

RECORDS_NEXT = """next:
  for n in corpus queries heldout; do
    ralm corpus build {out}/$n.jsonl --out {root}/$n --chunk-size 64 --no-auto-annotate --no-dates
  done
  ralm pretrain configs/realm_world.toml --set docstore={root}/corpus --set queries={root}/queries --out {root}/run
  ralm evaluate-mlm {root}/run --gold {root}/heldout {out}/gold.jsonl --fresh-index"""

DIALOGUES_NEXT = """next:
  ralm surealm datastore {out}/dialogues.jsonl --lm {lm} --k 8 --out {root}/datastore
  ralm surealm train {root}/datastore --lm {lm} --steps 1000 --batch-size 32 --lr 1e-3 --memory-window 1 --out {root}/surealm
  ralm surealm train {root}/datastore --lm {lm} --steps 1000 --batch-size 32 --lr 1e-3 --no-retrieval --out {root}/no_retrieval
  ralm surealm evaluate {root}/surealm {root}/no_retrieval --split test"""


def register(sub: argparse._SubParsersAction) -> None:
    from dataclasses import fields

    from ralm.worlds.dialogues import DialogueWorldConfig

    w = add_command_group(
        sub,
        "world",
        "write a controlled world: a synthetic corpus in which one mechanism must work (records: REALM, "
        "BRENT; dialogues: SUREALM)",
        dest="world",
        metavar="WORLD",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    r = w.add_parser(
        "records",
        help="REALM / BRENT: one-fact documents about invented record codes, paraphrased queries whose "
        "invented value is the salient span, held-out records",
    )
    add_out(r, "directory to write corpus/queries/heldout/gold JSONL into", type=None)
    r.add_argument("--records", type=int, default=300, help="record codes (default 300: 1,200 documents)")
    r.add_argument("--heldout-records", type=int, default=60, help="records never trained on (default 60)")
    r.add_argument("--attributes", type=int, default=4, help="facts a record, 1-6 (default 4)")
    add_seed(r, "the world's seed (default 0)")
    r.add_argument(
        "--shuffle-values",
        action="store_true",
        help="the control world: the documents' values shuffled, so the reader's signal no longer points to "
        "the gold document",
    )
    r.set_defaults(func=cmd_records)
    d = w.add_parser(
        "dialogues",
        help="SUREALM: two-turn dialogues about invented keepers, objects and places; held-out "
        "conversations whose replies only the data store can complete",
    )
    add_out(d, "directory to write dialogues.jsonl, world.json and lm/ into", type=None)
    world = {f.name: f.default for f in fields(DialogueWorldConfig)}  # one default per setting
    for flag, setting, what in (
        ("--facts", "facts", "facts, one an invented keeper"),
        ("--places", "places", "invented places the facts draw from"),
        ("--conversations", "train_conversations", "training conversations a fact, 1-5"),
        ("--valid-facts", "valid_facts", "facts asked once more in valid"),
        ("--test-facts", "test_facts", "facts asked once more in test"),
    ):
        d.add_argument(flag, type=int, default=world[setting], help=f"{what} (default %(default)s)")
    add_seed(d, "the world's seed (default 0)")
    d.add_argument(
        "--hidden", type=int, default=128, help="hidden size of the world LM in OUT/lm (default 128)"
    )
    d.add_argument("--layers", type=int, default=2, help="layers of the world LM (default 2)")
    d.add_argument("--no-lm", action="store_true", help="write the dialogues only, no world LM")
    d.set_defaults(func=cmd_dialogues)


def out_dir(path: str) -> Path:
    """--out as a Path, refused when it names something other than a directory."""
    out = Path(path)
    if out.exists() and not out.is_dir():
        raise RalmError(f"{out}: exists and is not a directory; choose another --out")
    return out


def cmd_records(args: argparse.Namespace) -> int:
    from ralm.worlds.records import RecordsWorldConfig, write_records_world

    cfg = dataclass_from_args(RecordsWorldConfig, args, n_attributes=args.attributes)
    out = out_dir(args.out)
    world = write_records_world(out, cfg)
    print(
        f"records world: {len(world.documents)} documents, {len(world.queries)} training queries, "
        f"{len(world.heldout)} held-out queries ({cfg.heldout_records} records) -> {out}"
    )
    print(RECORDS_NEXT.format(out=out, root=out.parent))
    return 0


def cmd_dialogues(args: argparse.Namespace) -> int:
    from ralm.worlds.dialogues import DialogueWorldConfig, make_world, world_vocabulary, write_world

    cfg = dataclass_from_args(DialogueWorldConfig, args, train_conversations=args.conversations)
    out = out_dir(args.out)
    world = make_world(cfg)
    write_world(world, out)
    counts = {s: len(world.texts(s)) for s in ("train", "valid", "test")}
    print(
        f"dialogue world: {cfg.facts} facts, {counts['train']} training sentences, {counts['valid']} valid "
        f"and {counts['test']} test sentences -> {out}"
    )
    lm = "minilm"
    if not args.no_lm:
        from ralm.worlds.world_lm import write_world_lm

        lm = str(write_world_lm(out / "lm", world_vocabulary(), args.hidden, args.layers, seed=args.seed))
        print(f"world LM: BERT, {args.layers} layers of {args.hidden}, random weights -> {lm}")
    print(DIALOGUES_NEXT.format(out=out, root=out.parent, lm=lm))
    return 0
