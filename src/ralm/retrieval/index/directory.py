"""The files of a retrieval index directory: its state, its checksums, `ralm index verify`.

No torch here (the CLI's `index verify` and argument checks import only this). The layout
(see ralm.retrieval.searchers):

    INDEX/
      retrieval.json       written last; `files`: size + XXH3-128 of every file under encoder/
                           (weights, config, tokenizer) and of the sub-manifests below; `links`:
                           the encoder's `doc -> query` symlink, when the towers are one copy
      build.json           what the build was asked for (encoder source and options): an
                           unfinished build resumes only when asked for the same
      encoder/             the DualEncoder
      embeddings.npy       + embeddings.meta.json (its size + digest in `files`)
      dense/               index.faiss + index.json (its size + digest in `files`), or shards.json
                           (in `files`) naming shard-*-of-*/ directories and their files' digests
      bm25/                bm25s's files + bm25.json (their sizes + digests in `files`)

So retrieval.json vouches for the manifests and the encoder, and each manifest for its big
files: `verify_index_dir` follows that chain and re-hashes everything (ralm.integrity), which
loading does only for what it reads (index.faiss, the BM25 files, the encoder files: see
DenseIndex.load, BM25Searcher.load, ralm.retrieval.searchers.open_searcher).
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ralm.atomic import replace_dir, write_json_atomic
from ralm.errors import RalmError
from ralm.integrity import DIGEST, check_digests, records

if TYPE_CHECKING:
    from ralm.corpus.docstore import DocStore

MANIFEST = "retrieval.json"
BUILD_FILE = "build.json"
INDEX_DIR_FORMAT = "ralm-retrieval-index"
INDEX_DIR_VERSION = 1
ENCODER_DIR = "encoder"
EMBEDDINGS = "embeddings.npy"
EMBEDDINGS_META = "embeddings.meta.json"
OVERWRITE_HINT = "rebuild it with `ralm index build ... --overwrite`"
FLAGS = {  # EncoderConfig field -> the `ralm index build` option that sets it
    "pooling": "--pooling",
    "proj_dim": "--proj-dim",
    "scale_by_sqrt_dim": "--scale",
    "shared": "--shared",
    "max_length": "--max-length",
    "bidirectional": "--bidirectional",
    "query_instruction": "--query-instruction",
}


def dir_state(out: Path) -> str:
    """ "absent", "empty", "finished" (retrieval.json), "unfinished" (encoder/ but no retrieval.json)
    or "foreign" (a directory with other things in it)."""
    if not out.exists():
        return "absent"
    if not out.is_dir():
        return "foreign"
    if (out / MANIFEST).exists():
        return "finished"
    if (out / ENCODER_DIR).exists() or (out / BUILD_FILE).exists():
        return "unfinished"
    return "empty" if not any(out.iterdir()) else "foreign"


# ----------------------------------------------------------------------------- the build request
def encoder_request(encoder: str | os.PathLike | None, config: Any | None) -> dict[str, Any]:
    """What `index build` is asked to embed with: {"encoder": source dir or None (the bundled
    MiniLM), "config": the EncoderConfig fields it will have}. A saved ralm encoder given without
    a config keeps its own."""
    from ralm.models.names import DEFAULT_BACKBONE, NAMED_LMS

    source = None
    if encoder is not None and str(encoder) in NAMED_LMS:
        source = str(encoder)  # gemma3 / smollm2: a package's GGUF, not a path
    elif encoder is not None and str(encoder) != DEFAULT_BACKBONE:
        source = str(Path(encoder).expanduser().resolve())
    if config is not None:
        cfg = asdict(config)
    else:
        cfg = None
        saved = Path(source) / "ralm_encoder.json" if source else None
        if saved is not None and saved.is_file():
            try:
                cfg = json.loads(saved.read_text(encoding="utf-8"))["config"]
            except (OSError, ValueError, KeyError, TypeError):
                cfg = None
        if cfg is None:
            from ralm.retrieval.encoders import EncoderConfig

            cfg = asdict(EncoderConfig())
    return {"encoder": source, "config": cfg}


def request_differences(out: Path, request: dict[str, Any]) -> list[str]:
    """How `request` differs from what the unfinished build in `out` was made with, as
    "--pooling mean, asked cls"; [] when it may be resumed."""
    diffs = []
    build = _read_json(out / BUILD_FILE)
    if build is not None and build.get("encoder") != request["encoder"]:
        had, asked = (x or "the bundled MiniLM" for x in (build.get("encoder"), request["encoder"]))
        diffs.append(f"--encoder {had}, asked {asked}")
    enc = _read_json(out / ENCODER_DIR / "ralm_encoder.json")
    saved = (enc or {}).get("config") or (build or {}).get("config")
    if isinstance(saved, dict):
        for name, asked in request["config"].items():
            if name in saved and saved[name] != asked:
                diffs.append(f"{FLAGS.get(name, name)} {_show(saved[name])}, asked {_show(asked)}")
    return diffs


def _show(v: Any) -> str:
    return "none" if v is None else str(v).lower() if isinstance(v, bool) else str(v)


def write_build_file(out: Path, request: dict[str, Any]) -> None:
    write_json_atomic(out / BUILD_FILE, request)


# ----------------------------------------------------------------------------- recording
def encoder_files(out: Path) -> tuple[list[str], dict[str, str]]:
    """Files under out/encoder/ (relative to out, posix) and its symlinks (path -> target): the
    `doc -> query` link is recorded as a link, its files are those of query/."""
    files, links = [], {}
    for dirpath, dirnames, filenames in os.walk(out / ENCODER_DIR):
        for name in sorted(dirnames + filenames):
            p = Path(dirpath) / name
            rel = p.relative_to(out).as_posix()
            if p.is_symlink():
                links[rel] = os.readlink(p)
            elif p.is_file():
                files.append(rel)
        dirnames.sort()
    return sorted(files), links


def index_records(out: Path, bm25: bool) -> dict[str, Any]:
    """`files` and `links` for retrieval.json: the encoder's files and the sub-manifests, hashed."""
    files, links = encoder_files(out)
    dense = "dense/shards.json" if (out / "dense/shards.json").is_file() else "dense/index.json"
    names = [*files, BUILD_FILE, EMBEDDINGS_META, dense] + (["bm25/bm25.json"] if bm25 else [])
    return {"files": records(out, [n for n in names if (out / n).is_file()]), "links": links}


