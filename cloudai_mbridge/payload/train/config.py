"""Training payload configuration: load and check the JSON that launch/training.py writes, and turn it into the field
overrides each engine applies. Pure stdlib, so the tests (and the generator side) can call it with literals.

The config's keys are `training_config()`'s (launch/training.py); the enumerations below mirror plan/training.py,
which the payload cannot import (it is copied alone into the run folder), and a test keeps the two in step.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .watchdog import DEFAULT_HANG_TIMEOUT_S

DISPATCHERS = ("alltoall", "deepep", "hybridep", "ncclep")
DEEPEP_IMPLS = ("uccl", "nvidia", "nvidia_efa")  # nvidia_efa: NVIDIA DeepEP over NVSHMEM's libfabric transport
PRECISIONS = ("bf16", "fp8_delayed", "fp8_tensorwise", "fp8_blockwise", "mxfp8", "nvfp4")
RECOMPUTE = ("none", "selective", "full")
CUDA_GRAPH_IMPLS = ("none", "local", "transformer_engine", "full_iteration")  # full_iteration: megatron-core 0.19
TASKS = ("pretrain", "sft")
ENGINES = ("auto", "bridge", "mcore")
OPTIMIZERS = ("adam", "muon")

REQUIRED_KEYS = (
    "model", "task", "tp", "pp", "vp", "cp", "ep", "etp", "mbs", "gbs", "seq_length", "train_iters", "dispatcher",
    "moe_a2a_overlap", "recompute", "recompute_modules", "precision", "cuda_graph_impl", "cuda_graph_scope",
    "force_balanced_routing", "echo", "pipeline_layout", "mtp_num_layers", "sequence_parallel", "optimizer", "data",
    "seed", "log_interval",
)
# Keys the payload reads when present; absent ones take these values.
OPTIONAL_KEYS: dict[str, Any] = {
    "engine": "auto",
    "deepep_impl": None,
    "hf_model_id": None,
    "hf_config_dir": None,  # a folder with the model's config.json; None: the catalog's architecture (hf_config.py)
    "checkpoint_dir": None,
    "output_dir": None,
    "world_size": None,
    "rank_order": "tp-cp-ep-dp-pp",
    "use_distributed_optimizer": None,  # None: the recipe's choice (Bridge), on (mcore)
    "moe_shared_expert_overlap": None,  # None: on with the all-to-all dispatcher and no a2a overlap (the recipes)
    # Megatron-Core's moe_expert_rank_capacity_factor (0.19+); required for ncclep, ignored by the other dispatchers
    "moe_expert_rank_capacity_factor": None,
    # Bridge 0.6.2 perf-recipe settings (launch/training.py); absent = off, and then nothing is set for them
    "use_megatron_fsdp": False,
    "data_parallel_sharding_strategy": "optim_grads_params",
    "outer_dp_sharding_strategy": "no_shard",
    "num_distributed_optimizer_instances": 1,
    "fp8_param_gather": False,
    "moe_paged_stash": False,
    "use_transformer_engine_op_fuser": False,
    "fp8_dot_product_attention": False,
    "fp8_output_proj": False,
    "delay_wgrad_compute": False,
    "offload_modules": [],
    "fine_grained_offloading_max_inflight_offloads": None,
    "cuda_graph_warmup_steps": None,  # None: the recipe's
    # uneven first / last pipeline stages (no layout string); None: not set
    "num_layers_in_first_pipeline_stage": None,
    "num_layers_in_last_pipeline_stage": None,
    # Megatron-Core's optimizer CPU offload (OptimizerConfig); off: nothing is set
    "optimizer_cpu_offload": False,
    # Megatron's use_precision_aware_optimizer; None: the recipe's; true also gets bf16 moments (bridge.py)
    "use_precision_aware_optimizer": None,
    "optimizer_offload_fraction": 1.0,
    "overlap_cpu_optimizer_d2h_h2d": False,
    # A constant learning rate, no warmup (the dispatcher A/B: a stable run keeps rounding differences between
    # dispatchers from growing); None: the recipe's schedule (bridge) or LEARNING_RATE (mcore), as before
    "lr": None,
    # The progress watchdog (payload/train/watchdog.py): seconds without a new stage or a finished iteration before a
    # rank prints MBRIDGE_HANG with its stacks and exits 124; 0 = off
    "hang_timeout_s": DEFAULT_HANG_TIMEOUT_S,
}
BRIDGE_RECIPE_KEYS = ("use_megatron_fsdp", "data_parallel_sharding_strategy", "outer_dp_sharding_strategy",
                      "num_distributed_optimizer_instances", "fp8_param_gather", "moe_paged_stash",
                      "use_transformer_engine_op_fuser", "fp8_dot_product_attention", "fp8_output_proj",
                      "offload_modules", "optimizer_cpu_offload", "fine_grained_offloading_max_inflight_offloads",
                      "use_precision_aware_optimizer")
MODEL_KEYS = (
    "name", "family", "num_layers", "hidden_size", "ffn_hidden_size", "moe_ffn_hidden_size", "num_attention_heads",
    "num_experts", "moe_router_topk", "shared_expert_intermediate_size", "first_k_dense", "vocab_size",
    "router_num_groups", "router_group_topk", "q_lora_rank", "kv_lora_rank", "qk_head_dim", "qk_pos_emb_head_dim",
    "v_head_dim", "is_proxy",
)
MAX_HANG_TIMEOUT_S = 7 * 24 * 3600  # a week, as the refit payload's timeout_s
_POSITIVE = ("tp", "pp", "cp", "ep", "etp", "mbs", "gbs", "seq_length", "train_iters", "log_interval")
_CHOICES = {
    "task": TASKS, "dispatcher": DISPATCHERS, "precision": PRECISIONS, "recompute": RECOMPUTE,
    "cuda_graph_impl": CUDA_GRAPH_IMPLS, "engine": ENGINES, "optimizer": OPTIMIZERS,
}

# Megatron-Bridge training/mixed_precision.py registered recipes; bf16 keeps the model recipe's own config.
BRIDGE_PRECISION_RECIPES = {
    "bf16": None,
    "fp8_delayed": "bf16_with_fp8_delayed_scaling_mixed",
    "fp8_tensorwise": "bf16_with_fp8_current_scaling_mixed",
    "fp8_blockwise": "bf16_with_fp8_subchannel_scaling_mixed",
    "mxfp8": "bf16_with_mxfp8_mixed",
    "nvfp4": "bf16_with_nvfp4_mixed",  # training/mixed_precision.py L411 (0.4.2): fp4 e2m1, recipe nvfp4
}


class ConfigError(ValueError):
    """A configuration problem; the message names the key, its value and the fix."""


def check_config(raw: dict[str, Any]) -> dict[str, Any]:
    """The config with optional keys filled in; raises ConfigError naming every missing or bad key."""
    if not isinstance(raw, dict):
        raise ConfigError(f"the training config must be a JSON object, got {type(raw).__name__}")
    missing = [k for k in REQUIRED_KEYS if k not in raw]
    if missing:
        raise ConfigError(f"training config is missing key(s) {', '.join(missing)} (launch/training.py writes them)")
    cfg = {**OPTIONAL_KEYS, **raw}
    model = cfg["model"]
    if not isinstance(model, dict):
        raise ConfigError(f"model must be an object of model facts (catalog/models.py), got {model!r}")
    missing = [k for k in MODEL_KEYS if k not in model]
    if missing:
        raise ConfigError(f"model is missing key(s) {', '.join(missing)} (catalog/models.py ModelSpec fields)")
    errors = []
    for key, allowed in _CHOICES.items():
        if cfg[key] not in allowed:
            errors.append(f"{key} = {cfg[key]!r} is not one of {', '.join(allowed)}")
    if cfg["deepep_impl"] not in (None, *DEEPEP_IMPLS):
        errors.append(f"deepep_impl = {cfg['deepep_impl']!r} is not one of {', '.join(DEEPEP_IMPLS)}")
    for key in _POSITIVE:
        if not _is_int(cfg[key]) or cfg[key] < 1:
            errors.append(f"{key} = {cfg[key]!r} must be a positive integer")
    if cfg["vp"] is not None and (not _is_int(cfg["vp"]) or cfg["vp"] < 1):
        errors.append(f"vp = {cfg['vp']!r} must be null or a positive integer")
    mtp = cfg["mtp_num_layers"]
    if mtp is not None and (not _is_int(mtp) or mtp < 0):
        errors.append(f"mtp_num_layers = {mtp!r} must be null or an integer >= 0")
    if cfg["task"] == "sft" and not cfg["checkpoint_dir"]:
        errors.append("task = 'sft' needs checkpoint_dir (the Megatron checkpoint to fine-tune from)")
    overlap = cfg["moe_shared_expert_overlap"]
    if overlap not in (None, True, False):
        errors.append(f"moe_shared_expert_overlap = {overlap!r} must be null, true or false")
    elif overlap and (cfg["dispatcher"] != "alltoall" or cfg["moe_a2a_overlap"]):
        errors.append("moe_shared_expert_overlap = true needs dispatcher = 'alltoall' and moe_a2a_overlap = false "
                      "(megatron-core transformer_config.py); set it to false or null")
    cf = cfg["moe_expert_rank_capacity_factor"]
    if cf is not None and (not isinstance(cf, (int, float)) or isinstance(cf, bool) or not math.isfinite(cf)
                           or cf <= 0):
        errors.append(f"moe_expert_rank_capacity_factor = {cf!r} must be null or a finite number > 0")
    elif cf is None and cfg["dispatcher"] == "ncclep":
        errors.append("dispatcher = 'ncclep' needs moe_expert_rank_capacity_factor (megatron-core's _NCCLEPManager "
                      "sizes the per-rank receive buffer with it and raises without it); set e.g. 1.5")
    for key in ("num_layers_in_first_pipeline_stage", "num_layers_in_last_pipeline_stage"):
        if cfg[key] is not None and (not _is_int(cfg[key]) or cfg[key] < 1):
            errors.append(f"{key} = {cfg[key]!r} must be null or a positive integer")
    warmup = cfg["cuda_graph_warmup_steps"]
    if warmup is not None and (not _is_int(warmup) or warmup < 0):
        errors.append(f"cuda_graph_warmup_steps = {warmup!r} must be null or an integer >= 0")
    cap = cfg["fine_grained_offloading_max_inflight_offloads"]
    if cap is not None and (not _is_int(cap) or cap < 0):
        errors.append(f"fine_grained_offloading_max_inflight_offloads = {cap!r} must be null or an integer >= 0")
    share = cfg["optimizer_offload_fraction"]
    if not isinstance(share, (int, float)) or isinstance(share, bool) or not 0 <= share <= 1:
        errors.append(f"optimizer_offload_fraction = {share!r} must be a number in [0, 1]")
    lr = cfg["lr"]
    if lr is not None and (not isinstance(lr, (int, float)) or isinstance(lr, bool) or not math.isfinite(lr)
                           or not 0 < lr <= 1):
        errors.append(f"lr = {lr!r} must be null or a finite number > 0 and <= 1 (a constant learning rate)")
    hang = cfg["hang_timeout_s"]
    if not _is_int(hang) or not 0 <= hang <= MAX_HANG_TIMEOUT_S:
        errors.append(f"hang_timeout_s = {hang!r} must be an integer in [0, {MAX_HANG_TIMEOUT_S}] (seconds without "
                      "progress before a rank reports a hang and exits; 0 = off)")
    if cfg["echo"] is not None and not (isinstance(cfg["echo"], dict) and "num_echo_experts" in cfg["echo"]):
        errors.append(f"echo = {cfg['echo']!r} must be null or an object with num_echo_experts")
    if errors:
        raise ConfigError("bad training config: " + "; ".join(errors))
    return cfg


def is_full_iteration_graph(impl: str, scope: Any) -> bool:
    """A full-iteration CUDA graph: ``cuda_graph_impl = "full_iteration"`` (megatron-core 0.19), or ``"local"`` with
    ``"full_iteration"`` in the scope. Megatron-Bridge 0.6.2 utils/cuda_graph.py L121-L131
    (is_full_iteration_cuda_graph) treats the two alike, and megatron-core 0.19.2 transformer/cuda_graph_config.py
    L11 migrates the scope to the implementation. The one test of the question for the payload and the rules
    (rules/predicates.py)."""
    return impl == "full_iteration" or (impl == "local" and "full_iteration" in list(scope or ()))


def shared_expert_overlap(cfg: dict[str, Any]) -> bool:
    """Megatron's moe_shared_expert_overlap for this run: the config's value, else the recipes' choice (on with the
    all-to-all dispatcher unless a2a overlap replaces it). Only meaningful for a model with a shared expert."""
    if cfg["moe_shared_expert_overlap"] is not None:
        return bool(cfg["moe_shared_expert_overlap"])
    return cfg["dispatcher"] == "alltoall" and not cfg["moe_a2a_overlap"]


def rank_capacity_factor(cfg: dict[str, Any]) -> float | None:
    """Megatron's moe_expert_rank_capacity_factor for this run: the config's value for the ncclep backend, None for
    every other dispatcher. Megatron-Core 0.19 refuses the field unless the flex backend is hybridep or ncclep
    (transformer_config.py L1692-L1697), and with hybridep it would turn on token dropping (and need the TE op
    fuser, L1698-L1705), so a factor swept beside a dispatcher A/B reaches only the ncclep arm. Bridge 0.6.2's
    paged-stash recipes set it with hybridep and the TE op fuser on: there it is handed over too."""
    stash = (cfg.get("moe_paged_stash") and cfg["dispatcher"] == "hybridep"
             and cfg.get("use_transformer_engine_op_fuser"))
    if cfg["dispatcher"] != "ncclep" and not stash:
        return None
    return cfg["moe_expert_rank_capacity_factor"]


def load_config(path: str | Path) -> dict[str, Any]:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as e:
        raise ConfigError(f"cannot read the training config {path}: {e.strerror}") from None
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as e:
        raise ConfigError(f"{path} is not valid JSON: {e}") from None
    return check_config(raw)


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def select_engine(requested: str, bridge_available: bool) -> str:
    """"auto" runs Megatron-Bridge where it is installed and the Megatron-Core-only loop elsewhere."""
    if requested == "auto":
        return "bridge" if bridge_available else "mcore"
    if requested == "bridge" and not bridge_available:
        raise ConfigError(
            "engine = 'bridge' but megatron.bridge cannot be imported in this container; "
            "use a Megatron-Bridge image (e.g. NGC nemo) or engine = 'mcore' for a proxy model"
        )
    if requested not in ("bridge", "mcore"):
        raise ConfigError(f"engine = {requested!r} is not one of {', '.join(ENGINES)}")
    return requested


def megatron_mtp_layers(cfg: dict[str, Any]) -> int | None:
    """MTP layers as Megatron should see them: 0 means no MTP, which Megatron spells None.

    Megatron-Core / Bridge's a2a-overlap check accepts only None or 1 ("MTP layernum only supports 1"), so an int 0
    for a model without MTP (Kimi-K2) would abort an overlap run; None means the same thing everywhere else.
    """
    return cfg["mtp_num_layers"] or None


def virtual_pipeline(cfg: dict[str, Any]) -> int | None:
    """Megatron's virtual_pipeline_model_parallel_size: None unless there really are several chunks per stage."""
    vp = cfg["vp"]
    return vp if vp is not None and vp > 1 else None


