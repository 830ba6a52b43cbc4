"""The coalescing copy service's "pairwise" schedule next to "rounds": the flattening into exchange units on its own
(pure Python), the staging slots of consecutive units, and real gloo exchanges on 2, 3 and 4 ranks."""

from __future__ import annotations

import json
import random

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from cloudai_mbridge.payload.refit import coalesce
from cloudai_mbridge.payload.refit.coalesce import CoalescingCopyService, Unit, exchange_units

pytestmark = pytest.mark.payload


# --- the flattening alone ----------------------------------------------------------------------------------------
def test_pairwise_steps_pair_rank_plus_s_and_rank_minus_s_one_unit_per_bucket() -> None:
    # rank 1 of 4: step 1 sends to 2 and receives from 0, step 2 to / from 3, step 3 to 0 and from 2
    sends = {2: 2, 3: 1, 0: 3}
    recvs = {0: 1, 3: 2, 2: 1}
    units = exchange_units("pairwise", 1, 4, sends, recvs)
    assert units == [
        Unit(((2, 0),), ((0, 0),)), Unit(((2, 1),), ()),  # step 1: 2 buckets to 2, 1 from 0
        Unit(((3, 0),), ((3, 0),)), Unit((), ((3, 1),)),  # step 2: 1 bucket to 3, 2 from 3
        Unit(((0, 0),), ((2, 0),)), Unit(((0, 1),), ()), Unit(((0, 2),), ()),  # step 3: 3 to 0, 1 from 2
    ]
    assert len(units) == sum(max(sends[(1 + s) % 4], recvs[(1 - s) % 4]) for s in (1, 2, 3)) == 7
    # one peer each way per unit, never more
    assert all(len(u.sends) <= 1 and len(u.recvs) <= 1 for u in units)


def test_rounds_units_hold_every_peers_bucket_of_one_index() -> None:
    units = exchange_units("rounds", 1, 4, {2: 2, 3: 1, 0: 3}, {0: 1, 3: 2, 2: 1})
    assert units == [
        Unit(((2, 0), (3, 0), (0, 0)), ((0, 0), (3, 0), (2, 0))),
        Unit(((2, 1), (0, 1)), ((3, 1),)),
        Unit(((0, 2),), ()),
    ]
    assert exchange_units("rounds", 0, 2, {}, {}) == []
    assert exchange_units("pairwise", 0, 2, {}, {}) == []


def test_pairwise_with_two_ranks_is_the_rounds_schedule() -> None:
    for sends, recvs in (({1: 3}, {1: 1}), ({1: 1}, {1: 4}), ({}, {1: 2})):
        assert exchange_units("pairwise", 0, 2, sends, recvs) == exchange_units("rounds", 0, 2, sends, recvs)


def test_every_bucket_is_in_exactly_one_unit_and_no_peer_is_left_out() -> None:
    rng = random.Random(3)
    for world in range(2, 8):
        for rank in range(world):
            peers = [p for p in range(world) if p != rank]
            sends = {p: rng.randint(0, 3) for p in peers}
            recvs = {p: rng.randint(0, 3) for p in peers}
            for schedule in coalesce.SCHEDULES:
                units = exchange_units(schedule, rank, world, sends, recvs)
                got_s = sorted(pb for u in units for pb in u.sends)
                got_r = sorted(pb for u in units for pb in u.recvs)
                assert got_s == sorted((p, b) for p, n in sends.items() for b in range(n)), (schedule, world, rank)
                assert got_r == sorted((p, b) for p, n in recvs.items() for b in range(n)), (schedule, world, rank)
                assert all(u.sends or u.recvs for u in units)


