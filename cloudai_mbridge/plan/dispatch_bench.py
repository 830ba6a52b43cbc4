"""The dispatch microbenchmark's point, without CloudAI: the payload config from the model catalog (its rules:
rules/dispatch_bench.py). Used by the CloudAI test (workloads/dispatch_bench) and by the GPU
window's driver (benchmarks/gpu_dispatch_bench.py), which runs where CloudAI is not installed."""

from __future__ import annotations

from typing import Any

from ..catalog import get_model


def bench_config(*, model: str, dispatcher: str, seq_length: int, mbs: int, warmup: int, iterations: int,
                 dtype: str, capacity_factor: float | None, deepep_impl: str | None, seed: int,
                 ranks: int) -> dict[str, Any]:
    """mbridge_config.json of one point (payload/dispatch_bench reads it): the model's shapes from the catalog."""
    m = get_model(model)
    return {
        "workload": "dispatch_bench",
        "model": m.name,
        "hidden_size": m.hidden_size,
        "num_experts": m.num_experts,
        "topk": m.moe_router_topk,
        "seq_length": seq_length,
        "mbs": mbs,
        "dispatcher": dispatcher,
        "warmup": warmup,
        "iterations": iterations,
        "dtype": dtype,
        "moe_expert_rank_capacity_factor": capacity_factor if dispatcher == "ncclep" else None,
        "deepep_impl": deepep_impl if dispatcher == "deepep" else None,
        "seed": seed,
        "world_size": ranks,
    }