def moe_layer_freq(model: dict[str, Any]) -> list[int]:
    """Dense first k layers, then MoE: Megatron's moe_layer_freq list (DeepSeek-V3's first_k_dense_replace)."""
    return [0] * model["first_k_dense"] + [1] * (model["num_layers"] - model["first_k_dense"])


def derived_pipeline_layout(num_layers: int, stages: int, mtp_layers: int | None) -> list[list[str]]:
    """The Megatron-Bridge DeepSeek-V3 table's rule for any layer count: ceil(L/S) decoders per (virtual) stage,
    the remainder on the last one, embedding first, MTP layers and the loss last.

    For 61 layers this reproduces recipes/deepseek/deepseek_v3.py's table entry for entry; the proxies (a few
    layers) need it because that table is written for 61.
    """
    per_stage = math.ceil(num_layers / stages)
    last = num_layers - per_stage * (stages - 1)
    if stages < 2 or last < 0:
        raise ConfigError(
            f"{num_layers} decoder layers cannot be split over {stages} pipeline stages (pp*vp); "
            "use fewer stages or give an explicit pipeline_layout"
        )
    tail = ["mtp"] * (mtp_layers or 0) + ["loss"]
    middle = [["decoder"] * per_stage for _ in range(stages - 2)]
    return [["embedding"] + ["decoder"] * per_stage, *middle, ["decoder"] * last + tail]