def _simulate(schedule: str, counts: list[list[int]]) -> bool:
    """Every rank posts its units in order, one at a time (a unit completes once each of its messages has the
    matching op posted on the peer, as batch_isend_irecv does); True when all ranks finish, False on a deadlock."""
    world = len(counts)
    units = [exchange_units(schedule, i, world, {j: counts[i][j] for j in range(world) if j != i},
                            {j: counts[j][i] for j in range(world) if j != i}) for i in range(world)]
    at = [0] * world
    done: set[tuple[int, int, int]] = set()  # (src, dst, bucket) messages delivered
    while any(at[i] < len(units[i]) for i in range(world)):
        progress = False
        for i in range(world):
            if at[i] == len(units[i]):
                continue
            u = units[i][at[i]]
            for j, b in u.sends:
                peer = units[j][at[j]] if at[j] < len(units[j]) else Unit((), ())
                if (i, b) in peer.recvs:
                    done.add((i, j, b))
            if all((i, j, b) in done for j, b in u.sends) and all((j, i, b) in done for j, b in u.recvs):
                at[i] += 1
                progress = True
        if not progress:
            return False
    return len(done) == sum(map(sum, counts))


def test_pairwise_and_rounds_never_wait_on_a_unit_the_peer_has_not_reached() -> None:
    rng = random.Random(11)
    for world in range(2, 8):
        for _ in range(20):
            counts = [[0 if i == j else rng.choice([0, 1, 1, 2, 3, 5]) for j in range(world)] for i in range(world)]
            for schedule in coalesce.SCHEDULES:
                assert _simulate(schedule, counts), (schedule, counts)


def test_pairwise_refuses_peers_no_step_reaches_and_unknown_schedules() -> None:
    with pytest.raises(ValueError, match=r"peer\(s\) \[4\]"):
        exchange_units("pairwise", 0, 4, {4: 1}, {})
    with pytest.raises(ValueError, match=r"receive from peer\(s\) \[0\]"):
        exchange_units("pairwise", 0, 4, {}, {0: 1})
    with pytest.raises(ValueError, match="schedule='ring'"):
        exchange_units("ring", 0, 4, {}, {})


# --- the plan: staging slots and a schedule that drops a bucket --------------------------------------------------
def _submit(service: CoalescingCopyService, rank: int, world: int, elems: int) -> list:
    pairs = []
    for peer in range(world):
        if peer == rank:
            continue
        for k in range(1 + peer):  # uneven per peer; each tensor bigger than the bucket below
            src, dst = torch.arange(float(elems)) + 1000 * peer + k, torch.zeros(elems)
            service.submit_send_with_id(k, src, peer)
            service.submit_recv_with_id(k, dst, peer)
            pairs.append((src, dst))
    return pairs


def test_pairwise_units_alternate_staging_slots_so_double_buffering_holds(tmp_path, monkeypatch) -> None:
    """The overlapped path (CUDA) packs unit u+1 while unit u is on the wire and unpacks u while u+1 is: no
    staging buffer of unit u may be one of unit u+1's. Checked on the plan itself, built with 2 slots."""
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        for schedule in coalesce.SCHEDULES:
            service = CoalescingCopyService(64, schedule=schedule)
            service.world = 4  # the plan alone: no exchange runs
            monkeypatch.setattr(service, "_slots_wanted", lambda device: 2)
            _submit(service, 0, 4, 20)
            plan = service._plan_for()
            assert plan.slots == 2 and len(plan.units) > 3

            def storages(u: int, plan=plan) -> set[int]:
                unit = plan.units[u]
                return ({plan.sends[p][b].message.untyped_storage().data_ptr() for p, b in unit.sends}
                        | {plan.recvs[p][b].message.untyped_storage().data_ptr() for p, b in unit.recvs})

            for u in range(len(plan.units) - 1):
                assert not storages(u) & storages(u + 1), (schedule, u)
    finally:
        dist.destroy_process_group()


def test_a_schedule_that_leaves_a_peer_out_is_refused_before_anything_moves(tmp_path, monkeypatch) -> None:
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        real = coalesce.exchange_units

        def drops_last_step(schedule, rank, world, sends, recvs):
            units = real(schedule, rank, world, sends, recvs)
            last = (rank + world - 1) % world
            return [u for u in units if all(p != last for p, _ in u.sends)]

        monkeypatch.setattr(coalesce, "exchange_units", drops_last_step)
        service = CoalescingCopyService(64, schedule="pairwise")
        service.world = 4
        _submit(service, 0, 4, 20)
        with pytest.raises(RuntimeError, match=r"leaves \(peer, bucket\) \[\(3, 0\)"):
            service._plan_for()
    finally:
        dist.destroy_process_group()


