"""MBridgeRefit: reshard real Megatron-Core MoE weights from a training layout to an inference layout."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from cloudai.core import System, TestRun
from cloudai.models.workload import CmdArgs
from pydantic import BaseModel, ConfigDict, Field, StrictInt, field_validator

from ...catalog import MODELS, get_model
from ...payload.refit.config import resolve_sides
from ...plan.refit import RefitPlan, refit_model
from ...rules import Violation
from ...rules.refit import REFIT_RULES
from ..base import MBridgeTestDefinition
from ..fields import (
    Bool,
    GPUCount,
    MiB,
    ModelLayers,
    Parallel,
    Repeats,
    Seed,
    SeqLength,
    check_expected_rejections,
    check_image,
    check_python,
)

ModelName = Literal[tuple(MODELS)]  # type: ignore[valid-type]
Mode = Literal["collocated", "non-collocated"]
Transport = Literal["gloo", "nccl", "nvshmem", "nixl"]
Executor = Literal["megatron", "replay", "both"]
Schedule = Literal["rounds", "pairwise"]


def new_run_id() -> str:
    """A fresh id for one generated refit job, written into its mbridge_config.json: the payload prints it back on
    every rank, and the report refuses logs that carry another run's id (metrics/refit.py)."""
    import uuid

    return uuid.uuid4().hex


class RefitSide(BaseModel):
    """One layout. A size left unset takes upstream's value (payload/refit/config.py resolve_sides): on the source
    tp, pp, ep = 1 and etp = tp; on the destination the source's, etp included. ``world`` (non-collocated only)
    gives the side another rank count than tp*pp*ep."""

    model_config = ConfigDict(extra="forbid")

    tp: Parallel | list[Parallel] | None = None
    pp: Parallel | list[Parallel] | None = None
    ep: Parallel | list[Parallel] | None = None
    etp: Parallel | list[Parallel] | None = None
    world: GPUCount | None = None


class MBridgeRefitCmdArgs(CmdArgs):
    model_config = ConfigDict(extra="forbid")

    model: ModelName | list[ModelName]
    num_layers: ModelLayers | None = None  # fewer layers than the model has (the report says so)
    # at most the model's max_position_embeddings (rule refit-model-size); None: 4096, or that maximum when smaller
    seq_length: SeqLength | None = None
    src: RefitSide
    dst: RefitSide
    mode: Mode | list[Mode] = "collocated"
    # Megatron-LM's --refit-method default (training/arguments.py:2698, 0.19.2); "nccl" on GPUs is much faster
    transport: Transport | list[Transport] = "gloo"
    # > 0: the plan's slices packed into messages of at most this many MiB per peer (payload/refit/coalesce.py)
    coalesce_mib: MiB | list[MiB] = 0
    # "replay" (coalesce_mib > 0 only, rule refit-executor-coalesce): refits after the first hand megatron-core's
    # cached plan straight to the coalescing service (payload/refit/replay.py); "megatron": swap_model_weights;
    # "both" (coalesce_mib > 0): one job times Megatron-Core's own service for `transport` and then "replay", and the
    # same run's exchange ceiling; the refit report shows both side by side with the speed-up (reports/refit_table.py)
    executor: Executor | list[Executor] = "megatron"
    # coalesce_mib > 0 only (rule refit-schedule-coalesce): "rounds" sends bucket i to every peer at once, "pairwise"
    # one peer pair at a time (step s: rank i sends to i + s); 4 x H200 TP4 -> EP4, replay, 1 GiB: 37.8 ms pairwise
    # against 40.8 ms rounds in one command (benchmarks/results/refit_4gpu/README.md, host 4)
    coalesce_schedule: Schedule | list[Schedule] = "rounds"
    # coalesce_mib > 0 only, below it (rule refit-edge-coalesce): the first and last message per peer at most this many
    # MiB, so the pack before the first transfer and the unpack after the last one (the copies no transfer hides)
    # are short; 0: those messages are as large as the others
    coalesce_edge_mib: MiB | list[MiB] = 0
    device: Literal["cuda", "cpu"] = "cuda"
    dtype: Literal["bf16", "fp16", "fp32"] = "bf16"
    # Megatron-LM examples/rl/benchmark_refit.py: --num-benchmark-warmup 2, --num-benchmark-iterations 10
    warmup: Repeats = 2
    iterations: Repeats = 10
    verify: Bool = True
    timeout_s: Annotated[StrictInt, Field(ge=1, le=7 * 24 * 3600)] = 1800  # at most a week
    seed: Seed = 1234
    container_image: str | None = None
    # None: python3 in a container, else the interpreter that runs CloudAI (sys.executable)
    python: str | None = None
    # Rule ids (comma-separated) whose rejections of sweep points are intended: `run` exits 0 despite them.
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
        return check_expected_rejections(v, tuple(REFIT_RULES.rules), "MBridgeRefit")


class MBridgeRefitTestDefinition(MBridgeTestDefinition):
    """Megatron-Core refit benchmark (template name ``MBridgeRefit``)."""

    cmd_args: MBridgeRefitCmdArgs

    def payload_config(self) -> dict[str, Any]:
        a = self.cmd_args
        side = ("tp", "pp", "ep", "etp", "world")
        src, dst = resolve_sides({k: getattr(a.src, k) for k in side}, {k: getattr(a.dst, k) for k in side})
        return {
            "model": refit_model(get_model(a.model), a.num_layers, a.seq_length),
            "src": src,
            "dst": dst,
            "mode": a.mode,
            "transport": a.transport,
            "coalesce_mib": a.coalesce_mib,
            "executor": a.executor,
            "coalesce_schedule": a.coalesce_schedule,
            "coalesce_edge_mib": a.coalesce_edge_mib,
            "device": a.device,
            "dtype": a.dtype,
            "warmup": a.warmup,
            "iterations": a.iterations,
            "verify": a.verify,
            "timeout_s": a.timeout_s,
            "seed": a.seed,
        }

    def plan(self, tr: TestRun, system: System | None) -> RefitPlan:
        gpus = getattr(system, "gpus_per_node", None)
        tasks = gpus or getattr(system, "ntasks_per_node", None) or 1
        return RefitPlan(self.payload_config(), tr.nnodes, tasks, system_has_gpus=bool(gpus))

    def rule_violations(self, tr: TestRun, system: System | None) -> list[Violation]:
        return REFIT_RULES.check(self.plan(tr, system))
