"""A fingerprint of the routers' expert choices per training step, so that an A/B can prove both arms routed the same
tokens to the same experts (a dispatcher must not change routing; a faster arm that routed differently did other
work).

Every Megatron-Core router (``TopKRouter`` and subclasses: their ``forward`` returns ``(probs, routing_map)``, the
map a bool ``[tokens, experts]`` tensor; megatron/core/transformer/moe/router.py L840-L868 in 0.19.2) gets a forward
hook. The hook folds the map into one int64 on the GPU: the sum of fixed pseudo-random weights at the chosen
(token, expert) cells, chained over the calls of a step in call order (``acc = acc * P + sum``, wrapping). No host
sync in the hook; :meth:`RoutingHash.take` reads the step's value once, after the step (Megatron has synced for its
log line by then). Rank logs carry ``MBRIDGE_ROUTING rank=<r> iteration=<i> calls=<n> hash=<16 hex digits>``.
"""

from __future__ import annotations

from typing import Any

TAG = "MBRIDGE_ROUTING"
_PRIME = 1_000_003
_SEED = 20261127


def _routing_map(output: Any) -> Any:
    """The bool tensor of a router's output (``(probs, routing_map)``), None if there is none."""
    import torch

    items = output if isinstance(output, (tuple, list)) else (output,)
    for item in items:
        if isinstance(item, torch.Tensor) and item.dtype == torch.bool:
            return item
    return None


def is_router(module: Any) -> bool:
    return any(cls.__name__.endswith("Router") for cls in type(module).__mro__[:-1])


class RoutingHash:
    def __init__(self) -> None:
        self._acc = None
        self._weights = None
        self.calls = 0
        self._handles: list[Any] = []

    def _weights_for(self, n: int, device: Any) -> Any:
        import torch

        if self._weights is None or self._weights.numel() < n or self._weights.device != device:
            g = torch.Generator(device="cpu").manual_seed(_SEED)
            size = max(n, 1 << 16)
            self._weights = torch.randint(1, 2**31 - 1, (size,), generator=g, dtype=torch.int64).to(device)
        return self._weights[:n]

    def _hook(self, module: Any, inputs: Any, output: Any) -> None:
        import torch

        routing_map = _routing_map(output)
        if routing_map is None:
            return
        flat = routing_map.detach().reshape(-1)
        value = (flat.to(torch.int64) * self._weights_for(flat.numel(), flat.device)).sum()
        if self._acc is None or self._acc.device != flat.device:
            self._acc = torch.zeros((), dtype=torch.int64, device=flat.device)
        self._acc.mul_(_PRIME).add_(value)
        self.calls += 1

    def attach(self, model_chunks: list[Any]) -> int:
        """Hook every router under the model chunks; returns how many were hooked."""
        for chunk in model_chunks:
            for module in chunk.modules():
                if is_router(module):
                    self._handles.append(module.register_forward_hook(self._hook))
        return len(self._handles)

    def take(self) -> tuple[int, str | None]:
        """(calls, hash) of the step that just ended, then start over; hash None when no router ran."""
        calls, acc = self.calls, self._acc
        self.calls, self._acc = 0, None
        if acc is None:
            return calls, None
        return calls, format(int(acc.item()) & 0xFFFF_FFFF_FFFF_FFFF, "016x")

    def detach(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles.clear()


def routing_line(rank: int, iteration: int, calls: int, digest: str | None, extra: str = "") -> str:
    """``extra``: optional fields after the hash (payload/train/dispatch_timing.py timing_fields)."""
    return f"{TAG} rank={rank} iteration={iteration} calls={calls} hash={digest or 'none'}{extra}"