def test_the_service_refuses_an_unknown_schedule() -> None:
    with pytest.raises(ValueError, match=r"schedule='ring': must be one of \['rounds', 'pairwise'\]"):
        CoalescingCopyService(64, schedule="ring")


# --- real exchanges ----------------------------------------------------------------------------------------------
DTYPES = (torch.bfloat16, torch.float32, torch.int64, torch.int16, torch.float16)


def _pair_tensors(src: int, dst: int, version: int, sparse: bool) -> list[tuple[int, torch.Tensor]]:
    """(task_id, tensor) that rank ``src`` sends ``dst``: a count and sizes that differ per direction (so per-peer
    bucket counts differ, and pairwise units with only a send or only a receive occur), mixed dtypes, several
    tensors larger than the 512-byte bucket. ``sparse``: some directions carry nothing at all."""
    if sparse and (src + 2 * dst) % 5 == 1:  # 1 -> 0 and 0 -> 3 for world 4: one direction only
        return []
    gen = torch.Generator().manual_seed(1000 * src + 10 * dst + version)
    out = []
    for k in range(1 + (3 * src + dst) % 4):
        n = [5, 300, 1, 2000, 33, 129][(src + 2 * dst + k) % 6] + src
        dtype = DTYPES[(src + dst + k) % len(DTYPES)]
        out.append((100 * src + k, (torch.randn(n, generator=gen) * 1000).to(dtype)))
    return out


def _poison(t: torch.Tensor) -> torch.Tensor:
    return torch.full_like(t, float("nan") if t.is_floating_point() else -12345)


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.reshape(-1).view(torch.uint8)


def _exchange_worker(rank: int, world: int, sparse: bool, store: str, result: str) -> None:
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world)
    out: dict = {"ok": True, "why": []}
    try:
        landed = {}
        for schedule in ("rounds", "pairwise"):
            service = CoalescingCopyService(512, schedule=schedule)
            for version in (1, 2):  # a second refit with new values reuses the plan
                expected, dsts = {}, {}
                for peer in range(world):
                    if peer == rank:
                        continue
                    for task_id, t in _pair_tensors(rank, peer, version, sparse):
                        service.submit_send_with_id(task_id, t, peer)
                    for task_id, t in _pair_tensors(peer, rank, version, sparse):
                        expected[(peer, task_id)] = t
                        dsts[(peer, task_id)] = _poison(t)
                        service.submit_recv_with_id(task_id, dsts[(peer, task_id)], peer)
                local = torch.arange(7.0) * version
                local_dst = torch.zeros(7)
                service.submit_send_with_id(9999, local, rank)
                service.submit_recv_with_id(9999, local_dst, rank)
                service.run()
                wrong = sorted(k for k, t in expected.items() if not torch.equal(_bits(dsts[k]), _bits(t)))
                if wrong or not torch.equal(local_dst, local):
                    out["ok"] = False
                    out["why"].append(f"{schedule} v{version}: wrong or untouched (peer, task) {wrong[:6]}")
            plan = service._plan
            peers_received = sorted({p for u in plan.units for p, _ in u.recvs})
            out[schedule] = {"stats": {k: service.stats[k] for k in ("rounds", "messages", "bytes", "schedule",
                                                                     "plan_builds")},
                             "units": len(plan.units), "peers_received": peers_received,
                             "one_sided": sum(1 for u in plan.units if not (u.sends and u.recvs)),
                             "peers_expected": sorted({p for p, _ in expected})}
            landed[schedule] = {k: _bits(v) for k, v in dsts.items()}
        if landed["rounds"].keys() != landed["pairwise"].keys() or not all(
                torch.equal(v, landed["pairwise"][k]) for k, v in landed["rounds"].items()):
            out["ok"] = False
            out["why"].append("pairwise and rounds destinations differ")
    except Exception as exc:  # reported to the test process, which fails with it
        out = {"ok": False, "why": [f"{type(exc).__name__}: {exc}"]}
    finally:
        dist.destroy_process_group()
    with open(f"{result}.{rank}", "w") as f:
        json.dump(out, f)