def with_mtp_tail(layout: list[list[str]] | None, mtp_layers: int | None) -> list[list[str]] | None:
    """A recipe table entry with the run's MTP layers before the loss on the last stage. Kimi-K2's table
    (_get_kimi_k2_pipeline_layout) has none, as its model has none; a run that sets mtp_num_layers gets them where
    the DeepSeek-V3 table puts them (and where plan/layout.py puts them), not a layout Megatron-Core refuses."""
    if layout is None or not mtp_layers:
        return layout
    stages = [list(stage) for stage in layout]
    last = stages[-1]
    at = last.index("loss") if "loss" in last else len(last)
    stages[-1] = last[:at] + ["mtp"] * mtp_layers + last[at:]
    return stages


def uneven_stages(cfg: dict[str, Any]) -> dict[str, int]:
    """The uneven first / last pipeline-stage layer counts the config sets (Megatron's field names)."""
    return {k: int(cfg[k]) for k in ("num_layers_in_first_pipeline_stage", "num_layers_in_last_pipeline_stage")
            if cfg.get(k) is not None}


def pipeline_layout(cfg: dict[str, Any]) -> tuple[str, Any]:
    """Where the pipeline layout comes from: ("explicit", str) from the config, ("uneven", None) when the config gives
    first / last stage layer counts (Megatron splits the layers, no layout string: it refuses both together),
    ("none", None) without pipelining, ("derived", layout) for a proxy, or ("recipe", None) for a full model (the
    recipe's mtp-aware (PP, VP) table)."""
    if cfg["pipeline_layout"]:
        return "explicit", cfg["pipeline_layout"]
    if uneven_stages(cfg):
        return "uneven", None
    stages = cfg["pp"] * (cfg["vp"] or 1)
    if stages == 1:
        return "none", None
    if cfg["model"]["is_proxy"]:
        return "derived", derived_pipeline_layout(cfg["model"]["num_layers"], stages, megatron_mtp_layers(cfg))
    return "recipe", None


