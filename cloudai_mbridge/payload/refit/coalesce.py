"""A copy service for megatron-core's ``swap_model_weights`` that sends few large messages instead of many slices.

megatron-core's NCCL copy service posts one send/recv per planned slice in one ``batch_isend_irecv``; for a
Kimi-K2-shaped TP2 -> EP2 refit that is 4670 operations of ~8 MiB, and on 2x H200 the refit moved 66 GB/s per GPU
where one 4 GiB exchange moves 359 GB/s (benchmarks/results/gpu_refit_nccl.md; the profile puts 415 of 474 ms in
NCCL kernels). This service keeps the plan (same slices, same peers, same bytes) and changes only the transport:

- per peer, the slices are ordered by the planner's ``task_id`` (both sides hold the same ids for the same transfer;
  without ids, the order of submission, which is what megatron-core's own service relies on);
- they are packed back to back (16-byte aligned) into buckets of at most ``bucket_bytes`` (a slice larger than a
  bucket gets one of its own); both sides cut the same ordered sizes the same way, so bucket ``i`` to a peer is
  bucket ``i`` from it;
- one round per bucket index: pack every peer's bucket, one ``batch_isend_irecv`` for all peers, wait, unpack.
  Staging memory is one send and one receive bucket per peer.

Same-rank slices are copied directly, as megatron-core does. Works on any backend that has ``isend``/``irecv``
(NCCL on GPUs, gloo on CPUs, which is how the tests check it bit for bit).
"""

from __future__ import annotations

from dataclasses import dataclass

ALIGN = 16


@dataclass
class _Op:
    task_id: int | None
    tensor: object  # torch.Tensor
    peer: int
    order: int