@pytest.mark.parametrize(("world", "sparse"), [(2, False), (3, False), (4, False), (4, True)],
                         ids=["w2", "w3", "w4", "w4-sparse"])
def test_pairwise_lands_the_same_bits_as_rounds(tmp_path, world, sparse) -> None:
    mp.start_processes(_exchange_worker, args=(world, sparse, str(tmp_path / "store"), str(tmp_path / "result")),
                       nprocs=world, start_method="spawn")
    for rank in range(world):
        res = json.loads((tmp_path / f"result.{rank}").read_text())
        assert res["ok"], (rank, res["why"])
        rounds, pairwise = res["rounds"], res["pairwise"]
        assert rounds["stats"]["schedule"] == "rounds" and pairwise["stats"]["schedule"] == "pairwise"
        # the same messages and bytes, only in another order; one plan per service for both refits
        for key in ("messages", "bytes"):
            assert rounds["stats"][key] == pairwise["stats"][key] > 0, (rank, key)
        assert rounds["stats"]["plan_builds"] == pairwise["stats"]["plan_builds"] == 1
        assert pairwise["stats"]["rounds"] == 2 * pairwise["units"]  # two refits
        # every peer that sent this rank something was received from (nothing dropped)
        assert pairwise["peers_received"] == pairwise["peers_expected"]
        if not sparse:
            assert pairwise["peers_expected"] == [p for p in range(world) if p != rank]
        if world > 2:
            assert pairwise["units"] > rounds["units"]  # one peer at a time: more, smaller exchanges
    if world > 2:  # uneven directions: some pairwise unit somewhere only sends or only receives
        assert any(json.loads((tmp_path / f"result.{r}").read_text())["pairwise"]["one_sided"]
                   for r in range(world))


# --- the GPU benchmark's sweep -----------------------------------------------------------------------------------
def test_the_gpu_benchmark_runs_each_schedule_side_by_side_and_labels_the_rows() -> None:
    import gpu_refit_nccl as bench  # benchmarks/ is on pytest's pythonpath

    args = bench.parse_args(["--out", "/nonexistent", "--world", "4", "--pairs", "tp4-ep4", "--coalesce-mib", "0",
                             "1024", "--coalesce-overlap", "on", "--coalesce-schedule", "rounds", "pairwise"])
    runs = bench.refit_runs(args)
    assert [(c, sc) for _, _, c, _, _, sc, _ in runs] == [(0, None), (1024, "rounds"), (1024, "pairwise")]
    names = [bench.run_name(p, 2, t, c, ov, ex, sc, e) for p, t, c, ov, ex, sc, e in runs]
    assert names == ["refit_tp4-ep4_2l", "refit_tp4-ep4_2l_c1024_ov", "refit_tp4-ep4_2l_c1024_ov_pw"]
    configs = [bench.refit_config(p, 2, args, c, t, ov, ex, sc, e) for p, t, c, ov, ex, sc, e in runs]
    assert [c.get("coalesce_schedule") for c in configs] == [None, "rounds", "pairwise"]
    assert bench.parse_args(["--out", "/x"]).coalesce_schedule == ["rounds"]  # the default: today's runs only
    assert all("coalesce_edge_mib" not in c for c in configs)  # no edges unless asked


def test_the_gpu_benchmark_sweeps_edges_below_the_message_size_only() -> None:
    import gpu_refit_nccl as bench

    args = bench.parse_args(["--out", "/x", "--world", "2", "--pairs", "tp2-ep2", "--coalesce-mib", "0", "64",
                             "1024", "--coalesce-overlap", "on", "--coalesce-edge-mib", "0", "64"])
    runs = bench.refit_runs(args)
    assert [(c, e) for _, _, c, _, _, _, e in runs] == [(0, 0), (64, 0), (1024, 0), (1024, 64)]
    p, t, c, ov, ex, sc, e = runs[-1]
    assert bench.run_name(p, 1, t, c, ov, ex, sc, e) == "refit_tp2-ep2_1l_c1024_ov_e64"
    assert bench.refit_config(p, 1, args, c, t, ov, ex, sc, e)["coalesce_edge_mib"] == 64