def recompute_fields(cfg: dict[str, Any]) -> dict[str, Any]:
    """Megatron recompute fields; full recompute as the DeepSeek-V3 32-node recipe sets it (uniform, 1 layer)."""
    kind = cfg["recompute"]
    if kind == "none":
        return {"recompute_granularity": None, "recompute_method": None, "recompute_num_layers": None,
                "recompute_modules": None}
    if kind == "selective":
        return {"recompute_granularity": "selective", "recompute_method": None, "recompute_num_layers": None,
                "recompute_modules": list(cfg["recompute_modules"]) or None}
    return {"recompute_granularity": "full", "recompute_method": "uniform", "recompute_num_layers": 1,
            "recompute_modules": None}


def echo_fields(cfg: dict[str, Any]) -> dict[str, Any]:
    """MoE Echo's TransformerConfig fields (Victarry/Megatron-MoE-Echo); empty when echo is off.

    Only HybridEP dispatches echo experts sync-free, so the echo expert dispatcher follows the token dispatcher.
    """
    echo = cfg["echo"]
    if echo is None:
        return {}
    fields: dict[str, Any] = {
        "moe_enable_echo": True,
        "moe_num_echo_experts": echo["num_echo_experts"],
        "moe_echo_expert_dispatcher_type": "hybridep" if cfg["dispatcher"] == "hybridep" else "alltoall",
        "moe_use_device_initiated_grouped_gemm": bool(echo.get("device_initiated_grouped_gemm", False)),
        "moe_echo_recompute_expert_dispatch": bool(echo.get("recompute_expert_dispatch", False)),
    }
    if echo.get("received_token_capacity") is not None:
        fields["moe_received_token_capacity"] = echo["received_token_capacity"]
    return fields