def check_encoder_files(path: Path, manifest: dict[str, Any]) -> None:
    """RalmError naming the first encoder file that differs from its record (search loads these)."""
    recorded = {k: v for k, v in (manifest.get("files") or {}).items() if k.startswith(ENCODER_DIR + "/")}
    problems = check_digests(path, recorded)
    if problems:
        raise RalmError(
            f"{problems[0]}; check the whole index with `ralm index verify {path}`, then rebuild it "
            "(`ralm index build ... --overwrite`)"
        )


def read_index_dir(
    path: str | os.PathLike, store: str | os.PathLike | None = None
) -> tuple[DocStore, dict[str, Any]]:
    """(DocStore, manifest) of a finished index directory: the DocStore it was built from (or
    `store`, when it moved), checked against the fingerprint recorded in retrieval.json.

    What the directory is, without opening anything for search (that is `ralm.Retriever`). One-line
    RalmError for a missing directory, an unfinished build, a foreign folder or another corpus."""
    from ralm.corpus.docstore import DocStore
    from ralm.retrieval.index.io import read_manifest

    path = Path(path)
    if not path.is_dir():
        raise RalmError(f"{path}: no such index directory; build one with `ralm index build`")
    mpath = path / MANIFEST
    if not mpath.is_file():
        if (path / ENCODER_DIR).exists():
            raise RalmError(
                f"{path}: unfinished index build; rerun `ralm index build` with the same options (it resumes)"
            )
        raise RalmError(f"{path}: not a ralm index (no {MANIFEST}); build one with `ralm index build`")
    manifest = read_manifest(mpath, INDEX_DIR_FORMAT, INDEX_DIR_VERSION, "retrieval index")
    ds = DocStore(store if store is not None else manifest["docstore"])
    if ds.fingerprint != manifest["docstore_fingerprint"]:
        raise RalmError(
            f"{path}: built from another corpus than {ds.root} (fingerprint {manifest['docstore_fingerprint'][:12]} "
            f"vs {ds.fingerprint[:12]}); rebuild it with `ralm index build`"
        )
    return ds, manifest


# ----------------------------------------------------------------------------- verify
@dataclass
class Report:
    """What `verify_index_dir` found: problems (one line each), files checked, unchecked parts."""

    problems: list[str] = field(default_factory=list)
    checked: int = 0
    unrecorded: list[str] = field(default_factory=list)

    def line(self, path: Path) -> str:
        text = f"ok: {path}: {self.checked} files match their recorded sizes and checksums"
        if self.unrecorded:
            text += f"; built by an older ralm: no checksums recorded for {', '.join(self.unrecorded)}"
        return text


