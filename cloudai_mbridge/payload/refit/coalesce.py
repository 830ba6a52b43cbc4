"""A copy service for megatron-core's ``swap_model_weights`` that sends few large messages instead of many slices.

megatron-core's NCCL copy service posts one send/recv per planned slice in one ``batch_isend_irecv``; for a
Kimi-K2-shaped TP2 -> EP2 refit that is 4670 operations of ~8 MiB, and on 2x H200 the refit moved 66 GB/s per GPU
where one 4 GiB exchange moves 359 GB/s (benchmarks/results/gpu_refit_nccl.md; the profile puts 415 of 474 ms in
NCCL kernels). This service keeps the plan (same slices, same peers, same bytes) and changes only the transport:

- per peer, the slices are ordered by the planner's ``task_id`` (both sides hold the same ids for the same transfer;
  without ids, the order of submission, which is what megatron-core's own service relies on);
- they are packed back to back (16-byte aligned, so every typed view of the buffer is aligned) into buckets of at
  most ``bucket_bytes`` (a slice larger than a bucket gets one of its own); both sides cut the same ordered sizes the
  same way, so bucket ``i`` to a peer is bucket ``i`` from it;
- the buckets travel in exchange units (:func:`exchange_units`), one ``batch_isend_irecv`` each: pack the unit's
  buckets, post, wait, unpack. ``schedule`` (config ``coalesce_schedule``) orders them: "rounds" (the default), one
  unit per bucket index with every peer's bucket of that index (all peers at once); "pairwise", steps s = 1 ..
  world-1 in which rank i sends to (i+s) % world and receives from (i-s) % world, one unit per bucket index of that
  pair (one peer each way at a time). ``stats["schedule"]`` records which one ran.

Speed (the same refit repeats every RL step with the same slices):

- the plan (order, buckets, offsets, typed views of the staging buffers, local copy pairs) is cached per signature
  (rank, device, and (peer, task_id, dtype, shape) of every send and receive in submission order; ``stats
  ["plan_builds"]`` counts the builds); staging buffers are allocated with the plan and kept (``release()`` drops
  them): one send and one receive buffer per peer, two (double buffering) when overlapping;
- pack, unpack and same-rank copies are ``torch._foreach_copy_`` over lists grouped by dtype and contiguity (one
  multi-tensor kernel for the contiguous ones instead of one ``copy_`` each; the rest go through the same call, which
  loops in C++; ``copy_`` per tensor if it raises);
- on CUDA with ``overlap`` (config ``coalesce_overlap``) and no profiling: same-rank copies on a side stream next to
  the first unit, unit u+1 packed on a side stream while unit u's NCCL ops run, unit u unpacked on a third
  stream (see :meth:`CoalescingCopyService._run_overlapped` for the event order). ``stats["overlapped"]`` tells
  whether the last ``run()`` took that path. With profiling (payload/refit/phases.py sets ``phase_ms``), on CPU, or
  with overlap off, the phases run one after the other on the current stream, timed per phase.

Works on any backend that has ``isend``/``irecv`` (NCCL on GPUs, gloo on CPUs, which is how the tests check the
packing and offsets bit for bit: both paths use the same plan and views).
"""

from __future__ import annotations

from dataclasses import dataclass, field

ALIGN = 16
SCHEDULES = ("rounds", "pairwise")


@dataclass
class _Op:
    task_id: int | None
    tensor: object  # torch.Tensor
    peer: int
    order: int