def missing_echo_fields(cfg: dict[str, Any], available: set[str], where: str) -> None:
    """Echo was asked for: every one of its fields must exist in the installed Megatron, or we stop."""
    missing = sorted(k for k in echo_fields(cfg) if k not in available)
    if missing:
        raise ConfigError(
            f"echo is requested but the installed {where} has no field(s) {', '.join(missing)}; MoE Echo needs a "
            "Megatron-Core build that carries it (Victarry/Megatron-MoE-Echo). Remove echo or change the image."
        )


def catalog_shape(model: dict[str, Any]) -> dict[str, Any]:
    """The catalog's architecture as Megatron provider fields (applied to proxies, checked against full models)."""
    return {
        "num_layers": model["num_layers"],
        "hidden_size": model["hidden_size"],
        "ffn_hidden_size": model["ffn_hidden_size"],
        "moe_ffn_hidden_size": model["moe_ffn_hidden_size"],
        "num_attention_heads": model["num_attention_heads"],
        "num_moe_experts": model["num_experts"],
        "moe_router_topk": model["moe_router_topk"],
        "moe_shared_expert_intermediate_size": model["shared_expert_intermediate_size"] or None,
        "moe_layer_freq": moe_layer_freq(model),
        "moe_router_num_groups": model["router_num_groups"],
        "moe_router_group_topk": model["router_group_topk"],
        "q_lora_rank": model["q_lora_rank"],
        "kv_lora_rank": model["kv_lora_rank"],
        "qk_head_dim": model["qk_head_dim"],
        "qk_pos_emb_head_dim": model["qk_pos_emb_head_dim"],
        "v_head_dim": model["v_head_dim"],
        "vocab_size": model["vocab_size"],
    }


# Facts a full model's provider (built from its Hugging Face config) must agree with the catalog on.
IDENTITY_FIELDS = ("num_layers", "hidden_size", "num_attention_heads", "num_moe_experts", "moe_router_topk")


def bridge_recipe(cfg: dict[str, Any], kimi_recipe_available: bool) -> str:
    """Which Megatron-Bridge recipe builds the ConfigContainer: Kimi-K2's own where Bridge ships it, else DeepSeek-V3's
    (Kimi-K2 then gets its provider from AutoBridge and hf_model_id, grafted on; proxies take DSV3's plus shapes)."""
    if cfg["model"]["name"] == "kimi_k2":
        return "kimi_k2" if kimi_recipe_available else "deepseek_v3+autobridge"
    return "deepseek_v3"


