"""One training sweep point, resolved to scalars, with the sizes Megatron derives from it.

Everything the rules, the memory estimate and the launch renderers need is here, so they can be called with literals
in a unit test and never see CloudAI.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from ..catalog import GPUSpec, ModelSpec
from .layout import ResolvedLayout, resolve_layout

DISPATCHERS = ("alltoall", "deepep", "hybridep", "ncclep")
FLEX_DISPATCHERS = ("deepep", "hybridep", "ncclep")  # the flex token dispatcher's backends
# "nvidia_efa": NVIDIA DeepEP built against NVSHMEM's libfabric transport for EFA (AWS's build, NVSHMEM >= 3.7.0 and
# DeepEP 567632d with deepep_aws_efa.patch: aws-samples/awsome-distributed-training micro-benchmarks/expert-parallelism/
# deepep-benchmark/README.md at fd3d76d)
DEEPEP_IMPLS = ("uccl", "nvidia", "nvidia_efa")
PRECISIONS = ("bf16", "fp8_delayed", "fp8_tensorwise", "fp8_blockwise", "mxfp8", "nvfp4")
RECOMPUTE = ("none", "selective", "full")
CUDA_GRAPH_IMPLS = ("none", "local", "transformer_engine", "full_iteration")
NETWORKS = ("efa", "ib", "ethernet")


class _once:  # noqa: N801 (used as a decorator, like property)
    """A property computed on first use and kept in the instance (a frozen plan never changes): what
    functools.cached_property does, without its lock (Python 3.11), as a sweep builds a plan per point."""

    def __init__(self, fn: Any) -> None:
        self.fn = fn
        self.name = fn.__name__
        self.__doc__ = fn.__doc__

    def __get__(self, obj: Any, cls: Any = None) -> Any:
        if obj is None:
            return self
        value = obj.__dict__[self.name] = self.fn(obj)
        return value


@dataclass(frozen=True)
class EchoOptions:
    """MoE Echo (elastic cloning of hot experts); field names follow its command-line flags."""

    num_echo_experts: int
    received_token_capacity: float | None = None
    device_initiated_grouped_gemm: bool = False
    recompute_expert_dispatch: bool = False


@dataclass(frozen=True)
class TrainingPlan:
    model: ModelSpec
    gpu: GPUSpec
    num_nodes: int
    gpus_per_node: int
    network: str = "ib"
    task: str = "pretrain"
    tp: int = 1
    pp: int = 1
    vp: int | None = None
    cp: int = 1
    ep: int = 1
    etp: int = 1  # the DeepSeek-V3 / Kimi-K2 recipes set expert_tensor_parallel_size = 1
    mbs: int = 1
    gbs: int = 1
    seq_length: int = 4096
    train_iters: int = 20
    dispatcher: str = "alltoall"
    deepep_impl: str = "nvidia"
    # Megatron-Core's moe_expert_rank_capacity_factor (0.19+): the per-rank receive budget of the ncclep backend, as a
    # multiple of the balanced share (tokens per rank x top-k); None: unset. Only the ncclep arm hands it to Megatron.
    moe_expert_rank_capacity_factor: float | None = None
    moe_a2a_overlap: bool = False
    recompute: str = "none"
    recompute_modules: tuple[str, ...] = ()
    precision: str = "bf16"
    cuda_graph_impl: str = "none"
    cuda_graph_scope: tuple[str, ...] = ()
    cuda_graph_warmup_steps: int | None = None  # None: the recipe's (Megatron's default 3)
    offload_optimizer_states: bool = False  # Megatron-LM moe_dev's --offload-optimizer-states: refused (no release)
    force_balanced_routing: bool = False
    echo: EchoOptions | None = None
    pipeline_layout: str | None = None
    # Megatron's num_layers_in_first_pipeline_stage / num_layers_in_last_pipeline_stage (uneven stages without a
    # layout string; Megatron-LM --decoder-first-pipeline-num-layers / --decoder-last-pipeline-num-layers)
    num_layers_in_first_pipeline_stage: int | None = None
    num_layers_in_last_pipeline_stage: int | None = None
    mtp_num_layers: int | None = field(default=None)
    sequence_parallel: bool = True
    use_distributed_optimizer: bool = True
    optimizer: str = "adam"
    # Fields below default to what the DeepSeek-V3 / Kimi-K2 recipes plus the Bridge perf harness run.
    use_megatron_fsdp: bool = False
    num_distributed_optimizer_instances: int = 1
    cpu_offloading_num_layers: int = 0  # > 0 turns Megatron's cpu_offloading on, as Megatron-LM's arguments do
    delay_wgrad_compute: bool = False
    # Megatron FSDP's sharding (DDP config data_parallel_sharding_strategy) and, with several distributed-optimizer
    # instances (HSDP), the outer data-parallel group's (outer_dp_sharding_strategy, "no_shard" / "optim")
    data_parallel_sharding_strategy: str = "optim_grads_params"
    outer_dp_sharding_strategy: str = "no_shard"
    fp8_param_gather: bool = False  # keep parameters in FP8 and all-gather them in FP8 (Bridge's fp8_param_gather)
    moe_paged_stash: bool = False  # megatron-core 0.19 paged stashing of MoE activations (needs the rank capacity)
    use_transformer_engine_op_fuser: bool = False  # TE's operation fuser for the MLP
    fp8_dot_product_attention: bool = False  # attention in FP8 (Bridge mixed_precision.fp8_dot_product_attention)
    fp8_output_proj: bool = False  # the attention output projection in MXFP8 (megatron-core 0.19)
    offload_modules: tuple[str, ...] = ()  # fine-grained activation offloading to the host (empty: off)
    # megatron-core 0.19's cap on a module's offloads not yet joined on the main stream (None: no joins); a
    # full-iteration CUDA graph with activation offloading needs it set (transformer_config.py L2634-L2642)
    fine_grained_offloading_max_inflight_offloads: int | None = None
    # Megatron-Core's optimizer CPU offload (OptimizerConfig optimizer_cpu_offload): the HybridDeviceOptimizer keeps
    # optimizer_offload_fraction of the parameters' optimizer states and fp32 copies on the host and steps them there
    optimizer_cpu_offload: bool = False
    optimizer_offload_fraction: float = 1.0
    overlap_cpu_optimizer_d2h_h2d: bool = False
    moe_shared_expert_overlap: bool | None = None  # None: as the payload sets it, see shared_expert_overlap
    grad_reduce_in_fp32: bool = False  # DSV3 recipe: False (bf16 main grads)
    # The recipes' gradient_accumulation_fusion (APEX's fused wgrad into main_grad, as in NVIDIA's containers). Off,
    # the output layer's weight gradient is a weight-sized temporary first (the payload turns it off where APEX is
    # missing; the full-width benchmarks run without DDP, hence without it). Only plan/memory.py reads it.
    gradient_accumulation_fusion: bool = True
    # Megatron's TransformerConfig.transformer_impl. "transformer_engine": fused/flash attention, MLA, fused SwiGLU,
    # TE's FusedAdam (engine bridge / auto); "local": unfused DotProductAttention, standard attention instead of MLA,
    # unfused SwiGLU, torch AdamW (engine mcore, payload/train/mcore.py). Only plan/memory.py reads it.
    transformer_impl: str = "transformer_engine"
    # Megatron's use_precision_aware_optimizer, as Megatron-Bridge's DeepSeek-V3 / Kimi-K2 recipes set it (engine
    # bridge): bf16 exp_avg / exp_avg_sq and bf16 main grads next to an fp32 master copy. Only plan/memory.py reads it.
    precision_aware_optimizer: bool = False
    # the test's explicit use_precision_aware_optimizer (None: the recipe's, which precision_aware_optimizer holds);
    # the payload hands only an explicit choice to Megatron
    use_precision_aware_optimizer: bool | None = None
    # The Megatron-Bridge release series the job runs ("0.4": NGC nemo 26.04); the rules read its allowlists
    # (catalog/bridge.py)
    bridge_version: str = "0.4"
    # What the memory rule does with a point whose estimate does not fit: "reject" (refuse it before the queue),
    # "warn" (say so, run it anyway) or "off" (no memory check). A "tight" point always runs with a warning.
    memory_check: str = "reject"

    @_once
    def world_size(self) -> int:
        return self.num_nodes * self.gpus_per_node

    @_once
    def model_parallel(self) -> int:
        return self.tp * self.pp * self.cp

    @_once
    def dp(self) -> int:
        """Data-parallel size; 0 when the world size is not a multiple of tp·pp·cp (a rule reports that)."""
        mp = self.model_parallel
        return self.world_size // mp if mp and self.world_size % mp == 0 else 0

    @_once
    def expert_dp(self) -> int:
        denom = self.etp * self.ep * self.pp
        return self.world_size // denom if denom and self.world_size % denom == 0 else 0

    @_once
    def num_microbatches(self) -> int:
        denom = self.mbs * self.dp
        return self.gbs // denom if denom and self.gbs % denom == 0 else 0

    @_once
    def experts_per_rank(self) -> int:
        return self.model.num_experts // self.ep if self.ep and self.model.num_experts % self.ep == 0 else 0

    @_once
    def effective_mtp_layers(self) -> int | None:
        """MTP layers as Megatron will see them: the explicit override wins over the model's own, and 0 is None
        (payload/train/config.py megatron_mtp_layers hands Megatron None for 0)."""
        mtp = self.mtp_num_layers if self.mtp_num_layers is not None else self.model.mtp_num_layers
        return mtp or None

    @_once
    def pipeline(self) -> ResolvedLayout:
        """The pipeline layout Megatron builds for this point (explicit, recipe table, derived for proxies), checked."""
        return resolve_layout(self.model, self.pp, self.vp, self.pipeline_layout, self.effective_mtp_layers,
                              self.num_layers_in_first_pipeline_stage, self.num_layers_in_last_pipeline_stage)

    @_once
    def interleaved_vp(self) -> int:
        """Virtual stages per pipeline rank as the schedule sees them (an explicit layout decides it)."""
        layout = self.pipeline.layout
        if layout is not None and self.pp > 1:
            return layout.vp
        return self.vp if self.vp and self.pp > 1 else 1

    @_once
    def shared_expert_overlap(self) -> bool:
        """Megatron's moe_shared_expert_overlap: the recipes turn it on, Bridge's flex backend and the perf
        harness's a2a overlap turn it off again (payload/train/config.py bridge_overrides does the same)."""
        if not self.model.num_shared_experts:
            return False
        if self.moe_shared_expert_overlap is not None:
            return self.moe_shared_expert_overlap
        return self.dispatcher == "alltoall" and not self.moe_a2a_overlap

    @_once
    def cpu_offloading(self) -> bool:
        return self.cpu_offloading_num_layers > 0

    @_once
    def uses_flex(self) -> bool:
        return self.dispatcher in FLEX_DISPATCHERS

    @_once
    def flex_topk(self) -> int:
        """Top-k as the flex dispatcher sees it: the expert-TP-folded ``tp_size * moe_router_topk`` of
        MoEFlexTokenDispatcher (token_dispatcher.py L1792, megatron-core 0.19.2; ``tp_size`` is the expert TP
        group's, L83-L86)."""
        return self.etp * self.model.moe_router_topk

    @_once
    def ncclep_tokens_per_rank(self) -> int:
        """_NCCLEPManager._ensure_bootstrap (token_dispatcher.py L1597-L1605, megatron-core 0.19.2): the tokens one
        rank dispatches (its sequence-parallel shard, s*b/(cp*tp)) rounded up to NCCL EP's HT chunk of 64."""
        local = math.ceil(self.seq_length * self.mbs / (self.cp * self.tp))
        return -(-local // 64) * 64

    @_once
    def ncclep_recv_capacity(self) -> int | None:
        """The per-rank receive budget the ncclep backend sizes its buffers with (token_dispatcher.py L1606-L1609):
        int(tokens_per_rank x top-k x moe_expert_rank_capacity_factor), before the grouped-GEMM alignment; None
        without a capacity factor."""
        cf = self.moe_expert_rank_capacity_factor
        if cf is None:
            return None
        return int(self.ncclep_tokens_per_rank * self.flex_topk * cf)