def _aligned(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


def _greedy(indices: list[int], sizes: list[int], bucket_bytes: int) -> list[list[int]]:
    out: list[list[int]] = []
    used = bucket_bytes + 1
    for i in indices:
        need = _aligned(sizes[i])
        if used + need > bucket_bytes:
            out.append([])
            used = 0
        out[-1].append(i)
        used += need
    return out


def buckets(sizes: list[int], bucket_bytes: int, edge_bytes: int = 0) -> list[list[int]]:
    """Indices of ``sizes`` (bytes, in transfer order) grouped into consecutive buckets of at most ``bucket_bytes``
    (aligned sizes); a single item larger than that is a bucket of its own.

    ``edge_bytes`` > 0 (config ``coalesce_edge_mib``): the first and the last bucket hold at most ``edge_bytes``
    each (at least one item; the first is the longest prefix that fits, the last the longest suffix of the rest),
    the middle is cut as above. With the overlapped path, the pack of the first exchange and the unpack of the last
    one are the copies no transfer hides: small edges shorten them. Both sides of a transfer cut the same ordered
    sizes with the same arguments, so they agree bucket for bucket."""
    if edge_bytes <= 0:
        return _greedy(list(range(len(sizes))), sizes, bucket_bytes)
    n = len(sizes)
    if n == 0:
        return []
    head, used = 0, 0
    while head < n and (head == 0 or used + _aligned(sizes[head]) <= edge_bytes):
        used += _aligned(sizes[head])
        head += 1
    if head == n:
        return [list(range(n))]
    tail, used = n, 0
    while tail > head and (tail == n or used + _aligned(sizes[tail - 1]) <= edge_bytes):
        used += _aligned(sizes[tail - 1])
        tail -= 1
    middle = _greedy(list(range(head, tail)), sizes, bucket_bytes)
    return [list(range(head)), *middle, list(range(tail, n))]


@dataclass(frozen=True)
class Unit:
    """One exchange (one ``batch_isend_irecv``): (peer, bucket index) of every message it sends and receives."""
    sends: tuple[tuple[int, int], ...]
    recvs: tuple[tuple[int, int], ...]


def exchange_units(schedule: str, rank: int, world: int, send_buckets: dict[int, int],
                   recv_buckets: dict[int, int]) -> list[Unit]:
    """The order in which ``rank`` exchanges its buckets: ``send_buckets`` / ``recv_buckets`` map a peer to the
    number of buckets to / from it (peers in dict order). Every (peer, bucket) is in exactly one unit.

    - "rounds": unit r holds bucket r of every peer that has one (``max`` bucket count units);
    - "pairwise": for s = 1 .. world-1, send to (rank+s) % world and receive from (rank-s) % world, one unit per
      bucket index b < the larger of the two counts (a unit has only a send or only a receive where one side has
      fewer buckets). Rank j = rank+s walks the same step s receiving from rank, so its unit (s, b) posts the
      receive for this unit's send (both sides cut the same sizes, so the counts agree), and every rank walks
      (s, b) in the same order: no unit waits on one that its peer has not reached.
    """
    if schedule == "rounds":
        n = max([*send_buckets.values(), *recv_buckets.values()], default=0)
        return [Unit(tuple((p, r) for p, k in send_buckets.items() if r < k),
                     tuple((p, r) for p, k in recv_buckets.items() if r < k)) for r in range(n)]
    if schedule != "pairwise":
        raise ValueError(f"schedule={schedule!r}: must be one of {list(SCHEDULES)}")
    for side, counts in (("send to", send_buckets), ("receive from", recv_buckets)):
        bad = [p for p in counts if not (0 <= p < world) or p == rank]
        if bad:
            raise ValueError(f"pairwise schedule: rank {rank} has buckets to {side} peer(s) {bad}, which no step "
                             f"of a world of {world} pairs it with (peers must be other ranks in [0, {world}))")
    units = []
    for s in range(1, world):
        to, frm = (rank + s) % world, (rank - s) % world
        ns, nr = send_buckets.get(to, 0), recv_buckets.get(frm, 0)
        units += [Unit(((to, b),) if b < ns else (), ((frm, b),) if b < nr else ()) for b in range(max(ns, nr))]
    return units


def copy_all(dsts: list, srcs: list) -> None:
    """``dst.copy_(src)`` for every pair, in as few launches as torch allows: ``torch._foreach_copy_`` per group of
    one (dst dtype, src dtype) with both sides contiguous (its multi-tensor kernel), the others in one more call
    (torch loops over them in C++); per-tensor ``copy_`` where ``_foreach_copy_`` raises (older torch, odd
    layouts). Copies are idempotent, so a call that raised part-way is simply redone."""
    import torch

    groups: dict[tuple, tuple[list, list]] = {}
    for d, s in zip(dsts, srcs, strict=True):
        key = (d.dtype, s.dtype, d.is_contiguous() and s.is_contiguous())
        g = groups.get(key)
        if g is None:
            groups[key] = g = ([], [])
        g[0].append(d)
        g[1].append(s)
    foreach = getattr(torch, "_foreach_copy_", None)
    for ds, ss in groups.values():
        if foreach is not None:
            try:
                foreach(ds, ss)
                continue
            except (RuntimeError, TypeError, NotImplementedError):
                pass
        for d, s in zip(ds, ss, strict=True):
            d.copy_(s)


def make_service(bucket_bytes: int, group=None, stale: bool = False, overlap: bool = True,
                 schedule: str = "rounds", edge_bytes: int = 0):
    """A CoalescingCopyService that is also a megatron-core ``CopyService`` (0.16.x checks ``isinstance``; 0.17.x
    accepts any object with its methods). ``stale``: the testing hook :class:`StaleCopyService`; ``overlap``: CUDA
    side streams (module docstring; config ``coalesce_overlap``); ``schedule``: "rounds" or "pairwise"
    (:func:`exchange_units`; config ``coalesce_schedule``); ``edge_bytes``: the first and last bucket per peer at most
    this large (:func:`buckets`; config ``coalesce_edge_mib``; 0: off)."""
    from megatron.core.resharding.copy_services.base import CopyService

    base = StaleCopyService if stale else CoalescingCopyService

    class _Service(base, CopyService):
        pass

    return _Service(bucket_bytes, group, overlap, schedule, edge_bytes)


@dataclass
class Prepared:
    """Op lists built once and handed to :meth:`CoalescingCopyService.submit_prepared` on every refit (executor
    "replay", payload/refit/replay.py); the signature is computed once per (device, slots)."""
    sends: list
    recvs: list
    signatures: dict = field(default_factory=dict)


@dataclass
class _Bucket:
    """One message to or from one peer: the op indices it carries (in transfer order), the message (a slice of a
    staging buffer) and, per op, a typed view of the message with the op's shape."""
    ops: list[int]
    message: object  # torch.Tensor, uint8
    views: list


@dataclass
class _Plan:
    key: tuple
    local: list[tuple[int, int]]  # (recv index, send index) of same-rank copies
    sends: dict[int, list[_Bucket]]  # peer -> buckets in transfer order
    recvs: dict[int, list[_Bucket]]
    units: list[Unit]  # exchange order (exchange_units); unit u's buckets live in staging slot u % slots
    slots: int
    buffers: list = field(default_factory=list)  # keeps the staging memory (the views hold it too)

    @property
    def rounds(self) -> int:
        """Exchanges per run (one ``batch_isend_irecv`` each)."""
        return len(self.units)


class CoalescingCopyService:
    """megatron-core CopyService API (submit_send[_with_id], submit_recv[_with_id], run) over packed buckets."""

    def __init__(self, bucket_bytes: int, group=None, overlap: bool = True, schedule: str = "rounds",
                 edge_bytes: int = 0):
        import torch.distributed as dist

        if bucket_bytes <= 0:
            raise ValueError(f"bucket_bytes must be > 0, got {bucket_bytes}")
        if schedule not in SCHEDULES:
            raise ValueError(f"schedule={schedule!r}: must be one of {list(SCHEDULES)}")
        self.bucket_bytes = bucket_bytes
        self.group = group
        self.overlap = overlap
        self.schedule = schedule
        if edge_bytes < 0:
            raise ValueError(f"edge_bytes must be >= 0, got {edge_bytes}")
        self.edge_bytes = edge_bytes
        self.rank = group.rank() if group is not None else dist.get_rank()
        self.world = group.size() if group is not None else dist.get_world_size()
        self.sends: list[_Op] = []
        self.recvs: list[_Op] = []
        # rounds: exchanges (batch_isend_irecv calls, one per unit) summed over runs
        self.stats = {"rounds": 0, "messages": 0, "bytes": 0, "plan_builds": 0, "overlapped": False,
                      "schedule": schedule, "edge_bytes": edge_bytes}
        # Profiling (payload/refit/phases.py sets both): ms per phase of run(), with `phase_sync` (a CUDA sync)
        # before every clock read so the time lands in the phase that queued the work. None: no clock, no sync.
        self.phase_ms: dict[str, float] | None = None
        self.phase_sync = None
        self._prepared: Prepared | None = None  # set by submit_prepared, for the run that follows
        self._plan: _Plan | None = None  # the last signature's plan (one kept: a new signature replaces it)
        self._streams: tuple | None = None

    def submit_send(self, src_tensor, dest_rank: int, task_id: int | None = None) -> None:
        self.sends.append(_Op(task_id, src_tensor, dest_rank, len(self.sends)))

    def submit_send_with_id(self, task_id: int, src_tensor, dest_rank: int) -> None:
        self.sends.append(_Op(task_id, src_tensor, dest_rank, len(self.sends)))

    def submit_recv(self, dest_tensor, src_rank: int, task_id: int | None = None) -> None:
        self.recvs.append(_Op(task_id, dest_tensor, src_rank, len(self.recvs)))

    def submit_recv_with_id(self, task_id: int, dest_tensor, src_rank: int) -> None:
        self.recvs.append(_Op(task_id, dest_tensor, src_rank, len(self.recvs)))

    def submit_prepared(self, prepared: Prepared) -> None:
        """All sends and receives of a refit at once (replaces anything submitted before): the lists are used as
        they are, not copied (run() does not modify them), and their signature is computed once."""
        self.sends, self.recvs, self._prepared = prepared.sends, prepared.recvs, prepared

    def release(self) -> None:
        """Drop the cached plan and its staging buffers (the next run() builds them again)."""
        self._plan = None

    def run(self) -> None:
        import torch

        try:
            with torch.no_grad():
                plan = self._plan_for()
                overlapped = self._overlapping(plan)
                self.stats["overlapped"] = overlapped
                if overlapped:
                    self._run_overlapped(plan)
                else:
                    self._run_serial(plan)
        finally:
            # new lists, not clear(): prepared lists (submit_prepared) are kept by their owner
            self.sends, self.recvs, self._prepared = [], [], None

    # --- plan --------------------------------------------------------------------------------------------------
    def _device(self):
        first = self.sends[0] if self.sends else (self.recvs[0] if self.recvs else None)
        return first.tensor.device if first is not None else None

    def _slots_wanted(self, device) -> int:
        return 2 if self.overlap and self.phase_ms is None and device is not None and device.type == "cuda" else 1

    def _signature(self, device) -> tuple:
        prep = self._prepared
        if prep is not None and prep.sends is self.sends and prep.recvs is self.recvs:
            slots = self._slots_wanted(device)
            key = prep.signatures.get((device, slots))
            if key is None:
                key = prep.signatures[(device, slots)] = self._compute_signature(device)
            return key
        return self._compute_signature(device)

    def _compute_signature(self, device) -> tuple:
        return (self.rank, device, self._slots_wanted(device),
                tuple((op.peer, op.task_id, op.tensor.dtype, op.tensor.shape) for op in self.sends),
                tuple((op.peer, op.task_id, op.tensor.dtype, op.tensor.shape) for op in self.recvs))

    def _plan_for(self) -> _Plan:
        device = self._device()
        key = self._signature(device)
        if self._plan is None or self._plan.key != key:
            self._plan = None  # free the old buffers before allocating new ones
            self._plan = self._build_plan(key, device)
            self.stats["plan_builds"] += 1
        return self._plan

    def _build_plan(self, key: tuple, device) -> _Plan:
        import torch

        slots = key[2]
        local_sends = {op.task_id: op.order for op in self.sends if op.peer == self.rank}
        local = []
        for op in (r for r in self.recvs if r.peer == self.rank):
            src = local_sends.get(op.task_id) if op.task_id is not None else None
            if src is None:
                raise RuntimeError(f"coalescing copy service: rank {self.rank} has a local receive (task_id="
                                   f"{op.task_id}) without a matching local send with the same task_id")
            local.append((op.order, src))
        # per side, peer -> (ops in transfer order, sizes, [(op indices, offsets, message bytes) per bucket])
        layouts: tuple[dict, dict] = ({}, {})
        for ops, layout_of in ((self.sends, layouts[0]), (self.recvs, layouts[1])):
            for peer, items in self._ordered([op for op in ops if op.peer != self.rank]).items():
                sizes = [op.tensor.nbytes for op in items]
                layout = []
                for idx in buckets(sizes, self.bucket_bytes, self.edge_bytes):
                    offsets, off = [], 0
                    for i in idx:
                        offsets.append(off)
                        off += _aligned(sizes[i])
                    layout.append((idx, offsets, off))
                layout_of[peer] = (items, sizes, layout)
        units = exchange_units(self.schedule, self.rank, self.world, {p: len(v[2]) for p, v in layouts[0].items()},
                               {p: len(v[2]) for p, v in layouts[1].items()})
        # the staging slot of every bucket: its unit's index % slots, so unit u never shares a buffer with unit u-1
        slot_of: tuple[dict, dict] = ({}, {})
        for u, unit in enumerate(units):
            for where, pairs in ((slot_of[0], unit.sends), (slot_of[1], unit.recvs)):
                for pb in pairs:
                    if pb in where:
                        raise RuntimeError(f"coalescing copy service: schedule {self.schedule!r} has bucket {pb[1]} "
                                           f"of peer {pb[0]} in two units")
                    where[pb] = u % slots
        plan = _Plan(key, local, {}, {}, units, slots)
        for layout_of, where, side in ((layouts[0], slot_of[0], plan.sends), (layouts[1], slot_of[1], plan.recvs)):
            missing = [(p, b) for p, v in layout_of.items() for b in range(len(v[2])) if (p, b) not in where]
            if missing:
                raise RuntimeError(f"coalescing copy service: schedule {self.schedule!r} on rank {self.rank} leaves "
                                   f"(peer, bucket) {missing[:4]} out of every exchange")
            for peer, (items, sizes, layout) in layout_of.items():
                slot_bytes = [max((b[2] for r, b in enumerate(layout) if where[(peer, r)] == s), default=0)
                              for s in range(slots)]
                bufs = [torch.empty(n, dtype=torch.uint8, device=device) for n in slot_bytes]
                plan.buffers.extend(bufs)
                side[peer] = []
                for r, (idx, offsets, nbytes) in enumerate(layout):
                    message = bufs[where[(peer, r)]][:nbytes]
                    views = [message[o:o + sizes[i]].view(items[i].tensor.dtype).view(items[i].tensor.shape)
                             for i, o in zip(idx, offsets, strict=True)]
                    side[peer].append(_Bucket([items[i].order for i in idx], message, views))
        return plan

    @staticmethod
    def _ordered(ops: list[_Op]) -> dict[int, list[_Op]]:
        by_peer: dict[int, list[_Op]] = {}
        for op in ops:
            by_peer.setdefault(op.peer, []).append(op)
        for peer, items in by_peer.items():
            if all(op.task_id is not None for op in items):
                items.sort(key=lambda op: op.task_id)
            elif any(op.task_id is not None for op in items):
                raise RuntimeError(f"coalescing copy service: ops with and without task_id to/from rank {peer}")
        return by_peer

    # --- the phases, shared by both paths ----------------------------------------------------------------------
    def _local_copies(self, plan: _Plan) -> None:
        if plan.local:
            copy_all([self.recvs[r].tensor for r, _ in plan.local], [self.sends[s].tensor for _, s in plan.local])

    def _pack(self, plan: _Plan, u: int) -> None:
        dsts, srcs = [], []
        for peer, r in plan.units[u].sends:
            b = plan.sends[peer][r]
            dsts.extend(b.views)
            srcs.extend(self.sends[i].tensor for i in b.ops)
        if dsts:
            copy_all(dsts, srcs)

    def _unpack(self, plan: _Plan, u: int) -> None:
        dsts, srcs = [], []
        for peer, r in plan.units[u].recvs:
            b = plan.recvs[peer][r]
            dsts.extend(self.recvs[i].tensor for i in b.ops)
            srcs.extend(b.views)
        if dsts:
            copy_all(dsts, srcs)

    def _exchange(self, plan: _Plan, u: int) -> list:
        """Post unit u's sends and receives (one batch_isend_irecv); returns the requests."""
        import torch.distributed as dist

        unit = plan.units[u]
        p2p = [dist.P2POp(dist.isend, plan.sends[peer][r].message, peer, group=self.group) for peer, r in unit.sends]
        p2p += [dist.P2POp(dist.irecv, plan.recvs[peer][r].message, peer, group=self.group)
                for peer, r in unit.recvs]
        self.stats["rounds"] += 1
        self.stats["messages"] += len(p2p)
        self.stats["bytes"] += sum(op.tensor.numel() for op in p2p)
        return dist.batch_isend_irecv(p2p) if p2p else []

    # --- serial path (CPU, profiling, overlap off) -------------------------------------------------------------
    def _run_serial(self, plan: _Plan) -> None:
        t = self._clock()
        self._local_copies(plan)
        self._lap("local", t)
        for r in range(plan.rounds):
            t = self._clock()
            self._pack(plan, r)
            t = self._lap("pack", t)
            for req in self._exchange(plan, r):
                req.wait()
            t = self._lap("comm", t)
            self._unpack(plan, r)
            self._lap("unpack", t)

    # --- overlapped path (CUDA) --------------------------------------------------------------------------------
    def _overlapping(self, plan: _Plan) -> bool:
        return plan.slots == 2 and self.phase_ms is None

    def _side_streams(self, device) -> tuple:
        import torch

        if self._streams is None or self._streams[0] != device:
            self._streams = (device, *(torch.cuda.Stream(device=device) for _ in range(3)))
        return self._streams[1:]

    def _run_overlapped(self, plan: _Plan) -> None:
        """Event order (main = the caller's current stream, where NCCL ops are ordered; megatron-core and the
        payload see only main):

        - every side stream first waits for main (the sources were written and the destinations poisoned there);
        - local copies run on ``local_s`` from the start, next to the exchanges;
        - r indexes the exchange units (``plan.units``, in schedule order; with "rounds" unit r is bucket index r);
          unit r's buckets live in staging slot r % 2 of their peer's buffers, so the last unit that used a slot of
          unit r is r - 2 or earlier (main and the side streams run in order: waiting for r - 2 covers those);
        - pack(r) on ``pack_s`` writes send slot r % 2, last read by the sends of unit r - 2 or before: it waits
          comm_done[r-2] (pack(r + 1) is queued right after unit r's NCCL ops, so it runs while they do);
        - unit r's NCCL ops (their stream waits on main at launch) come after main waits pack_done[r] and, for the
          receive slot r % 2, unpack_done[r-2] (the unpack that last read it); ``req.wait()`` then makes main wait
          for the NCCL stream, and comm_done[r] is recorded on main;
        - unpack(r) on ``unpack_s`` waits comm_done[r];
        - at the end main waits for all three side streams, so anything after run() on main (write-back, frees and
          reallocation of temporaries allocated on main) sees every copy done. The staging buffers live in the
          plan, so the caching allocator cannot hand them out while a side stream or NCCL still uses them; the
          slices themselves are the caller's and stay alive until run() returns, after which main is ordered
          behind all the work (no record_stream needed).
        """
        import torch

        device = plan.key[1]
        main = torch.cuda.current_stream(device)
        local_s, pack_s, unpack_s = self._side_streams(device)
        start = main.record_event()
        for s in (local_s, pack_s, unpack_s):
            s.wait_event(start)
        with torch.cuda.stream(local_s):
            self._local_copies(plan)
        pack_done: list = [None] * plan.rounds
        comm_done: list = [None] * plan.rounds
        unpack_done: list = [None] * plan.rounds

        def pack(r: int) -> None:
            with torch.cuda.stream(pack_s):
                if r >= 2:
                    pack_s.wait_event(comm_done[r - 2])
                self._pack(plan, r)
                pack_done[r] = pack_s.record_event()

        if plan.rounds:
            pack(0)
        for r in range(plan.rounds):
            main.wait_event(pack_done[r])
            if r >= 2:
                main.wait_event(unpack_done[r - 2])
            reqs = self._exchange(plan, r)
            if r + 1 < plan.rounds:
                pack(r + 1)
            for req in reqs:
                req.wait()
            comm_done[r] = main.record_event()
            with torch.cuda.stream(unpack_s):
                unpack_s.wait_event(comm_done[r])
                self._unpack(plan, r)
                unpack_done[r] = unpack_s.record_event()
        for s in (local_s, pack_s, unpack_s):
            main.wait_stream(s)

    # --- profiling ---------------------------------------------------------------------------------------------
    def _clock(self) -> float:
        import time

        if self.phase_ms is None:
            return 0.0
        if self.phase_sync is not None:
            self.phase_sync()
        return time.perf_counter()

    def _lap(self, phase: str, since: float) -> float:
        """Add the time since `since` to `phase` (profiling on) and return the new start."""
        if self.phase_ms is None:
            return 0.0
        now = self._clock()
        self.phase_ms[phase] = self.phase_ms.get(phase, 0.0) + (now - since) * 1e3
        return now


class StaleCopyService(CoalescingCopyService):
    """Testing hook (refit config ``_stale_copy_service``): the bug class of Megatron-LM #6823, where a transport's
    local copies left the destination with earlier weights. The first refit's source slices are kept, and every
    later refit sends those instead of the current ones; bytes, messages and timing stay as they were. A refit check
    that only looks for NaN, or compares against weights that never change, passes it."""

    def __init__(self, bucket_bytes: int, group=None, overlap: bool = True, schedule: str = "rounds",
                 edge_bytes: int = 0):
        super().__init__(bucket_bytes, group, overlap, schedule, edge_bytes)
        self._kept: list = []
        self._refit = 0

    def run(self) -> None:
        if self._refit == 0:
            self._kept = [op.tensor.detach().clone() for op in self.sends]
        else:  # new _Op objects: the submitted ones may be a replay's prepared list, reused every refit
            self.sends = [_Op(op.task_id, kept, op.peer, op.order) if kept is not None else op
                          for op, kept in zip(self.sends, self._kept + [None] * len(self.sends), strict=False)]
        self._refit += 1
        super().run()