def bridge_overrides(cfg: dict[str, Any]) -> dict[str, Any]:
    """Every ConfigContainer field the run sets, as dotted paths ("model.tensor_model_parallel_size": 8).

    What needs a function rather than a value (the dispatcher backend, the recipe's layout table, the dataset
    object, the mixed-precision preset) is decided by `bridge_recipe`, `pipeline_layout`, the dispatcher and
    BRIDGE_PRECISION_RECIPES and applied by train_bridge.py.
    """
    overlap = bool(cfg["moe_a2a_overlap"])
    model: dict[str, Any] = {
        "tensor_model_parallel_size": cfg["tp"],
        "pipeline_model_parallel_size": cfg["pp"],
        "virtual_pipeline_model_parallel_size": virtual_pipeline(cfg),
        "context_parallel_size": cfg["cp"],
        "expert_model_parallel_size": cfg["ep"],
        "expert_tensor_parallel_size": cfg["etp"],
        "sequence_parallel": bool(cfg["sequence_parallel"]) and cfg["tp"] > 1,
        "seq_length": cfg["seq_length"],
        "mtp_num_layers": megatron_mtp_layers(cfg),
        "moe_router_force_load_balancing": bool(cfg["force_balanced_routing"]),
        # Shared-expert overlap runs only with the all-to-all dispatcher and is incompatible with a2a overlap.
        "moe_shared_expert_overlap": shared_expert_overlap(cfg),
        "overlap_moe_expert_parallel_comm": overlap,
        # Off unless the test turns it on (megatron-core asserts a2a overlap with it; the rules check that first)
        "delay_wgrad_compute": bool(cfg["delay_wgrad_compute"]),
        "cuda_graph_impl": cfg["cuda_graph_impl"],
        "cuda_graph_scope": list(cfg["cuda_graph_scope"]),
        **recompute_fields(cfg),
        **echo_fields(cfg),
    }
    model.update(uneven_stages(cfg))  # with no layout: _apply_layout leaves pipeline_model_parallel_layout None
    if rank_capacity_factor(cfg) is not None:
        # only where it is meant: the field does not exist before megatron-core 0.19 (set_fields would refuse it)
        model["moe_expert_rank_capacity_factor"] = float(rank_capacity_factor(cfg))
    if cfg["model"]["is_proxy"]:
        model.update(catalog_shape(cfg["model"]))
    out = {f"model.{k}": v for k, v in model.items()}
    out.update({
        "comm_overlap.overlap_moe_expert_parallel_comm": overlap,
        "comm_overlap.delay_wgrad_compute": bool(cfg["delay_wgrad_compute"]),
        **recipe062_fields(cfg),
        "train.micro_batch_size": cfg["mbs"],
        "train.global_batch_size": cfg["gbs"],
        "train.train_iters": cfg["train_iters"],
        # Benchmarks: no evaluation pass, no checkpoint written, nothing resumed from a stale directory.
        "validation.eval_iters": 0,
        "checkpoint.save": None,
        "checkpoint.load": None,
        "checkpoint.pretrained_checkpoint": cfg["checkpoint_dir"] if cfg["task"] == "sft" else None,
        "rng.seed": cfg["seed"],
        "logger.log_interval": cfg["log_interval"],
        "logger.log_throughput": True,
        "logger.tensorboard_dir": None,
    })
    if cfg["use_distributed_optimizer"] is not None:
        out["ddp.use_distributed_optimizer"] = bool(cfg["use_distributed_optimizer"])
    if cfg["cuda_graph_impl"] != "none" and cfg["cuda_graph_warmup_steps"] is not None:
        out["model.cuda_graph_warmup_steps"] = int(cfg["cuda_graph_warmup_steps"])
    if cfg["cuda_graph_impl"] != "none":
        # GPTModelProvider.provide asserts TE's RNG tracker for CUDA graphs (gpt_provider.py 0.4.2 L224-L228);
        # ConfigContainer.validate syncs rng.te_rng_tracker to the model (training/config.py 0.4.2 L1077-L1078)
        out["rng.te_rng_tracker"] = True
    if is_full_iteration_graph(cfg["cuda_graph_impl"], cfg["cuda_graph_scope"]):
        # validate() refuses a full-iteration graph, either spelling, while the rerun state machine checks the loss
        # for NaN (training/config.py 0.4.2 L1102-L1107, 0.6.2 L1370-L1374: is_full_iteration_cuda_graph)
        out["rerun_state_machine.check_for_nan_in_loss"] = False
    if cfg["model"]["is_proxy"]:
        out["tokenizer.vocab_size"] = cfg["model"]["vocab_size"]
    out.update(constant_lr_fields(cfg))
    return out


