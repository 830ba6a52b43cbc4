"""MBridgeTraining: Megatron-Bridge MoE training (pretrain / SFT) as a CloudAI test definition.

Every field that a sweep makes sense for is typed ``T | list[T]``: CloudAI's DSE turns each list into a dimension.
Multi-valued settings that are not sweeps (recompute modules, CUDA-graph scopes) are comma-separated strings so that
a list of them stays a sweep.
"""

from __future__ import annotations

import itertools
from pathlib import PurePosixPath
from typing import Annotated, Any, Literal

from cloudai.core import JobStatusResult, System, TestRun
from cloudai.models.workload import CmdArgs
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationInfo, field_validator

from ...catalog import GPUS, MODELS, get_gpu, get_model
from ...catalog.bridge import bridge_release
from ...launch.training import training_config
from ...metrics.golden import GoldenThresholds
from ...payload import hf_config
from ...payload.train.config import mcore_unsupported, rank_capacity_factor
from ...plan import EchoOptions, TrainingPlan
from ...plan.memory import MEMORY_CHECKS, estimate_memory
from ...rules import TRAINING_RULES, Violation
from ...rules.training import memory_caution
from ...systems.common import (
    resolve_gpu,
    system_gpus_per_node,
    system_network,
)
from ..base import MBridgeTestDefinition
from ..fields import (
    BatchSize,
    Bool,
    GPUCount,
    HangTimeout,
    InflightOffloads,
    LayerCount,
    Parallel,
    PosInt,
    Seed,
    SeqLength,
    StageLayers,
    Steps,
    WarmupSteps,
    check_expected_rejections,
    check_hf_model_id,
    check_image,
    has_control,
)

ModelName = Literal[tuple(MODELS)]  # type: ignore[valid-type]
GPUName = Literal[tuple(GPUS)]  # type: ignore[valid-type]
Dispatcher = Literal["alltoall", "deepep", "hybridep", "ncclep"]
# nvidia_efa: NVIDIA DeepEP over NVSHMEM's libfabric (EFA) transport, as AWS builds it (plan/training.py DEEPEP_IMPLS)
DeepEPImpl = Literal["uccl", "nvidia", "nvidia_efa"]
Recompute = Literal["none", "selective", "full"]
Precision = Literal["bf16", "fp8_delayed", "fp8_tensorwise", "fp8_blockwise", "mxfp8", "nvfp4"]
CudaGraphImpl = Literal["none", "local", "transformer_engine", "full_iteration"]
BridgeVersion = Literal["0.3", "0.4", "0.5", "0.6"]

# What a point of this workload can be rejected by (besides no-secrets-in-toml, which is never intended).
TRAINING_RULE_IDS = (*TRAINING_RULES.rules, "system-gpu", "mcore-engine")
RECOMPUTE_MODULES = ("core_attn", "mla_up_proj", "mlp", "moe", "moe_act", "shared_experts", "layernorm")
# megatron-core 0.19.2 transformer_config.py L1848-L1860: the modules fine-grained activation offloading takes
OFFLOAD_MODULES = ("core_attn", "attn_proj", "expert_fc1", "fused_group_mlp", "moe_act", "attn_norm", "mlp_norm",
                   "qkv_linear")
CUDA_GRAPH_SCOPES = ("attn", "mlp", "moe", "moe_router", "moe_preprocess", "mamba", "full_iteration")
# the comma-separated name lists a test may give, with the names each allows
CSV_FIELDS = {"recompute_modules": RECOMPUTE_MODULES, "cuda_graph_scope": CUDA_GRAPH_SCOPES,
              "offload_modules": OFFLOAD_MODULES}


def _split_csv(value: str, allowed: tuple[str, ...], field: str) -> tuple[str, ...]:
    items = tuple(s.strip() for s in value.split(",") if s.strip())
    unknown = [s for s in items if s not in allowed]
    if unknown:
        raise ValueError(f"{field}: unknown value(s) {unknown}; allowed: {', '.join(allowed)}")
    return items


