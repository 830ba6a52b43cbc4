"""The coalescing copy service's edge buckets (payload/refit config ``coalesce_edge_mib``): per peer, the first and the
last message are cut to at most the edge size, so that the pack before the first transfer and the unpack after the
last one, the copies no transfer hides on the overlapped path, are short. The cut alone (pure Python), then real gloo
exchanges on 3 ranks that land the same bits as without edges."""

from __future__ import annotations

import json
import random

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from cloudai_mbridge.payload.refit.coalesce import CoalescingCopyService, _aligned, buckets

pytestmark = pytest.mark.payload


def _bytes(sizes: list[int], idx: list[int]) -> int:
    return sum(_aligned(sizes[i]) for i in idx)


def test_edges_cap_the_first_and_last_bucket_and_keep_the_order() -> None:
    sizes = [16] * 20  # 320 bytes, aligned already
    got = buckets(sizes, 128, edge_bytes=32)
    assert got[0] == [0, 1] and got[-1] == [18, 19]  # 2 x 16 bytes at each edge
    assert [i for b in got for i in b] == list(range(20))
    assert all(_bytes(sizes, b) <= 128 for b in got)
    assert buckets(sizes, 128) == [list(range(k, k + 8)) for k in (0, 8)] + [[16, 17, 18, 19]]  # no edges: as before


def test_an_edge_item_larger_than_the_edge_is_a_bucket_of_its_own() -> None:
    assert buckets([100, 16, 16, 200], 256, edge_bytes=32) == [[0], [1, 2], [3]]
    assert buckets([16, 16], 256, edge_bytes=64) == [[0, 1]]  # everything fits the first edge: one bucket
    assert buckets([16, 16, 16], 256, edge_bytes=16) == [[0], [1], [2]]
    assert buckets([], 256, edge_bytes=16) == []


def test_edges_hold_for_any_sizes_and_zero_is_todays_cut() -> None:
    rng = random.Random(7)
    for _ in range(300):
        sizes = [rng.choice([1, 15, 16, 17, 100, 500, 3000]) for _ in range(rng.randint(1, 40))]
        bucket, edge = rng.choice([512, 1024, 4096]), rng.choice([16, 48, 256])
        got = buckets(sizes, bucket, edge_bytes=edge)
        assert [i for b in got for i in b] == list(range(len(sizes)))
        assert all(b for b in got)
        for b in (got[0], got[-1]):
            assert len(b) == 1 or _bytes(sizes, b) <= edge
        for b in got[1:-1]:
            assert len(b) == 1 or _bytes(sizes, b) <= bucket
        assert buckets(sizes, bucket, edge_bytes=0) == buckets(sizes, bucket)


def _tensors(src: int, dst: int, version: int) -> list[tuple[int, torch.Tensor]]:
    gen = torch.Generator().manual_seed(100 * src + 10 * dst + version)
    dtypes = (torch.bfloat16, torch.float32, torch.int16)
    return [(1000 * src + k, (torch.randn(n, generator=gen) * 100).to(dtypes[k % 3]))
            for k, n in enumerate([40, 9, 300, 7, 120, 33, 5, 64][: 5 + (src + dst) % 4])]


def _worker(rank: int, world: int, store: str, result: str) -> None:
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world)
    out: dict = {"ok": True, "why": []}
    try:
        landed = {}
        for schedule in ("rounds", "pairwise"):
            for edge in (0, 64):
                service = CoalescingCopyService(1024, schedule=schedule, edge_bytes=edge)
                for version in (1, 2):
                    expected, dsts = {}, {}
                    for peer in (p for p in range(world) if p != rank):
                        for task_id, t in _tensors(rank, peer, version):
                            service.submit_send_with_id(task_id, t, peer)
                        for task_id, t in _tensors(peer, rank, version):
                            expected[(peer, task_id)] = t
                            dsts[(peer, task_id)] = torch.full_like(t, -7)
                            service.submit_recv_with_id(task_id, dsts[(peer, task_id)], peer)
                    service.run()
                    wrong = sorted(k for k, t in expected.items() if not torch.equal(dsts[k], t))
                    if wrong:
                        out["ok"] = False
                        out["why"].append(f"{schedule} edge {edge} v{version}: wrong {wrong[:4]}")
                plan = service._plan
                firsts = [side[p][0].message.numel() for side in (plan.sends, plan.recvs) for p in side]
                lasts = [side[p][-1].message.numel() for side in (plan.sends, plan.recvs) for p in side]
                out[f"{schedule}_{edge}"] = {"units": len(plan.units), "edge_bytes": service.stats["edge_bytes"],
                                             "max_edge_message": max(firsts + lasts),
                                             "messages": service.stats["messages"], "bytes": service.stats["bytes"]}
                landed[(schedule, edge)] = {k: v.reshape(-1).view(torch.uint8).clone() for k, v in dsts.items()}
        ref = landed[("rounds", 0)]
        for key, got in landed.items():
            if got.keys() != ref.keys() or not all(torch.equal(v, ref[k]) for k, v in got.items()):
                out["ok"] = False
                out["why"].append(f"{key}: destinations differ from rounds without edges")
    except Exception as exc:  # reported to the test process, which fails with it
        out = {"ok": False, "why": [f"{type(exc).__name__}: {exc}"]}
    finally:
        dist.destroy_process_group()
    with open(f"{result}.{rank}", "w") as f:
        json.dump(out, f)


def test_edges_land_the_same_bits_in_more_smaller_edge_messages(tmp_path) -> None:
    world = 3
    mp.start_processes(_worker, args=(world, str(tmp_path / "store"), str(tmp_path / "result")), nprocs=world,
                       start_method="spawn")
    for rank in range(world):
        res = json.loads((tmp_path / f"result.{rank}").read_text())
        assert res["ok"], (rank, res["why"])
        for schedule in ("rounds", "pairwise"):
            plain, edged = res[f"{schedule}_0"], res[f"{schedule}_64"]
            assert plain["edge_bytes"] == 0 and edged["edge_bytes"] == 64
            assert edged["bytes"] == plain["bytes"] > 0  # the same payload...
            assert edged["messages"] > plain["messages"]  # ...in more messages: the edges were cut
            # the first and last message per peer shrink (a lone item larger than the edge keeps its own size)
            assert edged["max_edge_message"] < plain["max_edge_message"]
