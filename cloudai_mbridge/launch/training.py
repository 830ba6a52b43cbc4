"""The training payload's config (the JSON payload/train/__main__.py reads) and the job's environment, from a plan."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from ..plan import TrainingPlan

# Megatron-Core's default rank order (parallel_state.initialize_model_parallel order="tp-cp-ep-dp-pp").
RANK_ORDER = "tp-cp-ep-dp-pp"


def training_config(plan: TrainingPlan, *, lr: float | None = None, hang_timeout_s: int | None = None,
                    **job: Any) -> dict[str, Any]:
    """Everything the payload needs, as data. ``job`` carries data/checkpoint/seed/output settings. ``lr``: a constant
    learning rate with no warmup (payload/train/config.py constant_lr_fields); None writes no key, so a run on the
    recipe's schedule has the config it had before the option (and the A/B report's cells stay as they were).
    ``hang_timeout_s``: the payload's progress watchdog (payload/train/watchdog.py); None writes no key (the
    payload's default, 1200 s)."""
    model = asdict(plan.model)
    model["recipe_pp_vp"] = sorted(plan.model.recipe_pp_vp)
    return {
        "workload": "training",
        "model": model,
        "gpu": plan.gpu.name,
        "task": plan.task,
        "num_nodes": plan.num_nodes,
        "gpus_per_node": plan.gpus_per_node,
        "network": plan.network,
        "world_size": plan.world_size,
        "rank_order": RANK_ORDER,
        "tp": plan.tp,
        "pp": plan.pp,
        "vp": plan.vp,
        "cp": plan.cp,
        "ep": plan.ep,
        "etp": plan.etp,
        "dp": plan.dp,
        "mbs": plan.mbs,
        "gbs": plan.gbs,
        "seq_length": plan.seq_length,
        "train_iters": plan.train_iters,
        "dispatcher": plan.dispatcher,
        "deepep_impl": plan.deepep_impl,
        **({"moe_expert_rank_capacity_factor": plan.moe_expert_rank_capacity_factor}
           if plan.moe_expert_rank_capacity_factor is not None else {}),
        "moe_a2a_overlap": plan.moe_a2a_overlap,
        **({"moe_shared_expert_overlap": plan.moe_shared_expert_overlap}
           if plan.moe_shared_expert_overlap is not None else {}),
        "recompute": plan.recompute,
        "recompute_modules": list(plan.recompute_modules),
        "precision": plan.precision,
        "cuda_graph_impl": plan.cuda_graph_impl,
        "cuda_graph_scope": list(plan.cuda_graph_scope),
        "force_balanced_routing": plan.force_balanced_routing,
        "echo": asdict(plan.echo) if plan.echo else None,
        "pipeline_layout": plan.pipeline_layout,
        "cuda_graph_warmup_steps": plan.cuda_graph_warmup_steps,
        "num_layers_in_first_pipeline_stage": plan.num_layers_in_first_pipeline_stage,
        "num_layers_in_last_pipeline_stage": plan.num_layers_in_last_pipeline_stage,
        "mtp_num_layers": plan.effective_mtp_layers,
        "sequence_parallel": plan.sequence_parallel and plan.tp > 1,
        "optimizer": plan.optimizer,
        # Megatron FSDP / HSDP, paged stash, TE op fuser, FP8 attention / output projection, delayed wgrad, activation
        # offloading: handed to Bridge by payload/train/config.py bridge_overrides
        "use_megatron_fsdp": plan.use_megatron_fsdp,
        "data_parallel_sharding_strategy": plan.data_parallel_sharding_strategy,
        "outer_dp_sharding_strategy": plan.outer_dp_sharding_strategy,
        "num_distributed_optimizer_instances": plan.num_distributed_optimizer_instances,
        "fp8_param_gather": plan.fp8_param_gather,
        "moe_paged_stash": plan.moe_paged_stash,
        "use_transformer_engine_op_fuser": plan.use_transformer_engine_op_fuser,
        "fp8_dot_product_attention": plan.fp8_dot_product_attention,
        "fp8_output_proj": plan.fp8_output_proj,
        "delay_wgrad_compute": plan.delay_wgrad_compute,
        "offload_modules": list(plan.offload_modules),
        "fine_grained_offloading_max_inflight_offloads": plan.fine_grained_offloading_max_inflight_offloads,
        "optimizer_cpu_offload": plan.optimizer_cpu_offload,
        "use_precision_aware_optimizer": plan.use_precision_aware_optimizer,
        "optimizer_offload_fraction": plan.optimizer_offload_fraction,
        "overlap_cpu_optimizer_d2h_h2d": plan.overlap_cpu_optimizer_d2h_h2d,
        **({"lr": lr} if lr is not None else {}),
        **({"hang_timeout_s": hang_timeout_s} if hang_timeout_s is not None else {}),
        **job,
    }


def network_env(plan: TrainingPlan) -> dict[str, str]:
    """Fabric settings the job needs; NCCL INIT/NET logging stays on because the reports prove EFA from it."""
    env = {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,NET"}
    if plan.network == "efa":
        env.update(FI_PROVIDER="efa", FI_EFA_USE_DEVICE_RDMA="1", FI_EFA_FORK_SAFE="1")
    if plan.dispatcher == "deepep" and plan.deepep_impl == "nvidia_efa":
        # NVIDIA DeepEP over NVSHMEM's libfabric transport on EFA, the runtime settings of AWS's build
        # (aws-samples/awsome-distributed-training micro-benchmarks/expert-parallelism/deepep-benchmark/README.md)
        env.update(NVSHMEM_REMOTE_TRANSPORT="libfabric", NVSHMEM_LIBFABRIC_PROVIDER="efa",
                   NVSHMEM_NETDEVS_POLICY="EXTERNAL_SHARING_PCIE_SWITCH_NIC_EXCLUSIVE")
    return env