class EchoArgs(BaseModel):
    """MoE Echo: elastic cloning of hot experts (seed 003). Absent = off."""

    # strict: no "0.5" or true read as a number, no 1 / "yes" as a bool; finite: no nan / inf capacity
    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)

    num_echo_experts: PosInt | list[PosInt]
    received_token_capacity: Annotated[float, Field(gt=0)] | list[Annotated[float, Field(gt=0)]] | None = None
    device_initiated_grouped_gemm: bool | list[bool] = False
    recompute_expert_dispatch: bool | list[bool] = False


Fraction = Annotated[float, Field(ge=0)]
# A finite float in (0, 1024] (no nan / inf, no bool or string read as one); 1024 keeps the budget NCCL EP carries in
# int32 (tokens per rank x top-k x factor) far from overflow, and no EP group needs more than its size
CapacityFactor = Annotated[float, Field(gt=0, le=1024, allow_inf_nan=False, strict=True)]
# A learning rate: a finite float in (0, 1] (no nan / inf, no bool or string read as one)
LearningRate = Annotated[float, Field(gt=0, le=1, allow_inf_nan=False, strict=True)]
# A share in [0, 1] (no nan / inf, no bool or string read as one)
OffloadFraction = Annotated[float, Field(ge=0, le=1, allow_inf_nan=False, strict=True)]


class GoldenThresholdArgs(BaseModel):
    """Limits of the golden-values comparison; the defaults are Megatron-Bridge's (scripts/performance/utils/
    evaluate.py). Fractions: 0.05 = 5 %."""

    # strict: no "0.1" or true read as a number (an int is a float); finite: a nan limit would pass every check
    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)

    correlation_threshold: Annotated[float, Field(ge=-1, le=1)] = 0.95
    high_loss_tolerance: Fraction = 0.10
    medium_loss_tolerance: Fraction = 0.05
    low_loss_tolerance: Fraction = 0.02
    high_loss_above: float = 2.0
    medium_loss_above: float = 0.5
    final_loss_tolerance: Fraction = 0.03
    max_outlier_ratio: Annotated[float, Field(ge=0, le=1)] = 0.1
    outlier_threshold: Annotated[float, Field(gt=0)] = 3.0
    skip_first_percent_loss: Annotated[float, Field(ge=0, lt=1)] = 0.0
    skip_first_percent_time: Annotated[float, Field(ge=0, lt=1)] = 0.1
    timing_threshold: Fraction = 0.05
    tflops_threshold: Fraction = 0.05
    memory_threshold: Fraction = 0.05

    def thresholds(self) -> GoldenThresholds:
        return GoldenThresholds(**self.model_dump())