def _aligned(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


def buckets(sizes: list[int], bucket_bytes: int) -> list[list[int]]:
    """Indices of ``sizes`` (bytes, in transfer order) grouped into consecutive buckets of at most ``bucket_bytes``
    (aligned sizes); a single item larger than that is a bucket of its own."""
    out: list[list[int]] = []
    used = bucket_bytes + 1
    for i, size in enumerate(sizes):
        need = _aligned(size)
        if used + need > bucket_bytes:
            out.append([])
            used = 0
        out[-1].append(i)
        used += need
    return out


def make_service(bucket_bytes: int, group=None, stale: bool = False):
    """A CoalescingCopyService that is also a megatron-core ``CopyService`` (0.16.x checks ``isinstance``; 0.17.x
    accepts any object with its methods). ``stale``: the testing hook :class:`StaleCopyService`."""
    from megatron.core.resharding.copy_services.base import CopyService

    base = StaleCopyService if stale else CoalescingCopyService

    class _Service(base, CopyService):
        pass

    return _Service(bucket_bytes, group)


class CoalescingCopyService:
    """megatron-core CopyService API (submit_send[_with_id], submit_recv[_with_id], run) over packed buckets."""

    def __init__(self, bucket_bytes: int, group=None):
        import torch.distributed as dist

        if bucket_bytes <= 0:
            raise ValueError(f"bucket_bytes must be > 0, got {bucket_bytes}")
        self.bucket_bytes = bucket_bytes
        self.group = group
        self.rank = group.rank() if group is not None else dist.get_rank()
        self.sends: list[_Op] = []
        self.recvs: list[_Op] = []
        self.stats = {"rounds": 0, "messages": 0, "bytes": 0}
        # Profiling (payload/refit/phases.py sets both): ms per phase of run(), with `phase_sync` (a CUDA sync)
        # before every clock read so the time lands in the phase that queued the work. None: no clock, no sync.
        self.phase_ms: dict[str, float] | None = None
        self.phase_sync = None

    def submit_send(self, src_tensor, dest_rank: int, task_id: int | None = None) -> None:
        self.sends.append(_Op(task_id, src_tensor, dest_rank, len(self.sends)))

    def submit_send_with_id(self, task_id: int, src_tensor, dest_rank: int) -> None:
        self.sends.append(_Op(task_id, src_tensor, dest_rank, len(self.sends)))

    def submit_recv(self, dest_tensor, src_rank: int, task_id: int | None = None) -> None:
        self.recvs.append(_Op(task_id, dest_tensor, src_rank, len(self.recvs)))

    def submit_recv_with_id(self, task_id: int, dest_tensor, src_rank: int) -> None:
        self.recvs.append(_Op(task_id, dest_tensor, src_rank, len(self.recvs)))

    def run(self) -> None:
        import torch

        try:
            with torch.no_grad():
                t = self._clock()
                self._local_copies()
                self._lap("local", t)
                self._remote()
        finally:
            self.sends.clear()
            self.recvs.clear()

    def _local_copies(self) -> None:
        sends = {op.task_id: op for op in self.sends if op.peer == self.rank}
        for op in (r for r in self.recvs if r.peer == self.rank):
            src = sends.get(op.task_id) if op.task_id is not None else None
            if src is None:
                raise RuntimeError(f"coalescing copy service: rank {self.rank} has a local receive (task_id="
                                   f"{op.task_id}) without a matching local send with the same task_id")
            op.tensor.copy_(src.tensor)

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

    def _bucketed(self, by_peer: dict[int, list[_Op]]) -> dict[int, list[list[int]]]:
        return {peer: buckets([op.tensor.nbytes for op in ops], self.bucket_bytes) for peer, ops in by_peer.items()}

    def _remote(self) -> None:
        import torch
        import torch.distributed as dist

        sends = self._ordered([op for op in self.sends if op.peer != self.rank])
        recvs = self._ordered([op for op in self.recvs if op.peer != self.rank])
        send_plan, recv_plan = self._bucketed(sends), self._bucketed(recvs)
        rounds = max([len(b) for b in (*send_plan.values(), *recv_plan.values())], default=0)
        for r in range(rounds):
            t = self._clock()
            p2p, unpack = [], []
            for peer, plan in send_plan.items():
                if r < len(plan):
                    p2p.append(dist.P2POp(dist.isend, self._pack([sends[peer][i].tensor for i in plan[r]]), peer,
                                          group=self.group))
            for peer, plan in recv_plan.items():
                if r < len(plan):
                    targets = [recvs[peer][i].tensor for i in plan[r]]
                    buf = torch.empty(sum(_aligned(t.nbytes) for t in targets), dtype=torch.uint8,
                                      device=targets[0].device)
                    p2p.append(dist.P2POp(dist.irecv, buf, peer, group=self.group))
                    unpack.append((buf, targets))
            t = self._lap("pack", t)
            for req in dist.batch_isend_irecv(p2p):
                req.wait()
            t = self._lap("comm", t)
            for buf, targets in unpack:
                self._unpack(buf, targets)
            self._lap("unpack", t)
            self.stats["rounds"] += 1
            self.stats["messages"] += len(p2p)
            self.stats["bytes"] += sum(op.tensor.numel() for op in p2p)

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

    @staticmethod
    def _pack(tensors: list) -> object:
        import torch

        buf = torch.empty(sum(_aligned(t.nbytes) for t in tensors), dtype=torch.uint8, device=tensors[0].device)
        offset = 0
        for t in tensors:
            buf[offset:offset + t.nbytes].view(t.dtype).view(t.shape).copy_(t)
            offset += _aligned(t.nbytes)
        return buf

    @staticmethod
    def _unpack(buf, targets: list) -> None:
        offset = 0
        for t in targets:
            t.copy_(buf[offset:offset + t.nbytes].view(t.dtype).view(t.shape))
            offset += _aligned(t.nbytes)


class StaleCopyService(CoalescingCopyService):
    """Testing hook (refit config ``_stale_copy_service``): the bug class of Megatron-LM #6823, where a transport's
    local copies left the destination with earlier weights. The first refit's source slices are kept, and every
    later refit sends those instead of the current ones; bytes, messages and timing stay as they were. A refit check
    that only looks for NaN, or compares against weights that never change, passes it."""

    def __init__(self, bucket_bytes: int, group=None):
        super().__init__(bucket_bytes, group)
        self._kept: list = []
        self._refit = 0

    def run(self) -> None:
        if self._refit == 0:
            self._kept = [op.tensor.detach().clone() for op in self.sends]
        else:
            for op, kept in zip(self.sends, self._kept, strict=False):
                op.tensor = kept
        self._refit += 1
        super().run()
