"""GPU types: memory, node shape, NVLink domain and which MoE dispatcher backends Megatron accepts on them.

Dispatcher support follows Megatron-Bridge's flex dispatcher backend check (training/flex_dispatcher_backend.py):
DeepEP on compute capability 8.x/9.x or device names starting with B200/B300; HybridEP on 8.x/9.x/10.x. GB200/GB300
with DeepEP is rejected there (the Grace-Blackwell parts report a name Bridge does not allow for DeepEP) and we
reject it too instead of letting the run fall back to all-to-all.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class GPUSpec:
    name: str
    memory_gib: float  # usable HBM per GPU as the driver reports it
    gpus_per_node: int
    nvlink_domain: int  # GPUs reachable over NVLink without the network
    compute_capability: tuple[int, int]
    deepep: bool
    hybridep: bool
    fp8_recipes: frozenset[str]

    @property
    def is_blackwell(self) -> bool:
        return self.compute_capability[0] >= 10


_HOPPER_FP8 = frozenset({"delayed", "tensorwise", "blockwise"})
_BLACKWELL_FP8 = frozenset({"delayed", "tensorwise", "blockwise", "mxfp8"})

GPUS: dict[str, GPUSpec] = {
    g.name: g
    for g in (
        GPUSpec("h100", 79.6, 8, 8, (9, 0), deepep=True, hybridep=True, fp8_recipes=_HOPPER_FP8),
        GPUSpec("h200", 139.8, 8, 8, (9, 0), deepep=True, hybridep=True, fp8_recipes=_HOPPER_FP8),
        GPUSpec("b200", 178.4, 8, 8, (10, 0), deepep=True, hybridep=True, fp8_recipes=_BLACKWELL_FP8),
        GPUSpec("b300", 268.0, 8, 8, (10, 3), deepep=True, hybridep=True, fp8_recipes=_BLACKWELL_FP8),
        GPUSpec("gb200", 184.0, 4, 72, (10, 0), deepep=False, hybridep=True, fp8_recipes=_BLACKWELL_FP8),
        GPUSpec("gb300", 268.0, 4, 72, (10, 3), deepep=False, hybridep=True, fp8_recipes=_BLACKWELL_FP8),
    )
}


def get_gpu(name: str) -> GPUSpec:
    try:
        return GPUS[name]
    except KeyError:
        raise ValueError(f"unknown GPU type {name!r}; known: {', '.join(GPUS)}") from None
