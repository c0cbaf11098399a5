"""Checksums: the streamed digest equals the one-shot library call; damage of each kind is named."""

from __future__ import annotations

import os

import xxhash

from ralm.integrity import check_digests, check_sizes, digest, digest_bytes, records


def test_streamed_digest_equals_one_shot(tmp_path):
    data = os.urandom(100_003)
    p = tmp_path / "f.bin"
    p.write_bytes(data)
    ref = xxhash.xxh3_128(data).hexdigest()
    assert digest(p) == digest(p, block=4096) == digest(p, block=7) == digest_bytes(data) == ref


def test_checks_name_missing_truncated_and_changed_files(tmp_path):
    for name, n in (("a.bin", 1000), ("sub/b.bin", 10), ("c.bin", 50)):
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_bytes(os.urandom(n))
    rec = records(tmp_path, ["a.bin", "sub/b.bin", "c.bin"])
    assert rec["sub/b.bin"]["size"] == 10 and check_digests(tmp_path, rec) == []
    (tmp_path / "sub/b.bin").unlink()
    with open(tmp_path / "a.bin", "r+b") as f:
        f.truncate(999)
    raw = bytearray((tmp_path / "c.bin").read_bytes())
    raw[20] ^= 0xFF  # same size, one flipped byte
    (tmp_path / "c.bin").write_bytes(bytes(raw))
    assert check_sizes(tmp_path, rec) == [
        f"{tmp_path}/a.bin: 999 bytes, expected 1000",
        f"{tmp_path}/sub/b.bin: missing",
    ]
    assert check_digests(tmp_path, rec) == [
        f"{tmp_path}/a.bin: 999 bytes, expected 1000",
        f"{tmp_path}/sub/b.bin: missing",
        f"{tmp_path}/c.bin: contents changed (checksum mismatch)",
    ]