def verify_index_dir(path: str | os.PathLike) -> Report:
    """Check every file of a finished index directory against its recorded size and XXH3-128.

    RalmError when `path` is not a finished index (missing, unfinished, unreadable retrieval.json);
    otherwise a Report whose problems are '<file>: missing', '<file>: N bytes, expected M',
    '<file>: contents changed (checksum mismatch)' or a symlink pointing elsewhere.
    """
    from ralm.retrieval.bm25 import FORMAT as BM25_FORMAT
    from ralm.retrieval.bm25 import FORMAT_VERSION as BM25_VERSION
    from ralm.retrieval.bm25 import MANIFEST_FILE as BM25_MANIFEST
    from ralm.retrieval.bm25 import recorded_files as bm25_files
    from ralm.retrieval.index.io import read_manifest, recorded_files, verify_index_files

    path = Path(path)
    state = dir_state(path)
    if state == "absent" or not path.is_dir():
        raise RalmError(f"{path}: no such index directory; build one with `ralm index build`")
    if state == "unfinished":
        raise RalmError(
            f"{path}: unfinished index build (no {MANIFEST}); rerun `ralm index build` with the same "
            "options to resume it"
        )
    if state != "finished":
        raise RalmError(f"{path}: not a ralm index (no {MANIFEST}); build one with `ralm index build`")
    manifest = read_manifest(path / MANIFEST, INDEX_DIR_FORMAT, INDEX_DIR_VERSION, "retrieval index")
    rep = Report()

    def check(root: Path, recorded: dict[str, dict[str, Any]]) -> None:
        rep.problems.extend(check_digests(root, recorded))
        rep.checked += len(recorded)

    files = manifest.get("files")
    if isinstance(files, dict):
        check(path, {k: v for k, v in files.items() if k.startswith(ENCODER_DIR + "/")})
        for rel, target in (manifest.get("links") or {}).items():
            p = path / rel
            if not p.is_symlink() and p.is_dir():  # copied with the link followed (cp -rL, copytree)
                src = (Path(rel).parent / target).as_posix()
                check(
                    path,
                    {f"{rel}/{k[len(src) + 1 :]}": v for k, v in files.items() if k.startswith(src + "/")},
                )
            elif not p.is_symlink():
                rep.problems.append(f"{p}: missing (a symlink to {target})")
            elif os.readlink(p) != target:
                rep.problems.append(f"{p}: a symlink to {os.readlink(p)}, expected one to {target}")
        check(path, {k: v for k, v in files.items() if not k.startswith(ENCODER_DIR + "/")})
    else:
        rep.unrecorded.append(f"{ENCODER_DIR}/ and the manifests")
    # embeddings: the record in their metadata
    meta = _read_json(path / EMBEDDINGS_META)
    emb = (meta or {}).get("files", {}).get(EMBEDDINGS) if isinstance(meta, dict) else None
    if isinstance(emb, dict):
        check(path, {EMBEDDINGS: emb})
    elif meta is None:
        rep.problems.append(f"{path / EMBEDDINGS_META}: missing or unreadable")
    else:
        rep.unrecorded.append(EMBEDDINGS)
        rep.problems.extend(check_digests(path, {EMBEDDINGS: {}}))  # there, at least
    # dense/: index.faiss against index.json, or every shard's files against shards.json
    dense = path / "dense"
    if (dense / "shards.json").is_file():
        from ralm.retrieval.index.sharded import verify_sharded

        problems, n = verify_sharded(dense)
        rep.problems.extend(problems)
        rep.checked += n
    else:
        rep.problems.extend(verify_index_files(dense))
        rec = recorded_files(_read_json(dense / "index.json") or {}).get("index.faiss", {})
        rep.checked += 1
        if DIGEST not in rec:
            rep.unrecorded.append("dense/index.faiss (size checked)" if rec else "dense/index.faiss")
    # bm25/: its files against bm25.json
    if manifest.get("bm25"):
        bdir = path / "bm25"
        if not (bdir / BM25_MANIFEST).is_file():
            rep.problems.append(f"{bdir / BM25_MANIFEST}: missing")
        else:
            try:
                bm = read_manifest(bdir / BM25_MANIFEST, BM25_FORMAT, BM25_VERSION, "BM25 index")
            except RalmError as exc:
                rep.problems.append(str(exc))
            else:
                recorded = bm25_files(bm)
                check(bdir, recorded)
                if any(DIGEST not in r for r in recorded.values()):
                    rep.unrecorded.append("the BM25 files (sizes checked)")
    return rep


# ----------------------------------------------------------------------------- swapping in
def swap_in(new: Path, out: Path) -> None:
    """Put the finished directory `new` in place of `out`: out moves aside, new is renamed to it,
    the old one is deleted. The gap between the two renames is the only moment without an index."""
    replace_dir(new, out)


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