def constant_lr_fields(cfg: dict[str, Any]) -> dict[str, Any]:
    """A constant learning rate with no warmup, as ConfigContainer paths; empty (the recipe's schedule) when the config
    sets no lr. The optimizer's lr is the scheduler's max_lr and its min_lr the floor; "constant" makes Megatron-Core's
    OptimizerParamScheduler.get_lr return max_lr after the (here empty) warmup. The scheduler fields are Megatron-LM's
    megatron/training/config.py SchedulerConfig (lr_decay_style, lr_warmup_fraction, lr_warmup_iters), which
    Megatron-Bridge's SchedulerConfig subclasses (training/config.py 0.4.2 L42 and L502, 0.6.0 L41 and L392); the
    optimizer's are Megatron-Core's OptimizerConfig (Bridge's OptimizerConfig subclasses it: 0.4.2 L92, 0.6.0 L120).
    lr_warmup_fraction is cleared because it would replace lr_warmup_iters (0.4.2 L1346-L1347)."""
    lr = cfg.get("lr")
    if lr is None:
        return {}
    return {
        "optimizer.lr": float(lr),
        "optimizer.min_lr": float(lr),
        "scheduler.lr_decay_style": "constant",
        "scheduler.lr_warmup_iters": 0,
        "scheduler.lr_warmup_fraction": None,
    }


def lr_line(*, lr: Any, min_lr: Any, warmup_iters: Any, decay_style: Any, source: str) -> str:
    """MBRIDGE_LR: the learning-rate schedule a run trained with (both engines print it once, rank 0). ``source``:
    "config" (the config's constant lr), "recipe" (Bridge's recipe schedule) or "default" (mcore's LEARNING_RATE)."""
    return (f"MBRIDGE_LR lr={lr} min_lr={min_lr} warmup_iters={warmup_iters} decay_style={decay_style} "
            f"source={source}")


def recipe062_fields(cfg: dict[str, Any]) -> dict[str, Any]:
    """The Bridge 0.6.2 perf-recipe settings a test turned on, as ConfigContainer paths. Only what is on is set: the
    fields do not exist in older releases (set_fields would refuse them; the rules refuse them there first)."""
    out: dict[str, Any] = {}
    if cfg["use_megatron_fsdp"]:
        out.update({"ddp.use_megatron_fsdp": True,
                    "ddp.data_parallel_sharding_strategy": cfg["data_parallel_sharding_strategy"]})
    if cfg["num_distributed_optimizer_instances"] != 1:
        out["ddp.num_distributed_optimizer_instances"] = int(cfg["num_distributed_optimizer_instances"])
    if cfg["outer_dp_sharding_strategy"] != "no_shard":
        out["ddp.outer_dp_sharding_strategy"] = cfg["outer_dp_sharding_strategy"]
    if cfg["fp8_param_gather"]:
        out.update({"mixed_precision.fp8_param_gather": True, "mixed_precision.fp8_param": True})
    for name in ("moe_paged_stash", "use_transformer_engine_op_fuser", "fp8_output_proj"):
        if cfg[name]:
            out[f"model.{name}"] = True
    if cfg["fp8_dot_product_attention"]:
        out["mixed_precision.fp8_dot_product_attention"] = True
    if cfg["offload_modules"]:
        out.update({"model.fine_grained_activation_offloading": True,
                    "model.offload_modules": list(cfg["offload_modules"])})
        if cfg["fine_grained_offloading_max_inflight_offloads"] is not None:
            out["model.fine_grained_offloading_max_inflight_offloads"] = int(
                cfg["fine_grained_offloading_max_inflight_offloads"])
    if cfg["use_precision_aware_optimizer"] is not None:
        out["optimizer.use_precision_aware_optimizer"] = bool(cfg["use_precision_aware_optimizer"])
    if cfg["optimizer_cpu_offload"]:
        out.update({"optimizer.optimizer_cpu_offload": True,
                    "optimizer.optimizer_offload_fraction": float(cfg["optimizer_offload_fraction"]),
                    "optimizer.overlap_cpu_optimizer_d2h_h2d": bool(cfg["overlap_cpu_optimizer_d2h_h2d"])})
    return out


# Fused kernels the recipes switch on that need a module the container may lack: (provider field, the modules any
# one of which provides it, what that is). Off only where none imports, and then said (MBRIDGE_FALLBACK).
FUSION_NEEDS: tuple[tuple[str, tuple[str, ...], str], ...] = (
    ("gradient_accumulation_fusion", ("fused_weight_gradient_mlp_cuda",),
     "APEX's fused_weight_gradient_mlp_cuda (Megatron-Core's ColumnParallelLinear refuses the fusion without it)"),
    ("persist_layer_norm", ("apex.contrib.layer_norm.layer_norm",), "APEX's persistent LayerNorm kernel"),
    ("moe_grouped_gemm", ("transformer_engine.pytorch", "grouped_gemm"),
     "Transformer Engine's GroupedLinear or the grouped_gemm package"),
    ("moe_permute_fusion", ("transformer_engine.pytorch.permutation",), "Transformer Engine's fused MoE permutation"),
    ("cross_entropy_loss_fusion", ("transformer_engine.pytorch.cross_entropy",),
     "Transformer Engine's fused cross entropy"),
)


