"""The dispatch microbenchmark's rules: what refuses a point (plan/dispatch_bench.py's config) before GPUs are spent.
Used by the CloudAI test (workloads/dispatch_bench) and by the GPU window's driver (benchmarks/gpu_dispatch_bench.py),
which runs where CloudAI is not installed."""

from __future__ import annotations

import math
from typing import Any

from .base import Violation

NCCLEP_MAX_TOKENS = 8192  # rules/training.py ncclep-limits: NCCL EP's MAX_SUPPORTED_TOKENS_PER_RANK
DISPATCH_BENCH_RULES = ("dispatch-bench-ep", "dispatch-bench-ncclep", "dispatch-bench-deepep")


def bench_violations(config: dict[str, Any], capacity_factor: float | None = None,
                     deepep_impl: str | None = None) -> list[Violation]:
    c = config
    out = []
    if c["world_size"] < 2:
        out.append(Violation("dispatch-bench-ep", {"ranks": c["world_size"]},
                             "one rank exchanges no tokens: dispatch and combine would time local copies",
                             "run on a system with at least 2 GPUs (the A/B's cells use 4)"))
    elif c["num_experts"] % c["world_size"]:
        out.append(Violation("dispatch-bench-ep",
                             {"model": c["model"], "num_experts": c["num_experts"], "ranks": c["world_size"]},
                             "every rank holds the same number of experts, so the ranks must divide the experts",
                             "run on a number of GPUs that divides num_experts"))
    tokens = c["seq_length"] * c["mbs"]
    if c["dispatcher"] == "ncclep" and math.ceil(tokens / 64) * 64 > NCCLEP_MAX_TOKENS:
        out.append(Violation("dispatch-bench-ncclep", {"seq_length": c["seq_length"], "mbs": c["mbs"]},
                             f"a rank would dispatch {tokens} tokens; NCCL EP's kernels take at most "
                             f"{NCCLEP_MAX_TOKENS} (as the training rule ncclep-limits)",
                             "lower mbs or seq_length for the ncclep arm"))
    if c["dispatcher"] == "ncclep" and capacity_factor is None:
        out.append(Violation("dispatch-bench-ncclep", {"moe_expert_rank_capacity_factor": None},
                             "NCCL EP needs a receive capacity per rank",
                             "set moe_expert_rank_capacity_factor (training used 1.5)"))
    if c["dispatcher"] == "deepep" and deepep_impl is None:
        out.append(Violation("dispatch-bench-deepep", {"deepep_impl": None},
                             "the deepep arm must say which DeepEP it expects (the payload checks the one it gets)",
                             "set deepep_impl = \"uccl\" or \"nvidia\""))
    return out
