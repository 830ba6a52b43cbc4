"""Plans for the rule tests, and the bridge to the real Megatron-Core for the differential tests."""

from __future__ import annotations

import contextlib
import io
import logging
import warnings
from dataclasses import replace
from typing import Any

from cloudai_mbridge.catalog import get_gpu, get_model
from cloudai_mbridge.plan import TrainingPlan

# Seed 000 (awsome-distributed-training PR 1116): 256 x B300 on EFA, TP8/PP8/VP2/EP32/ETP1, gbs 256, seq 4096.
SEED_000 = {
    "num_nodes": 32, "gpus_per_node": 8, "network": "efa", "tp": 8, "pp": 8, "vp": 2, "ep": 32, "etp": 1,
    "mbs": 1, "gbs": 256, "seq_length": 4096, "precision": "bf16", "recompute": "none", "deepep_impl": "uccl",
}


def seed_plan(model: str = "kimi_k2", gpu: str = "b300", **overrides: Any) -> TrainingPlan:
    fields = {**SEED_000, **overrides}
    return TrainingPlan(model=get_model(model), gpu=get_gpu(gpu), **fields)


def small_plan(model: str = "kimi_k2_proxy", gpu: str = "h100", **overrides: Any) -> TrainingPlan:
    """One 8-GPU node, a proxy model: the shape most single-feature rule tests start from."""
    fields: dict[str, Any] = {"num_nodes": 1, "gpus_per_node": 8, "network": "ib", "tp": 1, "pp": 1, "ep": 8,
                              "mbs": 1, "gbs": 8, "seq_length": 4096}
    fields.update(overrides)
    return TrainingPlan(model=get_model(model), gpu=get_gpu(gpu), **fields)


def with_(plan: TrainingPlan, **changes: Any) -> TrainingPlan:
    return replace(plan, **changes)


def megatron_config_kwargs(p: TrainingPlan) -> dict[str, Any]:
    """The MLATransformerConfig the training payload would build for this plan (the fields our rules reason about;
    the rest as the DeepSeek-V3 / Kimi-K2 recipes set them). MTP is passed as the plan says (0 stays 0)."""
    import torch
    import torch.nn.functional as F  # noqa: N812

    m = p.model
    resolved = p.pipeline
    layout: Any = None
    uneven = {"num_layers_in_first_pipeline_stage": p.num_layers_in_first_pipeline_stage,
              "num_layers_in_last_pipeline_stage": p.num_layers_in_last_pipeline_stage}
    if p.pipeline_layout is not None:
        layout = p.pipeline_layout
    elif any(v is not None for v in uneven.values()):
        layout = None  # Megatron splits the layers itself (the payload hands it the two counts, no layout)
    elif resolved.layout is not None:
        layout = [list(stage) for v in range(resolved.layout.vp) for row in resolved.layout.by_rank
                  for stage in [row[v]]]
    recompute: dict[str, Any] = {"recompute_granularity": None, "recompute_method": None,
                                 "recompute_num_layers": None, "recompute_modules": None}
    if p.recompute == "selective":
        recompute.update(recompute_granularity="selective", recompute_modules=list(p.recompute_modules) or None)
    elif p.recompute == "full":
        recompute.update(recompute_granularity="full", recompute_method="uniform", recompute_num_layers=1)
    return {
        "num_layers": m.num_layers, "hidden_size": m.hidden_size, "ffn_hidden_size": m.ffn_hidden_size,
        "num_attention_heads": m.num_attention_heads, "num_moe_experts": m.num_experts,
        "moe_ffn_hidden_size": m.moe_ffn_hidden_size, "moe_router_topk": m.moe_router_topk,
        "moe_shared_expert_intermediate_size": m.shared_expert_intermediate_size or None,
        "moe_layer_freq": [0] * m.first_k_dense + [1] * (m.num_layers - m.first_k_dense),
        "moe_router_num_groups": m.router_num_groups, "moe_router_group_topk": m.router_group_topk,
        "moe_router_score_function": "sigmoid", "moe_router_enable_expert_bias": True, "moe_router_dtype": "fp32",
        "moe_grouped_gemm": True,
        "moe_token_dispatcher_type": "alltoall" if p.dispatcher == "alltoall" else "flex",
        "moe_flex_dispatcher_backend": p.dispatcher if p.uses_flex else None,
        "moe_shared_expert_overlap": p.shared_expert_overlap,
        "q_lora_rank": m.q_lora_rank, "kv_lora_rank": m.kv_lora_rank, "qk_head_dim": m.qk_head_dim,
        "qk_pos_emb_head_dim": m.qk_pos_emb_head_dim, "v_head_dim": m.v_head_dim,
        "tensor_model_parallel_size": p.tp, "pipeline_model_parallel_size": p.pp,
        "virtual_pipeline_model_parallel_size": p.vp if p.vp and p.vp > 1 else None,
        "context_parallel_size": p.cp, "expert_model_parallel_size": p.ep, "expert_tensor_parallel_size": p.etp,
        "sequence_parallel": p.sequence_parallel and p.tp > 1,
        "pipeline_dtype": torch.bfloat16, "params_dtype": torch.bfloat16, "bf16": True,
        "mtp_num_layers": p.effective_mtp_layers, "pipeline_model_parallel_layout": layout,
        "overlap_moe_expert_parallel_comm": p.moe_a2a_overlap, "delay_wgrad_compute": p.delay_wgrad_compute,
        "cuda_graph_impl": p.cuda_graph_impl, "cuda_graph_scope": list(p.cuda_graph_scope),
        "cpu_offloading": p.cpu_offloading, "cpu_offloading_num_layers": p.cpu_offloading_num_layers,
        "hidden_dropout": 0.0, "attention_dropout": 0.0, "normalization": "RMSNorm", "gated_linear_unit": True,
        "activation_func": F.silu, "add_bias_linear": False,
        **recompute, **uneven,
    }


def megatron_rejects(p: TrainingPlan) -> str | None:
    """Whether the real megatron-core 0.16.1 refuses to build this plan's TransformerConfig (the message), or None."""
    from megatron.core.transformer.transformer_config import MLATransformerConfig

    kwargs = megatron_config_kwargs(p)
    quiet = logging.getLogger("megatron")
    level = quiet.level
    quiet.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
            warnings.simplefilter("ignore")
            MLATransformerConfig(**kwargs)
    except (AssertionError, ValueError, NotImplementedError, IndexError) as e:
        return f"{type(e).__name__}: {e}"
    finally:
        quiet.setLevel(level)
    return None
