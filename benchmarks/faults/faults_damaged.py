"""Fault cases of `faults.py`: damaged and missing files."""

from __future__ import annotations

import random
import shutil

from benchmarks.faults.faults_util import flip_bytes, run_steps, truncate


class DamagedCases:
    """Damaged or missing files: exit 2 naming the file; checkpoint fallbacks."""

    def verify_names(self, fam: str, damage: str, kind: str, target, file: str, naming: str) -> None:
        """Record `ralm KIND verify TARGET` after `damage` to `file`: exit 2 with a line (stdout or
        stderr) naming the file (the expectation says `naming`), no traceback."""
        r = self.ralm(kind, "verify", target)
        self.record(
            fam,
            f"{damage}: {kind} verify",
            r,
            f"exit 2, a line naming {naming}, no traceback",
            names=[file],
            names_anywhere=True,
            outs=[target],
        )

    def record_untouched(self, fam: str, name: str, res, idx) -> None:
        """Record a refused index build `res` onto the finished index `idx`: exit 2 in one line, and
        `ralm index verify IDX` (run now) still accepts the index."""
        v = self.ralm("index", "verify", idx)
        self.record(
            fam,
            name,
            res,
            "exit 2, the index untouched (verify ok)",
            one_line=True,
            outs=[idx],
            problems=[]
            if v.rc == 0
            else [f"index verify afterwards: exit {v.rc}: {(v.out + v.err).strip()[:300]}"],
        )

    def damaged(self) -> None:
        fam = "damaged"
        ok2 = "exit 2, one line naming the file, no traceback"
        # 1. truncated chunk Parquet file
        d = self.dir("d1")
        s = self.new_store(d)
        part = s / "chunks" / "part-00000.parquet"
        truncate(part, part.stat().st_size // 2)
        for sub in (["show", s, "0"], ["info", s], ["verify", s]):
            r = self.ralm("corpus", *sub)
            verify = sub[0] == "verify"
            self.record(
                fam,
                f"truncated chunk parquet: corpus {sub[0]}",
                r,
                "exit 2, a line naming the file, no traceback" if verify else ok2,
                names=["part-00000.parquet"],
                names_anywhere=verify,
                one_line=not verify,
                outs=[s],
            )
        # 2. tokens/input_ids.bin deleted
        d = self.dir("d2")
        s = self.new_store(d)
        run = d / "run"
        self.must(*self.pretrain_args(s, run), "--stop-after", "1")
        (s / "tokens" / "input_ids.bin").unlink()
        r = self.ralm("corpus", "info", s)
        self.record(
            fam,
            "input_ids.bin deleted: corpus info",
            r,
            ok2,
            names=["input_ids.bin"],
            one_line=True,
            outs=[s],
        )
        r = self.ralm("pretrain", "--out", run, "--resume", "--quiet")
        self.record(
            fam,
            "input_ids.bin deleted: pretrain --resume",
            r,
            ok2,
            names=["input_ids.bin"],
            one_line=True,
            outs=[run],
        )
        # 3. token file overwritten at the same size
        d = self.dir("d3")
        s = self.new_store(d)
        tok = s / "tokens" / "input_ids.bin"
        size = tok.stat().st_size
        tok.write_bytes(random.Random(self.seed).randbytes(size))
        self.verify_names(
            fam, "input_ids.bin other bytes, same size", "corpus", s, "input_ids.bin", "the file"
        )
        # 4a. newest checkpoint's model.safetensors truncated
        d = self.dir("d4a")
        run = d / "run"
        self.must(*self.pretrain_args(self.store, run), "--stop-after", "2")
        m = run / "checkpoints" / "step-0000002" / "model.safetensors"
        truncate(m, m.stat().st_size // 2)
        r = self.ralm("evaluate-mlm", run, "--n", "2", "--device", "cpu")
        self.record(
            fam,
            "newest checkpoint truncated: evaluate-mlm",
            r,
            "exit 0, a note naming the damaged checkpoint",
            rc=(0,),
            contains=[r"step-0000002.*damaged"],
            outs=[run],
        )
        r = self.ralm("pretrain", "--out", run, "--resume", "--quiet")
        steps = run_steps(run)
        self.record(
            fam,
            "newest checkpoint truncated: pretrain --resume",
            r,
            "exit 0, a fallback note naming the damaged checkpoint; steps 1-3 logged once",
            rc=(0,),
            contains=[r"step-0000002.*damaged"],
            outs=[run],
            problems=[] if steps == [1, 2, 3] else [f"metrics steps {steps}"],
        )
        # 4b. every checkpoint truncated
        d = self.dir("d4b")
        run = d / "run"
        self.must(*self.pretrain_args(self.store, run), "--stop-after", "2")
        for m in (run / "checkpoints").glob("step-*/model.safetensors"):
            truncate(m, m.stat().st_size // 2)
        r = self.ralm("pretrain", "--out", run, "--resume", "--quiet")
        self.record(
            fam,
            "every checkpoint truncated: pretrain --resume",
            r,
            "exit 2, one line naming the files",
            names=["model.safetensors"],
            one_line=True,
            outs=[run],
        )
        r = self.ralm("evaluate-mlm", run, "--n", "2", "--device", "cpu")
        self.record(
            fam,
            "every checkpoint truncated: evaluate-mlm",
            r,
            "exit 2, one line naming the files",
            names=["model.safetensors"],
            one_line=True,
            outs=[run],
        )
        # 5. torn last line of metrics.jsonl: a) as a crash leaves it (metrics are logged before the
        # step's checkpoint, so the step-2 checkpoint was never written); b) the step-2 checkpoint intact
        for variant in ("a", "b"):
            d = self.dir(f"d5{variant}")
            run = d / "run"
            self.must(*self.pretrain_args(self.store, run), "--stop-after", "2")
            met = run / "metrics.jsonl"
            text = met.read_text()
            last = text.rstrip("\n").rsplit("\n", 1)[-1]
            met.write_text(text[: len(text.rstrip("\n")) - len(last) // 2])
            if variant == "a":
                shutil.rmtree(run / "checkpoints" / "step-0000002")
            r = self.ralm("pretrain", "--out", run, "--resume", "--quiet")
            steps = run_steps(run)
            if variant == "a":
                name = "torn last line of metrics.jsonl (its checkpoint not written): pretrain --resume"
                expected = "exit 0, a note about metrics.jsonl; steps 1-3 logged once"
                probs, note = ([] if steps == [1, 2, 3] else [f"metrics steps {steps}"]), ""
            else:
                name = "torn last line of metrics.jsonl (its checkpoint intact): pretrain --resume"
                expected = "exit 0, a note about metrics.jsonl"
                probs, note = [], f"metrics steps afterwards: {steps}"
            self.record(
                fam,
                name,
                r,
                expected,
                rc=(0,),
                contains=[r"metrics\.jsonl"],
                outs=[run],
                problems=probs,
                note=note,
            )
        # 6. 2,000 flipped bytes in the body of index.faiss
        d = self.dir("d6")
        idx = d / "idx"
        shutil.copytree(self.idx, idx, symlinks=True)
        faiss_file = idx / "dense" / "index.faiss"
        flip_bytes(
            faiss_file, 2000, random.Random(self.seed + 6), start=min(256, faiss_file.stat().st_size // 4)
        )
        r = self.ralm("search", idx, "king of Norway", "-k", "3")
        self.record(
            fam,
            "index.faiss 2,000 bytes flipped: search",
            r,
            ok2,
            names=["index.faiss"],
            one_line=True,
            outs=[idx],
        )
        self.verify_names(fam, "index.faiss 2,000 bytes flipped", "index", idx, "index.faiss", "index.faiss")
        # 7. ARPA values out of range
        d = self.dir("d7")
        lines = self.arpa.read_text(encoding="utf-8").split("\n")
        uni = next(i for i, x in enumerate(lines) if x.split("\t")[1:2] == ["of"])
        start2 = lines.index("\\2-grams:")
        bi = next(i for i in range(start2 + 1, len(lines)) if len(lines[i].split("\t")) == 3)
        for label, i, col, val in [
            ("log10 prob > 0", uni, 0, "0.5"),
            ("log10 prob inf", uni, 0, "inf"),
            ("log10 prob 1e999", uni, 0, "1e999"),
            ("log10 prob nan", uni, 0, "nan"),
            ("infinite backoff", bi, 2, "inf"),
            ("backoff 1e999", uni, 2, "1e999"),
        ]:
            bad = list(lines)
            f = bad[i].split("\t")
            f[col] = val
            bad[i] = "\t".join(f)
            path = d / f"bad-{label.replace(' ', '_').replace('>', 'gt')}.arpa"
            path.write_text("\n".join(bad), encoding="utf-8")
            r = self.ralm("ngram", "score", path, self.held)
            self.record(
                fam,
                f"ARPA {label} (line {i + 1}): ngram score",
                r,
                f"exit 2 naming line {i + 1}",
                contains=[rf"(:{i + 1}\b|line {i + 1}\b)"],
                one_line=True,
            )
        # (extra) an index copied with its symlink encoder/doc -> query dereferenced (cp -rL, copytree)
        d = self.dir("d6b")
        idx = d / "idx"
        shutil.copytree(self.idx, idx, symlinks=False)
        r = self.ralm("index", "verify", idx)
        sr = self.ralm("search", idx, "king of Norway", "-k", "1")
        self.record(
            fam,
            "(extra) index copied with symlinks dereferenced (cp -rL): index verify",
            r,
            "index verify agrees with search (both accept or both refuse the copy)",
            rc=(sr.rc,),
            note=f"search on the same copy: exit {sr.rc}",
        )
        # 8. index build onto a finished index
        d = self.dir("d8a")
        idx = d / "idx"
        shutil.copytree(self.idx, idx, symlinks=True)
        r = self.build_with_other_encoder(self.store, idx)
        self.record_untouched(fam, "index build, other encoder options, onto a finished index", r, idx)
        d = self.dir("d8b")
        idx = d / "idx"
        shutil.copytree(self.idx, idx, symlinks=True)
        r = self.ralm("index", "build", self.store, "--out", idx, "--encoder", self.tiny, "--quiet")
        self.record_untouched(fam, "index build onto a finished index, no --overwrite", r, idx)

    # ------------------------------------------------------------------------- disk full
