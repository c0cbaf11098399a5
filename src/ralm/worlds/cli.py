"""`ralm world NAME --out DIR`: write a controlled world's files (see `ralm.worlds`).

    ralm world records --out runs/world/data            # REALM / BRENT: records, queries, gold

Each world prints the commands that build and train on it. The worlds are deterministic under
--seed; the defaults are the benchmarks' sizes.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from ralm.errors import RalmError

RECORDS_NEXT = """next:
  for n in corpus queries heldout; do
    ralm corpus build {out}/$n.jsonl --out {root}/$n --chunk-size 64 --no-auto-annotate --no-dates
  done
  ralm pretrain configs/realm_world.toml --set docstore={root}/corpus --set queries={root}/queries --out {root}/run
  ralm evaluate-mlm {root}/run --gold {root}/heldout {out}/gold.jsonl --fresh-index"""


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "world",
        help="write a controlled world: a synthetic corpus in which one mechanism must work (records: REALM, BRENT)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    w = p.add_subparsers(dest="world", metavar="WORLD")
    r = w.add_parser(
        "records",
        help="REALM / BRENT: one-fact documents about invented record codes, paraphrased queries whose "
        "invented value is the salient span, held-out records",
    )
    r.add_argument("--out", required=True, help="directory to write corpus/queries/heldout/gold JSONL into")
    r.add_argument("--records", type=int, default=300, help="record codes (default 300: 1,200 documents)")
    r.add_argument("--heldout-records", type=int, default=60, help="records never trained on (default 60)")
    r.add_argument("--attributes", type=int, default=4, help="facts a record, 1-6 (default 4)")
    r.add_argument("--seed", type=int, default=0, help="the world's seed (default 0)")
    r.add_argument(
        "--shuffle-values",
        action="store_true",
        help="the control world: the documents' values shuffled, so the reader's signal no longer points to "
        "the gold document",
    )
    r.set_defaults(func=cmd_records)
    p.set_defaults(func=lambda args: p.print_help() or 2)


def cmd_records(args: argparse.Namespace) -> int:
    from ralm.worlds.records import RecordsWorldConfig, write_records_world

    cfg = RecordsWorldConfig(
        records=args.records,
        heldout_records=args.heldout_records,
        n_attributes=args.attributes,
        seed=args.seed,
        shuffle_values=args.shuffle_values,
    )
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise RalmError(f"{out}: exists and is not a directory; choose another --out")
    world = write_records_world(out, cfg)
    print(
        f"records world: {len(world.documents)} documents, {len(world.queries)} training queries, "
        f"{len(world.heldout)} held-out queries ({cfg.heldout_records} records) -> {out}"
    )
    print(RECORDS_NEXT.format(out=out, root=out.parent))
    return 0