class MBridgeTrainingCmdArgs(CmdArgs):
    """What one Megatron-Bridge training job runs. Unknown keys are errors (CloudAI's base allows them)."""

    model_config = ConfigDict(extra="forbid")

    model: ModelName | list[ModelName]
    # The system decides the GPU ([global_env_vars] CLOUDAI_MBRIDGE_GPU); a test may name one to be refused on others.
    gpu: GPUName | None = None
    task: Literal["pretrain", "sft"] | list[Literal["pretrain", "sft"]] = "pretrain"
    network: Literal["auto", "efa", "ib", "ethernet"] = "auto"
    tp: Parallel | list[Parallel] = 1
    pp: Parallel | list[Parallel] = 1
    vp: Parallel | list[Parallel] | None = None
    cp: Parallel | list[Parallel] = 1
    ep: Parallel | list[Parallel] = 1
    etp: Parallel | list[Parallel] = 1
    mbs: BatchSize | list[BatchSize] = 1
    gbs: BatchSize | list[BatchSize] = 8
    seq_length: SeqLength | list[SeqLength] = 4096
    train_iters: Steps = 20
    dispatcher: Dispatcher | list[Dispatcher] = "alltoall"
    deepep_impl: DeepEPImpl | list[DeepEPImpl] = "nvidia"
    # Megatron-Core's moe_expert_rank_capacity_factor: the ncclep backend's per-rank receive budget (tokens per rank x
    # top-k x this); required for ncclep, where a step that receives more traps. Handed to Megatron only by ncclep arms.
    moe_expert_rank_capacity_factor: CapacityFactor | list[CapacityFactor] | None = None
    moe_a2a_overlap: Bool | list[Bool] = False
    # None: the recipes' choice (on with alltoall, off with flex or a2a overlap); false holds it off in every arm
    moe_shared_expert_overlap: Bool | list[Bool] | None = None
    recompute: Recompute | list[Recompute] = "none"
    recompute_modules: str | list[str] = ""
    precision: Precision | list[Precision] = "bf16"
    cuda_graph_impl: CudaGraphImpl | list[CudaGraphImpl] = "none"
    cuda_graph_scope: str | list[str] = ""
    # Megatron's cuda_graph_warmup_steps (--cuda-graph-warmup-steps); unset: the recipe's (3). NVIDIA's
    # Megatron-MoE-ModelZoo GB200/GB300 DeepSeek-V3 configs capture at once (0)
    cuda_graph_warmup_steps: WarmupSteps | None = None
    # Megatron-LM's --offload-optimizer-states (its moe_dev branch; no released megatron-core has it): accepted only to
    # be refused by name (rule offload-optimizer-states), so a published config that carries it is not bent silently
    offload_optimizer_states: Bool = False
    force_balanced_routing: Bool | list[Bool] = False
    echo: EchoArgs | None = None
    pipeline_layout: str | list[str] | None = None
    # Uneven first / last pipeline stages without a layout string (Megatron's num_layers_in_first_pipeline_stage /
    # num_layers_in_last_pipeline_stage; Megatron-LM --decoder-first/last-pipeline-num-layers, as NVIDIA's
    # Megatron-MoE-ModelZoo DeepSeek-V3 default, 4 and 1 at pp 16); the other ranks split the rest evenly
    num_layers_in_first_pipeline_stage: StageLayers | list[StageLayers] | None = None
    num_layers_in_last_pipeline_stage: StageLayers | list[StageLayers] | None = None
    mtp_num_layers: LayerCount | None = None
    sequence_parallel: Bool | list[Bool] = True
    optimizer: Literal["adam", "muon"] = "adam"
    # Megatron FSDP (DDP config use_megatron_fsdp) and its sharding; several distributed-optimizer instances with
    # outer_dp_sharding_strategy = "optim" is HSDP (Bridge 0.6.2's GB300 128-GPU recipe)
    use_megatron_fsdp: Bool | list[Bool] = False
    data_parallel_sharding_strategy: Literal["no_shard", "optim", "optim_grads", "optim_grads_params"] = \
        "optim_grads_params"
    outer_dp_sharding_strategy: Literal["no_shard", "optim"] = "no_shard"
    num_distributed_optimizer_instances: GPUCount = 1
    fp8_param_gather: Bool | list[Bool] = False
    moe_paged_stash: Bool | list[Bool] = False
    use_transformer_engine_op_fuser: Bool | list[Bool] = False
    fp8_dot_product_attention: Bool | list[Bool] = False
    fp8_output_proj: Bool | list[Bool] = False
    # Megatron-Core's delay_wgrad_compute (with comm_overlap's): expert weight gradients after the a2a overlap
    delay_wgrad_compute: Bool | list[Bool] = False
    # fine-grained activation offloading: comma-separated modules (empty: off)
    offload_modules: str | list[str] = ""
    # megatron-core 0.19's fine_grained_offloading_max_inflight_offloads: at most this many offloads per module not
    # yet joined on the main stream (0: join after each); unset: no joins. A full-iteration CUDA graph with
    # offload_modules needs it (Bridge 0.6.2's GB300 HSDP recipe sets 1)
    fine_grained_offloading_max_inflight_offloads: InflightOffloads | None = None
    # Megatron-Core's optimizer CPU offload (OptimizerConfig; Megatron-LM --optimizer-cpu-offload): the share of the
    # optimizer's parameters whose states and fp32 copies live and step on the host (Megatron-LM's default 1.0), and
    # whether the host step overlaps the copies (--overlap-cpu-optimizer-d2h-h2d)
    optimizer_cpu_offload: Bool | list[Bool] = False
    # Megatron's use_precision_aware_optimizer (--use-precision-aware-optimizer); unset: the recipe's (DeepSeek-V3 on,
    # Kimi-K2 off). true: fp32 master parameters and bf16 Adam moments, as the DeepSeek-V3 recipe and NVIDIA's
    # Megatron-MoE-ModelZoo configs run it; the optimizer's CPU offload needs it (Megatron-LM asserts it)
    use_precision_aware_optimizer: Bool | list[Bool] | None = None
    optimizer_offload_fraction: OffloadFraction | list[OffloadFraction] = 1.0
    overlap_cpu_optimizer_d2h_h2d: Bool = False
    data: str = "mock"
    hf_model_id: str | None = None
    # a folder (on the cluster) with the model's Hugging Face config.json; unset: the catalog's architecture is written
    # as config.json under the run's output folder, so no run needs the hub for its model config
    hf_config_dir: str | None = None
    convert_checkpoint: Bool = False
    checkpoint_dir: str | None = None
    container_image: str | None = None
    engine: Literal["auto", "bridge", "mcore"] = "auto"
    # The Megatron-Bridge release series in the container ("0.3" .. "0.6"); unset: the container's where known
    # (nemo:26.04 -> 0.4), else 0.4. The rules read its allowlists (catalog/bridge.py).
    bridge_version: BridgeVersion | list[BridgeVersion] | None = None
    seed: Seed = 1234
    log_interval: Steps = 1
    # A constant learning rate, no warmup (optimizer lr = min_lr = this; Bridge's scheduler "constant"); unset: the
    # recipe's schedule (engine bridge) or the loop's 3e-4 (engine mcore). A stable run for a dispatcher A/B.
    lr: LearningRate | None = None
    # The payload's progress watchdog (payload/train/watchdog.py): a rank that reaches no new stage (init, model
    # built, first dispatch, iteration) for this many seconds prints every thread's stack and MBRIDGE_HANG
    # class=<init|first_dispatch|later> and exits 124, and the run is a failed run "hang at first dispatch" / "hang
    # after iteration N"; 0 = off; unset: the payload's 1200 (no healthy start waits that long: first-iteration JIT
    # compiles of NCCL EP / HybridEP take tens of seconds)
    hang_timeout_s: HangTimeout | None = None
    # A golden-values JSON (Megatron-Bridge's format) on the machine that runs CloudAI, absolute or relative to the
    # folder CloudAI runs in: the run fails when it breaches it. Every run writes its own as golden_values.json.
    golden_values: str | None = None
    golden_thresholds: GoldenThresholdArgs = Field(default_factory=GoldenThresholdArgs)
    # A point whose memory estimate does not fit: "reject" (refused before the queue), "warn" (runs with a warning),
    # "off" (no memory check). The choice and the estimate's verdict are recorded in mbridge_config.json.
    memory_check: Literal[MEMORY_CHECKS] = "reject"  # type: ignore[valid-type]
    # Rule ids (comma-separated) whose rejections of sweep points are intended: `run` exits 0 despite them.
    expected_rejections: str = ""

    @field_validator("expected_rejections", mode="before")
    @classmethod
    def _expected(cls, v: object) -> object:
        return check_expected_rejections(v, TRAINING_RULE_IDS, "MBridgeTraining")

    @field_validator(*CSV_FIELDS)
    @classmethod
    def _csv_names(cls, v: str | list[str], info: ValidationInfo) -> str | list[str]:
        for item in v if isinstance(v, list) else [v]:
            _split_csv(item, CSV_FIELDS[info.field_name], info.field_name)
        return v

    @field_validator("golden_values")
    @classmethod
    def _golden_path(cls, v: str | None) -> str | None:
        if v is not None and (not v.strip() or "\n" in v):
            raise ValueError("golden_values must be a path to a JSON file")
        return v

    @field_validator("container_image")
    @classmethod
    def _image(cls, v: str | None) -> str | None:
        return check_image(v)

    @field_validator("hf_model_id")
    @classmethod
    def _hf_model_id(cls, v: str | None) -> str | None:
        return check_hf_model_id(v)

    @field_validator("data", "checkpoint_dir", "hf_config_dir")
    @classmethod
    def _absolute_path(cls, v: str | None, info: Any) -> str | None:
        if v is None or (info.field_name == "data" and v == "mock"):
            return v
        if has_control(v) or not PurePosixPath(v).is_absolute():
            raise ValueError(f'{info.field_name} must be an absolute path on the cluster (or "mock" for data)')
        return v


