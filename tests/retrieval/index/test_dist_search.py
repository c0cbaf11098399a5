"""Distributed search of a sharded index: 2 gloo processes, each holding its shards, every rank gets
the global top k; equal to the unsharded flat index (ids and scores) and to brute force."""

from __future__ import annotations

import socket

import numpy as np
import pytest
import torch.multiprocessing as mp

from ralm.retrieval.index.dense import DenseIndex

FP = {"docstore_fingerprint": "d" * 64, "encoder_fingerprint": "e" * 64}
N, D = 61, 6
BATCHES = {0: 3, 1: 5}  # queries per rank: the ranks need not have the same number


def data():
    rng = np.random.default_rng(0)
    x = rng.integers(-2, 3, size=(N, D)).astype(np.float32)  # exact scores, many ties
    q = rng.integers(-2, 3, size=(sum(BATCHES.values()), D)).astype(np.float32)
    excl = [[0, 1, 2], None, [60], list(range(31, 61)), [7, 7], [], [30], [12, 13]]
    return x, q, excl


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker(rank: int, port: int, out: str, n_shards: int) -> None:
    import faiss
    import torch
    import torch.distributed as tdist

    from ralm.errors import RalmError
    from ralm.retrieval.index.dist_search import DistributedShardSearch
    from ralm.retrieval.index.sharded import load_rank_shards
    from ralm.train.distributed import Dist

    torch.set_num_threads(1)
    faiss.omp_set_num_threads(1)
    tdist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    dist = Dist(rank, 2)
    index, start = load_rank_shards(out + "/shards", rank, 2)
    search = DistributedShardSearch(dist, index, start, N)
    x, q, excl = data()
    lo = 0 if rank == 0 else BATCHES[0]
    mine = slice(lo, lo + BATCHES[rank])
    got = {}
    for k in (1, 5, 30):
        res = search.search(q[mine], k, exclude_ids=excl[mine])
        got[f"ids{k}"], got[f"scores{k}"] = res.ids, res.scores
        every = search.search(q[mine], k, exclude_ids=excl[mine], all_rows=True)
        got[f"all_ids{k}"] = every.ids
    # a rank with no queries still takes part
    res = search.search(q[mine] if rank == 1 else q[:0], 4)
    got["empty_ok"] = np.array([len(res.ids)])
    # an impossible k on one rank's query: the same RalmError on both ranks, no hang
    try:
        search.search(q[mine], 32, exclude_ids=excl[mine])
        got["error"] = np.array([0])
    except RalmError as exc:
        got["error"] = np.array([1 if "chunks left" in str(exc) else 2])
    # a RalmError on one rank only (a damaged shard, say) reaches both through Dist.together

    def fail_on_rank1() -> int:
        if rank == 1:
            raise RalmError("shard-00001-of-00002/index.faiss: contents changed")
        return 7

    try:
        dist.together(fail_on_rank1)
        got["together"] = np.array([0])
    except RalmError as exc:
        got["together"] = np.array([1 if str(exc).startswith("rank 1: shard-00001") else 2])
    got["together_ok"] = np.array([dist.together(lambda: 7)])
    tdist.destroy_process_group()
    np.savez(f"{out}/rank{rank}.npz", **got)


@pytest.mark.parametrize("n_shards", [2, 4])
def test_two_gloo_processes_match_the_unsharded_index(tmp_path, n_shards):
    from ralm.retrieval.index.shard_build import build_sharded

    x, q, excl = data()
    build_sharded(x, tmp_path / "shards", n_shards, **FP)
    mp.start_processes(_worker, args=(_free_port(), str(tmp_path), n_shards), nprocs=2, start_method="spawn")
    whole = DenseIndex.build(x, kind="flat", **FP)
    for k in (1, 5, 30):
        ref = whole.search(q, k, exclude_ids=excl)
        for rank in (0, 1):
            got = np.load(tmp_path / f"rank{rank}.npz")
            lo = 0 if rank == 0 else BATCHES[0]
            np.testing.assert_array_equal(got[f"ids{k}"], ref.ids[lo : lo + BATCHES[rank]])
            np.testing.assert_array_equal(got[f"scores{k}"], ref.scores[lo : lo + BATCHES[rank]])
            np.testing.assert_array_equal(got[f"all_ids{k}"], ref.ids)
    # brute force: exact integer scores, (score desc, id asc), excluded ids dropped
    s = q.astype(np.float64) @ x.astype(np.float64).T
    ref = whole.search(q, 5, exclude_ids=excl)
    for i in range(len(q)):
        banned = set(excl[i] or [])
        want = sorted((j for j in range(N) if j not in banned), key=lambda j, i=i: (-s[i, j], j))[:5]
        assert list(ref.ids[i]) == want
    for rank in (0, 1):
        got = np.load(tmp_path / f"rank{rank}.npz")
        assert int(got["empty_ok"][0]) == (0 if rank == 0 else BATCHES[1])
        assert int(got["error"][0]) == 1  # query 3 excludes 30 of 61 chunks: 32 cannot be returned
        assert int(got["together"][0]) == 1 and int(got["together_ok"][0]) == 7
