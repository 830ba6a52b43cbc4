"""MBridgeDispatchBench: Megatron-Core's MoE token dispatch and combine, timed per call, at a training A/B's shapes.

One point = one dispatcher at one model's shapes (hidden, top-k, experts) and tokens per rank (seq_length x mbs) on
every GPU of the allocation (ep = the ranks). Sweep ``dispatcher`` (and ``mbs``) with CloudAI's DSE grid; the A/B
report (reports/ab.py) puts each backend's latency and bandwidth beside the training delta of the same scenario's
results. The payload is payload/dispatch_bench.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from cloudai.core import System, TestRun
from cloudai.models.workload import CmdArgs
from pydantic import ConfigDict, Field, field_validator

from ...catalog import MODELS, get_model
from ...plan.dispatch_bench import bench_config
from ...rules import Violation
from ...rules.dispatch_bench import DISPATCH_BENCH_RULES, bench_violations
from ...systems.common import system_gpus_per_node
from ..base import MBridgeTestDefinition
from ..fields import BatchSize, Repeats, Seed, SeqLength, check_expected_rejections, check_image, check_python

ModelName = Literal[tuple(MODELS)]  # type: ignore[valid-type]
BenchDispatcher = Literal["alltoall", "deepep", "ncclep"]
DeepEPImpl = Literal["uccl", "nvidia"]
Capacity = float  # finite and > 0, checked below


@dataclass(frozen=True)
class DispatchBenchPlan:
    """What preflight asks of a point: its GPUs (one rank each), and the payload config."""

    world_size: int
    config: dict[str, Any]


class MBridgeDispatchBenchCmdArgs(CmdArgs):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    model: ModelName | list[ModelName]
    dispatcher: BenchDispatcher | list[BenchDispatcher]
    seq_length: SeqLength = 4096
    mbs: BatchSize | list[BatchSize] = 1
    warmup: Repeats = 10
    iterations: Repeats = 200
    dtype: Literal["bf16", "fp32"] = "bf16"
    # NCCL EP's receive capacity per rank, as in training (moe_expert_rank_capacity_factor); ncclep only
    moe_expert_rank_capacity_factor: float | None = Field(default=1.5, gt=0)
    deepep_impl: DeepEPImpl | None = "uccl"
    seed: Seed = 1234
    container_image: str | None = None
    # None: python3 in a container, else the interpreter that runs CloudAI (sys.executable)
    python: str | None = None
    expected_rejections: str = ""

    @field_validator("container_image")
    @classmethod
    def _image(cls, v: str | None) -> str | None:
        return check_image(v)

    @field_validator("python")
    @classmethod
    def _python(cls, v: str | None) -> str | None:
        return check_python(v)

    @field_validator("expected_rejections", mode="before")
    @classmethod
    def _expected(cls, v: object) -> object:
        return check_expected_rejections(v, DISPATCH_BENCH_RULES, "MBridgeDispatchBench")


class MBridgeDispatchBenchTestDefinition(MBridgeTestDefinition):
    """Dispatch/combine microbenchmark (template name ``MBridgeDispatchBench``)."""

    cmd_args: MBridgeDispatchBenchCmdArgs

    def ranks(self, tr: TestRun, system: System | None) -> int:
        return tr.nnodes * system_gpus_per_node(system, None)

    def payload_config(self, tr: TestRun, system: System | None) -> dict[str, Any]:
        a = self.cmd_args
        return bench_config(model=a.model, dispatcher=a.dispatcher, seq_length=a.seq_length, mbs=a.mbs,
                            warmup=a.warmup, iterations=a.iterations, dtype=a.dtype,
                            capacity_factor=a.moe_expert_rank_capacity_factor, deepep_impl=a.deepep_impl,
                            seed=a.seed, ranks=self.ranks(tr, system))

    def plan(self, tr: TestRun, system: System | None) -> DispatchBenchPlan:
        return DispatchBenchPlan(self.ranks(tr, system), self.payload_config(tr, system))

    def rule_violations(self, tr: TestRun, system: System | None) -> list[Violation]:
        a = self.cmd_args
        return bench_violations(self.payload_config(tr, system), a.moe_expert_rank_capacity_factor, a.deepep_impl)

    def describe(self, tr: TestRun, system: System | None) -> str | None:
        a = self.cmd_args
        m = get_model(a.model)
        return (f"dispatch bench {a.dispatcher}: {m.name} hidden {m.hidden_size}, top-{m.moe_router_topk} of "
                f"{m.num_experts} experts, {a.seq_length * a.mbs} tokens per rank, ep {self.ranks(tr, system)}")