class MBridgeTrainingTestDefinition(MBridgeTestDefinition):
    """Megatron-Bridge MoE training run (template name ``MBridgeTraining``)."""

    cmd_args: MBridgeTrainingCmdArgs
    # The swept fields of the test as parsed (field -> its values). CloudAI unrolls a point with model_copy, which
    # keeps this: a point's cautions know what the test's other points set.
    _sweep: dict[str, list[Any]] = PrivateAttr(default_factory=dict)

    def model_post_init(self, context: Any, /) -> None:
        super().model_post_init(context)
        self._sweep = {name: list(value) for name, value in self.cmd_args if isinstance(value, list)}

    def plan(self, tr: TestRun, system: System | None) -> TrainingPlan:
        """The sweep point as a TrainingPlan; needs an unrolled test run (no list values left)."""
        a = self.cmd_args
        gpu_name = resolve_gpu(a.gpu, system)
        gpu = get_gpu(gpu_name)
        echo = None
        if a.echo is not None:
            e = a.echo
            echo = EchoOptions(
                e.num_echo_experts,
                e.received_token_capacity,
                e.device_initiated_grouped_gemm,
                e.recompute_expert_dispatch,
            )
        return TrainingPlan(
            model=get_model(a.model),
            gpu=gpu,
            num_nodes=tr.nnodes,
            gpus_per_node=system_gpus_per_node(system, gpu_name),
            network=system_network(system, a.network),
            task=a.task,
            tp=a.tp,
            pp=a.pp,
            vp=a.vp,
            cp=a.cp,
            ep=a.ep,
            etp=a.etp,
            mbs=a.mbs,
            gbs=a.gbs,
            seq_length=a.seq_length,
            train_iters=a.train_iters,
            dispatcher=a.dispatcher,
            deepep_impl=a.deepep_impl,
            moe_expert_rank_capacity_factor=a.moe_expert_rank_capacity_factor,
            moe_a2a_overlap=a.moe_a2a_overlap,
            moe_shared_expert_overlap=a.moe_shared_expert_overlap,
            recompute=a.recompute,
            recompute_modules=_split_csv(a.recompute_modules, RECOMPUTE_MODULES, "recompute_modules"),
            precision=a.precision,
            cuda_graph_impl=a.cuda_graph_impl,
            cuda_graph_scope=_split_csv(a.cuda_graph_scope, CUDA_GRAPH_SCOPES, "cuda_graph_scope"),
            cuda_graph_warmup_steps=a.cuda_graph_warmup_steps,
            offload_optimizer_states=a.offload_optimizer_states,
            force_balanced_routing=a.force_balanced_routing,
            echo=echo,
            pipeline_layout=a.pipeline_layout,
            num_layers_in_first_pipeline_stage=a.num_layers_in_first_pipeline_stage,
            num_layers_in_last_pipeline_stage=a.num_layers_in_last_pipeline_stage,
            mtp_num_layers=a.mtp_num_layers,
            sequence_parallel=a.sequence_parallel,
            optimizer=a.optimizer,
            use_megatron_fsdp=a.use_megatron_fsdp,
            data_parallel_sharding_strategy=a.data_parallel_sharding_strategy,
            outer_dp_sharding_strategy=a.outer_dp_sharding_strategy,
            num_distributed_optimizer_instances=a.num_distributed_optimizer_instances,
            fp8_param_gather=a.fp8_param_gather,
            moe_paged_stash=a.moe_paged_stash,
            use_transformer_engine_op_fuser=a.use_transformer_engine_op_fuser,
            fp8_dot_product_attention=a.fp8_dot_product_attention,
            fp8_output_proj=a.fp8_output_proj,
            delay_wgrad_compute=a.delay_wgrad_compute,
            offload_modules=_split_csv(a.offload_modules, OFFLOAD_MODULES, "offload_modules"),
            fine_grained_offloading_max_inflight_offloads=a.fine_grained_offloading_max_inflight_offloads,
            optimizer_cpu_offload=a.optimizer_cpu_offload,
            optimizer_offload_fraction=float(a.optimizer_offload_fraction),
            overlap_cpu_optimizer_d2h_h2d=a.overlap_cpu_optimizer_d2h_h2d,
            # the mcore engine builds Megatron-Core's local (non-TE) layers; bridge, and auto in the TE containers,
            # build Transformer Engine ones (plan/memory.py estimates both)
            transformer_impl="local" if a.engine == "mcore" else "transformer_engine",
            # the DeepSeek-V3 recipe's Adam is precision-aware (bf16 moments); Kimi-K2's own recipe (model kimi_k2)
            # switches it off (recipes/kimi/kimi_k2.py, 0.4.2 L175: fp32 moments and main grads); mcore's is plain
            precision_aware_optimizer=(a.use_precision_aware_optimizer if a.use_precision_aware_optimizer is not None
                                       else a.engine != "mcore" and a.model != "kimi_k2"),
            use_precision_aware_optimizer=a.use_precision_aware_optimizer,
            # Kimi-K2's recipe reduces gradients in fp32 under Muon, in bf16 under Adam (0.4.2 L159-L166; 0.6.2's
            # _apply_kimi_k2_optimizer); the DeepSeek-V3 recipe in bf16
            grad_reduce_in_fp32=a.engine != "mcore" and a.model == "kimi_k2" and a.optimizer == "muon",
            bridge_version=bridge_release(a.bridge_version, a.container_image).version,
            memory_check=a.memory_check,
        )

    def payload_config(self, tr: TestRun, system: System | None, output_dir: str) -> dict[str, Any]:
        """The JSON the training payload reads (same on Slurm and Kubernetes)."""
        a = self.cmd_args
        plan = self.plan(tr, system)
        estimate = estimate_memory(plan)
        return training_config(
            plan,
            memory_estimate_bytes={**estimate.terms(), "total": estimate.total, "capacity": estimate.capacity,
                                   "band": estimate.band},
            memory={"check": a.memory_check, "verdict": estimate.verdict, "band_pct": round(estimate.band_pct, 1),
                    "estimate": estimate.headline()},
            engine=a.engine,
            data=a.data,
            hf_model_id=a.hf_model_id or plan.model.hf_id,
            hf_config_dir=a.hf_config_dir,
            checkpoint_dir=a.checkpoint_dir,
            seed=a.seed,
            log_interval=a.log_interval,
            lr=a.lr,
            hang_timeout_s=a.hang_timeout_s,
            output_dir=output_dir,
        )

    def was_run_successful(self, tr: TestRun) -> JobStatusResult:
        """The logs' verdict, then the golden values' when the test names a file."""
        from ..reporting import golden_status

        status = super().was_run_successful(tr)
        if not status.is_successful or self.cmd_args.golden_values is None:
            return status
        return golden_status(tr)

    def rule_violations(self, tr: TestRun, system: System | None) -> list[Violation]:
        return self.checked_plan(tr, system)[0]

    def checked_plan(self, tr: TestRun, system: System | None) -> tuple[list[Violation], TrainingPlan | None]:
        """The rule violations and the plan they were found on (None when the GPU cannot be resolved)."""
        try:
            plan = self.plan(tr, system)
        except ValueError as e:  # the GPU cannot be resolved (resolve_gpu's message says which field and the fix)
            message, _, fix = str(e).partition(". Fix: ")
            return [Violation("system-gpu", {"gpu": self.cmd_args.gpu}, message, fix or "see the message")], None
        return [*TRAINING_RULES.check(plan), *self._engine_violations(plan)], plan

    def cautions(self, tr: TestRun, system: System | None) -> list[str]:
        """A Bridge run that will need the Hugging Face hub on the compute nodes (payload/hf_config.py: the model's
        architecture never does; an SFT tokenizer or a conversion from a hub id does)."""
        a = self.cmd_args
        memory = memory_caution(self.plan(tr, system))
        found = [memory] if memory else []
        found += unused_fields(a, self._sweep)
        if a.engine == "mcore":
            return found
        hf_id = a.hf_model_id or get_model(a.model).hf_id
        cfg = {"task": a.task, "data": a.data, "hf_model_id": hf_id, "convert": a.convert_checkpoint}
        refs = [r for r in hf_config.hub_refs(cfg) if not hf_config.is_local(r)]
        if not refs:
            return found
        return [*found, f"this run reads hf_model_id = {refs[0]!r} from the Hugging Face hub on the compute nodes (the "
                f"tokenizer{' and the weights to convert' if a.convert_checkpoint else ''}); nodes without internet "
                f"fail at once. To run offline: {hf_config.prestage_hint(refs)}"]

    def describe(self, tr: TestRun, system: System | None) -> str | None:
        return f"memory estimate per GPU: {estimate_memory(self.plan(tr, system)).summary()}"

    def _engine_violations(self, plan: TrainingPlan) -> list[Violation]:
        """The payload's own list of what its Megatron-Core-only engine cannot do, checked before the queue."""
        if self.cmd_args.engine != "mcore":
            return []
        config = training_config(plan, data=self.cmd_args.data)
        found = []
        if self.cmd_args.hf_config_dir is not None:
            # the loop builds the catalog's architecture (payload/train/mcore.py) and never reads a config.json
            found.append(Violation(
                "mcore-engine", {"engine": "mcore", "hf_config_dir": self.cmd_args.hf_config_dir},
                "hf_config_dir is not read by the mcore engine: it builds the catalog's architecture of the model",
                "remove hf_config_dir, or use engine = 'bridge' (a Megatron-Bridge image) to build from it"))
        for message in mcore_unsupported(config):
            what, _, fix = message.partition("; ")
            found.append(Violation("mcore-engine", {"engine": "mcore"}, what, fix))
        return found


