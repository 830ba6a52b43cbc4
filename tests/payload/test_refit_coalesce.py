"""The coalescing copy service on its own: two gloo ranks, many rounds, mixed dtypes, ids submitted in any order."""

from __future__ import annotations

import random

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from cloudai_mbridge.payload.refit.coalesce import CoalescingCopyService, buckets, make_service

pytestmark = pytest.mark.payload


def test_buckets_pack_consecutive_items_and_give_big_ones_their_own() -> None:
    # 16-byte aligned sizes: 10 -> 16, 40 -> 48, 100 -> 112
    assert buckets([10, 10, 40, 100, 10], 64) == [[0, 1], [2], [3], [4]]
    assert buckets([], 64) == []
    assert buckets([64, 64], 64) == [[0], [1]]


def _transfers(seed: int) -> list[tuple[int, torch.Tensor]]:
    """(task_id, tensor) pairs the sender sends and the receiver expects, the same on both ranks."""
    gen = torch.Generator().manual_seed(seed)
    items = []
    for task_id, (dtype, n) in enumerate([(torch.bfloat16, 7), (torch.float32, 300), (torch.int64, 1),
                                          (torch.bfloat16, 2000), (torch.float32, 33), (torch.int16, 5)] * 3):
        items.append((task_id, (torch.randn(n, generator=gen) * 100).to(dtype)))
    return items


def _worker(rank: int, store_path: str, result_path: str) -> None:
    dist.init_process_group("gloo", init_method=f"file://{store_path}", rank=rank, world_size=2)
    peer = 1 - rank
    service = make_service(512)  # smaller than the 2000-element tensors: many rounds, some items alone
    sent = _transfers(seed=rank)
    expected = _transfers(seed=peer)
    received = {task_id: torch.empty_like(t) for task_id, t in expected}
    order = list(range(len(sent)))
    random.Random(rank).shuffle(order)  # each side submits in its own order; task ids line them up
    for i in order:
        service.submit_send_with_id(1000 * rank + sent[i][0], sent[i][1], peer)
    for task_id, _ in reversed(expected):
        service.submit_recv_with_id(1000 * peer + task_id, received[task_id], peer)
    local_src, local_dst = torch.arange(10.0), torch.zeros(10)
    service.submit_send_with_id(99_999, local_src, rank)
    service.submit_recv_with_id(99_999, local_dst, rank)
    service.run()
    ok = all(torch.equal(received[task_id], t) for task_id, t in expected) and torch.equal(local_dst, local_src)
    rounds = service.stats["rounds"]
    service.run()  # a second refit reuses the service: nothing left over from the first
    dist.destroy_process_group()
    with open(f"{result_path}.{rank}", "w") as f:
        f.write(f"{ok} {rounds}")


def test_two_ranks_exchange_exactly_in_many_rounds(tmp_path) -> None:
    mp.start_processes(_worker, args=(str(tmp_path / "store"), str(tmp_path / "result")), nprocs=2,
                       start_method="spawn")
    for rank in (0, 1):
        ok, rounds = (tmp_path / f"result.{rank}").read_text().split()
        assert ok == "True"
        assert int(rounds) > 3  # 18 tensors, ~18 KiB, 512-byte buckets


def test_a_local_receive_without_its_send_is_an_error(tmp_path) -> None:
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store1'}", rank=0, world_size=1)
    try:
        service = CoalescingCopyService(1 << 20)  # the plain class: no megatron import in the test process
        service.submit_recv_with_id(5, torch.zeros(3), 0)
        with pytest.raises(RuntimeError, match="task_id=5"):
            service.run()
    finally:
        dist.destroy_process_group()