def fusion_fallbacks(enabled: dict[str, Any], importable: Callable[[str], bool]) -> list[tuple[str, str]]:
    """(field, reason) for each fusion that is on in `enabled` (provider field -> value) while no module that
    provides it imports; the caller switches exactly those off and says so."""
    out = []
    for name, modules, what in FUSION_NEEDS:
        if enabled.get(name) and not any(importable(m) for m in modules):
            out.append((name, f"needs {what}; {' / '.join(modules)} cannot be imported here"))
    return out


def mcore_unsupported(cfg: dict[str, Any]) -> list[str]:
    """What the Megatron-Core-only loop does not do; each entry names the key, the value and the way out."""
    bridge = "use engine = 'bridge' (a Megatron-Bridge image)"
    checks = [
        (cfg["pp"] > 1, f"pp = {cfg['pp']}: the mcore engine runs one pipeline stage (pp = 1); {bridge}"),
        ((cfg["vp"] or 1) > 1, f"vp = {cfg['vp']}: virtual pipelining needs pp > 1; {bridge}"),
        (bool(cfg["pipeline_layout"]), f"pipeline_layout = {cfg['pipeline_layout']!r} needs pp > 1; {bridge}"),
        (cfg["cp"] > 1, f"cp = {cfg['cp']}: context parallelism needs Transformer Engine attention; {bridge}"),
        # Megatron-Core refuses MoE with tp > 1 unless sequence parallel is on, and the local spec's torch RMSNorm
        # cannot do sequence parallelism (both seen on megatron-core 0.16.1 on GPUs).
        (cfg["tp"] > 1, f"tp = {cfg['tp']}: MoE with tensor parallelism needs sequence parallelism, which the "
                        f"local (non-TE) RMSNorm cannot do; {bridge}"),
        (cfg["precision"] != "bf16", f"precision = {cfg['precision']!r}: FP8 needs Transformer Engine; {bridge}"),
        (cfg["cuda_graph_impl"] != "none",
         f"cuda_graph_impl = {cfg['cuda_graph_impl']!r}: the mcore loop captures no CUDA graphs; {bridge}"),
        (bool(cfg["cuda_graph_scope"]),
         f"cuda_graph_scope = {','.join(cfg['cuda_graph_scope'])!r}: the mcore loop captures no CUDA graphs; "
         f"remove it or {bridge}"),
        (bool(cfg["moe_a2a_overlap"]), f"moe_a2a_overlap = true needs the combined-1F1B schedule; {bridge}"),
        (cfg["task"] != "pretrain", f"task = {cfg['task']!r}: the mcore loop loads no checkpoint; {bridge}"),
        (cfg["data"] != "mock", f"data = {cfg['data']!r}: the mcore loop trains on mock tokens only; {bridge}"),
        (cfg["optimizer"] != "adam", f"optimizer = {cfg['optimizer']!r}: the mcore loop uses Adam; {bridge}"),
        (cfg["dispatcher"] == "ncclep", "dispatcher = 'ncclep' needs Transformer Engine's NCCL EP and megatron-core "
                                        f"0.19, which the local-layer loop does not use; {bridge}"),
    ]
    # Bridge 0.6.2 perf-recipe settings the local-layer loop has no counterpart for (it does pass delay_wgrad_compute)
    for key in BRIDGE_RECIPE_KEYS:
        value = cfg.get(key, OPTIONAL_KEYS[key])
        if value != OPTIONAL_KEYS[key]:
            checks.append((True, f"{key} = {value!r}: the mcore loop does not do this; remove it or {bridge}"))
    return [msg for bad, msg in checks if bad]


def trust_remote_code(cfg: dict[str, Any]) -> bool:
    """Kimi-K2's Hugging Face config and tokenizer are custom code (auto_map -> configuration_deepseek), so
    AutoBridge and the tokenizer must run it; DeepSeek-V3's are in transformers. A config key may say otherwise."""
    if "trust_remote_code" in cfg:
        return bool(cfg["trust_remote_code"])
    return str(cfg["model"].get("name", "")).startswith("kimi")


def padded_vocab_size(vocab_size: int, tp: int, divisible_by: int = 128) -> int:
    """Megatron-LM's vocabulary padding (make-vocab-size-divisible-by times TP)."""
    multiple = divisible_by * tp
    return math.ceil(vocab_size / multiple) * multiple