def unused_fields(a: MBridgeTrainingCmdArgs, sweep: dict[str, list[Any]] | None = None) -> list[str]:
    """Fields this point sets that nothing hands Megatron for it: said, so that a reader of the TOML does not believe
    they ran. Not said where the test sweeps a field it depends on and another point of the sweep uses it (the
    deepep arm's ``deepep_impl`` on the all-to-all points of an A/B); still said where no point uses it.
    tests/payload/test_nothing_dropped.py finds them."""
    found = []
    for field, depends_on, message in _unused(a):
        swept = [d for d in depends_on if d in (sweep or {})]
        if swept and any(field not in {f for f, _, _ in _unused(a.model_copy(update=dict(zip(swept, values,
                                                                                              strict=True))))}
                         for values in itertools.product(*(sweep[d] for d in swept))):  # type: ignore[index]
            continue  # another point of the sweep uses it
        found.append(message)
    return found


def _unused(a: MBridgeTrainingCmdArgs) -> list[tuple[str, tuple[str, ...], str]]:
    """(field, the fields deciding whether it is used, the message) for each field this point sets unused."""
    found = []
    handed = rank_capacity_factor({"dispatcher": a.dispatcher, "moe_paged_stash": a.moe_paged_stash,
                                   "use_transformer_engine_op_fuser": a.use_transformer_engine_op_fuser,
                                   "moe_expert_rank_capacity_factor": a.moe_expert_rank_capacity_factor})
    if a.moe_expert_rank_capacity_factor is not None and handed is None:
        found.append(("moe_expert_rank_capacity_factor",
                      ("dispatcher", "moe_paged_stash", "use_transformer_engine_op_fuser"),
                      f"moe_expert_rank_capacity_factor = {a.moe_expert_rank_capacity_factor} is not used with "
                      f"dispatcher = {a.dispatcher!r}: only the ncclep backend and hybridep with moe_paged_stash and "
                      "the TE op fuser read it (Megatron-Core refuses it elsewhere), so this point runs without it"))
    # uccl with hybridep is refused (hybridep-uccl); the libfabric build is read by the deepep backend only
    if (a.deepep_impl == "uccl" and a.dispatcher in ("alltoall", "ncclep")) or (
            a.deepep_impl == "nvidia_efa" and a.dispatcher != "deepep"):
        found.append(("deepep_impl", ("dispatcher",), f"deepep_impl = {a.deepep_impl!r} is not used with dispatcher = "
                      f"{a.dispatcher!r}: only deepep points use a DeepEP build"))
    if a.recompute_modules.strip() and a.recompute != "selective":
        found.append(("recompute_modules", ("recompute",), f"recompute_modules = {a.recompute_modules!r} is not "
                      f"used with recompute = {a.recompute!r}: Megatron recomputes modules only with recompute = "
                      "'selective'"))
    sft = a.task == "sft"
    if a.checkpoint_dir is not None and not sft:
        found.append(("checkpoint_dir", ("task",), f"checkpoint_dir = {a.checkpoint_dir!r} is not used with task = "
                      f"{a.task!r}: it is where an SFT run starts from; this point trains from scratch and saves no "
                      "checkpoint"))
    if a.convert_checkpoint and not sft:
        found.append(("convert_checkpoint", ("task",), f"convert_checkpoint = true is not used with task = "
                      f"{a.task!r}: only an SFT run converts hf_model_id into checkpoint_dir first"))
    if a.hf_model_id is not None and not (sft and (a.data != "mock" or a.convert_checkpoint)):
        found.append(("hf_model_id", ("task", "data", "convert_checkpoint"), f"hf_model_id = {a.hf_model_id!r} is "
                      "not used by this point: the model's architecture comes from the catalog (or hf_config_dir); "
                      "hf_model_id is read for an SFT run's tokenizer (data not \"mock\") or its checkpoint "
                      "conversion (convert_checkpoint = true)"))
    if not a.optimizer_cpu_offload:
        for name, default in (("optimizer_offload_fraction", 1.0), ("overlap_cpu_optimizer_d2h_h2d", False)):
            if getattr(a, name) != default:
                found.append((name, ("optimizer_cpu_offload",), f"{name} = {getattr(a, name)!r} is not used with "
                              "optimizer_cpu_offload = false: it shapes the optimizer's CPU offload; set "
                              "optimizer_cpu_offload = true"))
    if a.fine_grained_offloading_max_inflight_offloads is not None and not a.offload_modules.strip():
        found.append(("fine_grained_offloading_max_inflight_offloads", ("offload_modules",),
                      "fine_grained_offloading_max_inflight_offloads = "
                      f"{a.fine_grained_offloading_max_inflight_offloads} is not used with offload_modules = '': it "
                      "caps activation offloading; set offload_modules"))
    if a.cuda_graph_warmup_steps is not None and a.cuda_graph_impl == "none":
        found.append(("cuda_graph_warmup_steps", ("cuda_graph_impl",), f"cuda_graph_warmup_steps = "
                      f"{a.cuda_graph_warmup_steps} is not used with cuda_graph_impl = 'none': set a CUDA graph"))
    if a.data_parallel_sharding_strategy != "optim_grads_params" and not a.use_megatron_fsdp:
        found.append(("data_parallel_sharding_strategy", ("use_megatron_fsdp",), "data_parallel_sharding_strategy = "
                      f"{a.data_parallel_sharding_strategy!r} is not used with use_megatron_fsdp = false: it is "
                      "Megatron FSDP's sharding; set use_megatron_fsdp = true"))
    return found
