"""Engine "mcore": a Megatron-Core-only training loop for proxy models where Megatron-Bridge and Transformer Engine
are not installed (a bare PyTorch + CUDA image with megatron-core from PyPI).

What it builds and why:
- GPTModel from `get_gpt_decoder_block_spec(config, use_transformer_engine=False)`: the local (non-TE) specs, i.e.
  `get_gpt_layer_local_spec` for the first-k dense layers and `get_gpt_layer_local_spec(num_experts,
  moe_grouped_gemm=False)` (SequentialMLP experts) for the MoE layers, as `moe_layer_freq` says; MTP layers too.
- The DeepSeek-V3 family's routing as Megatron-Bridge's DeepSeek-V3 bridge sets it (sigmoid scores, expert bias,
  group-limited top-k, seq_aux_loss), RMSNorm, SwiGLU, no biases, untied embeddings.
- Multi-latent attention when the local core attention can take MLA's separate q/k and v head sizes; megatron-core
  0.16/0.17's local DotProductAttention cannot (only Transformer Engine's can), so the loop then builds standard
  multi-head attention with v_head_dim channels per head and says so (MBRIDGE_ATTENTION line).
- Expert and data parallelism only: pp = 1, and tp = 1 because Megatron-Core refuses MoE with tp > 1 unless sequence
  parallelism is on, which the local torch RMSNorm cannot do (`mcore_unsupported` lists all limits).
- bf16 (Float16Module), Megatron's DDP and optimizer (Adam; distributed optimizer as configured), a constant
  learning rate (the run measures throughput, both arms of an A/B see the same), mock tokens from a fixed seed.
- The per-iteration and memory lines in Megatron-LM's training_log format (train_log.py), on the last rank and on
  data-parallel rank 0 as there, with TFLOP/s from train_flops.py. Each line averages the iterations since the
  previous one (as Megatron-Bridge does); Megatron-LM 0.16 also prints iteration 1 without restarting its averages.
- megatron-core 0.16 without Transformer Engine crashes in the MoE router (`bind_missing_te_names`).
"""

from __future__ import annotations

import dataclasses
import os
import time
from datetime import datetime
from functools import partial
from typing import Any

from .. import dist_env
from . import watchdog
from .config import (
    ConfigError,
    echo_fields,
    lr_line,
    mcore_unsupported,
    megatron_mtp_layers,
    missing_echo_fields,
    moe_layer_freq,
    padded_vocab_size,
    recompute_fields,
    shared_expert_overlap,
)
from .flops import num_floating_point_operations
from .log import (
    built_backend,
    check_deep_ep,
    check_dispatcher,
    deep_ep_line,
    device_memory_line,
    dispatcher_class_name,
    dispatcher_line,
    first_dispatcher_class,
    hybridep_domain_env,
    import_deep_ep,
    iteration_line,
    memory_line,
)

LEARNING_RATE = 3e-4  # the DeepSeek-V3 / Kimi-K2 recipes' max_lr
INIT_METHOD_STD = 0.006  # DeepSeek-V3 recipe


def mcore_transformer_kwargs(cfg: dict[str, Any], *, mla: bool) -> dict[str, Any]:
    """TransformerConfig (mla=False) or MLATransformerConfig (mla=True) keyword arguments, JSON values only.

    `transformer_config()` adds the torch objects (activation, dtypes). Fusions are off: they need TE or apex.
    """
    m = cfg["model"]
    mtp = megatron_mtp_layers(cfg)
    flex = cfg["dispatcher"] != "alltoall"
    kw: dict[str, Any] = {
        "num_layers": m["num_layers"],
        "hidden_size": m["hidden_size"],
        "ffn_hidden_size": m["ffn_hidden_size"],
        "num_attention_heads": m["num_attention_heads"],
        "tensor_model_parallel_size": cfg["tp"],
        "pipeline_model_parallel_size": cfg["pp"],
        "context_parallel_size": cfg["cp"],
        "expert_model_parallel_size": cfg["ep"],
        "expert_tensor_parallel_size": cfg["etp"],
        "sequence_parallel": bool(cfg["sequence_parallel"]) and cfg["tp"] > 1,
        "num_moe_experts": m["num_experts"],
        "moe_ffn_hidden_size": m["moe_ffn_hidden_size"],
        "moe_router_topk": m["moe_router_topk"],
        "moe_shared_expert_intermediate_size": m["shared_expert_intermediate_size"] or None,
        "moe_layer_freq": moe_layer_freq(m),
        "moe_router_num_groups": m["router_num_groups"],
        "moe_router_group_topk": m["router_group_topk"],
        "moe_router_score_function": "sigmoid",
        "moe_router_enable_expert_bias": True,
        "moe_router_pre_softmax": True,
        "moe_router_load_balancing_type": "seq_aux_loss",
        "moe_aux_loss_coeff": 1e-4,
        "moe_router_dtype": "fp32",
        "moe_router_force_load_balancing": bool(cfg["force_balanced_routing"]),
        "moe_grouped_gemm": False,
        "moe_permute_fusion": False,
        "moe_token_dispatcher_type": "flex" if flex else "alltoall",
        "moe_shared_expert_overlap": shared_expert_overlap(cfg) and bool(m["shared_expert_intermediate_size"]),
        "mtp_num_layers": mtp,
        "normalization": "RMSNorm",
        "gated_linear_unit": True,
        "add_bias_linear": False,
        "hidden_dropout": 0.0,
        "attention_dropout": 0.0,
        "init_method_std": INIT_METHOD_STD,
        "bf16": True,
        "masked_softmax_fusion": False,
        "bias_activation_fusion": False,
        "bias_dropout_fusion": False,
        "apply_rope_fusion": False,
        "gradient_accumulation_fusion": False,
        "persist_layer_norm": False,
        "cross_entropy_loss_fusion": False,
        "transformer_impl": "local",
        **recompute_fields(cfg),
    }
    if flex:
        kw["moe_flex_dispatcher_backend"] = cfg["dispatcher"]
    if mtp:
        kw["mtp_loss_scaling_factor"] = 0.1
    if mla:
        kw.update(
            multi_latent_attention=True,
            qk_layernorm=True,
            q_lora_rank=m["q_lora_rank"],
            kv_lora_rank=m["kv_lora_rank"],
            qk_head_dim=m["qk_head_dim"],
            qk_pos_emb_head_dim=m["qk_pos_emb_head_dim"],
            v_head_dim=m["v_head_dim"],
            rotary_base=10000,
        )
    else:
        kw.update(kv_channels=m["v_head_dim"], num_query_groups=m["num_attention_heads"])
    kw.update(echo_fields(cfg))
    return kw


def transformer_config(kwargs: dict[str, Any]):
    import torch
    from megatron.core.transformer.transformer_config import MLATransformerConfig, TransformerConfig

    cls = MLATransformerConfig if kwargs.get("multi_latent_attention") else TransformerConfig
    return cls(**kwargs, activation_func=torch.nn.functional.silu, params_dtype=torch.bfloat16,
               pipeline_dtype=torch.bfloat16)


def transformer_config_fields() -> set[str]:
    from megatron.core.transformer.transformer_config import MLATransformerConfig

    return {f.name for f in dataclasses.fields(MLATransformerConfig)}


# megatron-core 0.16 binds these in transformer/moe/moe_utils.py only when Transformer Engine imports, yet its router
# GEMM tests `te_general_gemm is not None` unconditionally: a NameError without TE. 0.17 binds them to None instead.
_TE_ONLY_MOE_NAMES = (
    "te_general_gemm", "fused_compute_score_for_moe_aux_loss", "fused_moe_aux_loss", "fused_permute",
    "fused_permute_with_probs", "fused_sort_chunks_by_index", "fused_sort_chunks_by_index_with_probs",
    "fused_topk_with_score_function", "fused_unpermute",
)


def bind_missing_te_names() -> list[str]:
    """Do what megatron-core 0.17 does without TE (the names are None); returns the names that were missing."""
    from megatron.core.transformer.moe import moe_utils

    missing = [name for name in _TE_ONLY_MOE_NAMES if not hasattr(moe_utils, name)]
    for name in missing:
        setattr(moe_utils, name, None)
    return missing


def mla_supported() -> bool:
    """Whether the local (non-TE) core attention takes MLA's separate q/k and v head sizes."""
    import inspect

    from megatron.core.transformer.dot_product_attention import DotProductAttention

    params = inspect.signature(DotProductAttention.__init__).parameters
    return "k_channels" in params and "v_channels" in params


def _megatron_core_version() -> str:
    import megatron.core

    return f"megatron-core {getattr(megatron.core, '__version__', '?')}"


def run(cfg: dict[str, Any], dist: dist_env.DistEnv) -> None:
    problems = mcore_unsupported(cfg)
    if problems:
        raise ConfigError("engine 'mcore' cannot run this config: " + "; ".join(problems))
    if cfg["echo"] is not None:
        missing_echo_fields(cfg, transformer_config_fields(), _megatron_core_version())
    deep_ep, deep_ep_error = import_deep_ep()
    check_deep_ep(cfg["dispatcher"], cfg["deepep_impl"], deep_ep, deep_ep_error)
    unset = hybridep_domain_env(cfg, os.environ)
    if unset and dist.rank == 0:
        print(unset, flush=True)
    if cfg["tp"] > 1 and cfg["sequence_parallel"]:
        # Megatron-LM's requirement for sequence parallelism: kernels reach the GPU in issue order.
        os.environ.setdefault("CUDA_DEVICE_MAX_CONNECTIONS", "1")

    import torch
    from megatron.core import parallel_state, tensor_parallel

    torch.cuda.set_device(dist.local_rank)
    # No device_id: with it every process group Megatron creates gets its NCCL communicator at once (eager init),
    # used or not. Measured on H200 (benchmarks/gpu_runtime_memory.py): 6.5 GiB (1 GPU) / 5.0 GiB (2 GPUs) more outside
    # torch's allocator right after initialize_model_parallel. Lazily, a communicator exists once its group is used.
    torch.distributed.init_process_group(backend="nccl", rank=dist.rank, world_size=dist.world_size)
    try:
        parallel_state.initialize_model_parallel(
            tensor_model_parallel_size=cfg["tp"],
            pipeline_model_parallel_size=cfg["pp"],
            context_parallel_size=cfg["cp"],
            expert_model_parallel_size=cfg["ep"],
            expert_tensor_parallel_size=cfg["etp"],
            order=cfg["rank_order"],
        )
        torch.distributed.barrier()
        _device_memory(dist, "process_groups")
        torch.manual_seed(cfg["seed"])
        tensor_parallel.model_parallel_cuda_manual_seed(cfg["seed"])
        _train(cfg, dist, deep_ep)
    finally:
        parallel_state.destroy_model_parallel()
        torch.distributed.destroy_process_group()


def _device_memory(dist: dist_env.DistEnv, stage: str) -> None:
    """Rank 0's device memory at a setup stage (MBRIDGE_DEVICE_MEMORY ... stage=<stage>), iteration 0."""
    import torch

    if dist.rank == 0:
        free, total = torch.cuda.mem_get_info()
        print(device_memory_line(rank=dist.rank, iteration=0, free=free, total=total,
                                 reserved=torch.cuda.memory_reserved(), stage=stage), flush=True)


def _build(cfg: dict[str, Any], config, padded_vocab: int):
    import torch
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_decoder_block_spec, get_gpt_mtp_block_spec
    from megatron.core.models.gpt.gpt_model import GPTModel
    from megatron.core.transformer.module import Float16Module

    spec = get_gpt_decoder_block_spec(config, use_transformer_engine=False, normalization="RMSNorm")
    mtp_spec = get_gpt_mtp_block_spec(config, spec, use_transformer_engine=False) if config.mtp_num_layers else None
    model = GPTModel(
        config=config,
        transformer_layer_spec=spec,
        vocab_size=padded_vocab,
        max_sequence_length=cfg["seq_length"],
        pre_process=True,
        post_process=True,
        share_embeddings_and_output_weights=False,
        position_embedding_type="rope",
        mtp_block_spec=mtp_spec,
    )
    model.cuda(torch.cuda.current_device())
    return Float16Module(config, model)


def _mock_batches(cfg: dict[str, Any], vocab_size: int, dp_rank: int):
    """Random tokens, the same on every rank of one data-parallel replica, different across replicas."""
    import torch

    mbs, seq = cfg["mbs"], cfg["seq_length"]
    generator = torch.Generator(device="cuda")
    generator.manual_seed(cfg["seed"] * 1_000_003 + dp_rank)
    position_ids = torch.arange(seq, device="cuda").unsqueeze(0).expand(mbs, -1)
    # Megatron's convention: True = masked out (above the diagonal).
    attention_mask = torch.ones((1, 1, seq, seq), device="cuda").triu(diagonal=1).bool()
    loss_mask = torch.ones((mbs, seq), device="cuda")
    while True:
        tokens = torch.randint(0, vocab_size, (mbs, seq + 1), generator=generator, device="cuda")
        yield {"tokens": tokens[:, :-1].contiguous(), "labels": tokens[:, 1:].contiguous(),
               "position_ids": position_ids, "attention_mask": attention_mask, "loss_mask": loss_mask}


def _loss_func(loss_mask, output_tensor):
    """Megatron-LM pretrain_gpt.py loss_func: summed loss, token count, and the 'lm loss' report."""
    import torch

    losses = output_tensor.view(-1).float()
    mask = loss_mask.view(-1).float()
    loss = torch.sum(losses * mask)
    num_tokens = mask.sum().clone().detach().to(torch.int)
    return loss, num_tokens, {"lm loss": torch.cat([loss.clone().detach().view(1), num_tokens.view(1)])}


def _forward_step(data_iterator, model):
    batch = next(data_iterator)
    output = model(batch["tokens"], batch["position_ids"], batch["attention_mask"], labels=batch["labels"],
                   loss_mask=batch["loss_mask"])
    return output, partial(_loss_func, batch["loss_mask"])


def learning_rate(cfg: dict[str, Any]) -> float:
    """The constant learning rate of this run (min_lr = lr, no warmup): the config's lr, else LEARNING_RATE."""
    return float(cfg["lr"]) if cfg.get("lr") is not None else LEARNING_RATE


def _learning_rate(optimizer, default: float = LEARNING_RATE) -> float:
    for group in optimizer.param_groups:
        if group["params"] and not group.get("is_decoupled_lr", False):
            return group["lr"]
    return default


def _train(cfg: dict[str, Any], dist: dist_env.DistEnv, deep_ep) -> None:
    import torch
    from megatron.core import parallel_state
    from megatron.core.distributed import DistributedDataParallel, DistributedDataParallelConfig, finalize_model_grads
    from megatron.core.optimizer import OptimizerConfig, get_megatron_optimizer
    from megatron.core.pipeline_parallel import get_forward_backward_func
    from megatron.core.transformer.moe.moe_utils import track_moe_metrics
    from megatron.core.transformer.multi_token_prediction import MTPLossLoggingHelper

    rank0 = dist.rank == 0
    bind_missing_te_names()
    mla = mla_supported()
    if rank0 and not mla:
        print(f"MBRIDGE_ATTENTION requested=mla built=standard reason={_megatron_core_version()} local "
              "DotProductAttention takes no k_channels/v_channels (MLA needs Transformer Engine here); "
              "standard multi-head attention with v_head_dim channels per head stands in", flush=True)
    config = transformer_config(mcore_transformer_kwargs(cfg, mla=mla))
    padded_vocab = padded_vocab_size(cfg["model"]["vocab_size"], cfg["tp"])
    model = _build(cfg, config, padded_vocab)
    _device_memory(dist, "model")
    # the progress watchdog's stages (payload/train/watchdog.py): model built, first dispatch entered
    watchdog.reach("model_built")
    watchdog.watch_dispatch([model])

    built = dispatcher_class_name(first_dispatcher_class(model), config.moe_token_dispatcher_type)
    backend = built_backend(built, config.moe_flex_dispatcher_backend)
    if rank0:
        print(dispatcher_line(cfg["dispatcher"], built, backend), flush=True)
        print(deep_ep_line(deep_ep), flush=True)
    check_dispatcher(cfg["dispatcher"], built, backend)

    use_dist_opt = cfg["use_distributed_optimizer"] is not False
    ddp_config = DistributedDataParallelConfig(
        grad_reduce_in_fp32=False, overlap_grad_reduce=False, use_distributed_optimizer=use_dist_opt,
        check_for_nan_in_grad=True,
    )
    model = DistributedDataParallel(config=config, ddp_config=ddp_config, module=model)
    lr = learning_rate(cfg)
    if rank0:
        print(lr_line(lr=lr, min_lr=lr, warmup_iters=0, decay_style="constant",
                      source="config" if cfg.get("lr") is not None else "default"), flush=True)
    optimizer = get_megatron_optimizer(
        OptimizerConfig(optimizer="adam", lr=lr, min_lr=lr, weight_decay=0.1,
                        adam_beta1=0.9, adam_beta2=0.95, clip_grad=1.0, bf16=True, params_dtype=torch.bfloat16,
                        use_distributed_optimizer=use_dist_opt),
        [model],
    )
    _device_memory(dist, "optimizer")
    config.finalize_model_grads_func = finalize_model_grads
    config.grad_scale_func = optimizer.scale_loss
    config.no_sync_func = model.no_sync

    dp_size = parallel_state.get_data_parallel_world_size()
    num_microbatches = cfg["gbs"] // (cfg["mbs"] * dp_size)
    if num_microbatches < 1 or cfg["gbs"] % (cfg["mbs"] * dp_size):
        raise ConfigError(f"gbs = {cfg['gbs']} is not a multiple of mbs*dp = {cfg['mbs'] * dp_size}")
    mtp = megatron_mtp_layers(cfg)
    flops = num_floating_point_operations(
        cfg["model"], batch_size=cfg["gbs"], seq_length=cfg["seq_length"], mtp_num_layers=mtp,
        padded_vocab_size=padded_vocab, mla=mla, kv_channels=config.kv_channels,
        num_query_groups=config.num_query_groups,
    )
    # Megatron-LM training_log: "aux_loss" is a substring of "seq_aux_loss", so both trackers are initialised.
    track_names = ["load_balancing_loss", "seq_load_balancing_loss"]
    batches = _mock_batches(cfg, cfg["model"]["vocab_size"], parallel_state.get_data_parallel_rank())
    forward_backward = get_forward_backward_func()
    world = torch.distributed.get_world_size()
    last_rank = torch.distributed.get_rank() == world - 1

    totals: dict[str, torch.Tensor] = {}
    advanced = skipped = nan_iters = 0
    report_memory = True
    torch.distributed.barrier()
    torch.cuda.synchronize()
    interval_start = time.time()
    for iteration in range(1, cfg["train_iters"] + 1):
        model.zero_grad_buffer()
        optimizer.zero_grad()
        losses_reduced = forward_backward(
            forward_step_func=_forward_step, data_iterator=batches, model=[model],
            num_microbatches=num_microbatches, seq_length=cfg["seq_length"], micro_batch_size=cfg["mbs"],
            decoder_seq_length=cfg["seq_length"], forward_only=False,
        )
        update_successful, grad_norm, _ = optimizer.step()
        watchdog.iteration_done(iteration)
        skipped_iter = 0 if update_successful else 1

        loss_dict = {}
        for key in losses_reduced[0]:
            val = torch.vstack([x[key].view(-1) for x in losses_reduced]).sum(dim=0)
            torch.distributed.all_reduce(val, group=parallel_state.get_data_parallel_group(with_context_parallel=True))
            loss_dict[key] = val[0] / val[1]
        if skipped_iter:
            skipped += 1
            nan_iters += int(any(not torch.isfinite(v).all() for v in loss_dict.values()))
        else:
            advanced += 1
            for key, value in loss_dict.items():
                totals[key] = totals.get(key, torch.zeros(1, device="cuda")) + value
        track_moe_metrics(loss_scale=1 / num_microbatches, iteration=iteration, total_loss_dict=totals,
                          force_initialize=True, track_names=track_names, num_layers=cfg["model"]["num_layers"],
                          moe_layer_freq=config.moe_layer_freq, mtp_num_layers=mtp)
        if mtp:
            MTPLossLoggingHelper.track_mtp_metrics(1 / num_microbatches, iteration, None, None, totals)

        if iteration % cfg["log_interval"]:
            continue
        torch.distributed.barrier()
        torch.cuda.synchronize()
        now = time.time()
        per_iteration = (now - interval_start) / (advanced + skipped)
        interval_start = now
        line = iteration_line(
            timestamp=datetime.now(), iteration=iteration, train_iters=cfg["train_iters"],
            consumed_samples=iteration * cfg["gbs"], elapsed_time_per_iteration=per_iteration,
            throughput=flops / (per_iteration * 10**12 * world), learning_rate=_learning_rate(optimizer, lr),
            batch_size=cfg["gbs"], losses={k: v.item() / max(1, advanced) for k, v in totals.items()},
            loss_scale=optimizer.get_loss_scale().item(), grad_norm=grad_norm,
            skipped_iterations=skipped, nan_iterations=nan_iters,
        )
        if last_rank:
            print(line, flush=True)
        totals = {k: torch.zeros(1, device="cuda") for k in totals}
        advanced = skipped = nan_iters = 0
        if report_memory:
            if parallel_state.get_data_parallel_rank() == 0:
                print(memory_line(rank=dist.rank, iteration=iteration, allocated=torch.cuda.memory_allocated(),
                                  max_allocated=torch.cuda.max_memory_allocated(),
                                  reserved=torch.cuda.memory_reserved(),
                                  max_reserved=torch.cuda.max_memory_reserved()), flush=True)
                free, total = torch.cuda.mem_get_info()
                print(device_memory_line(rank=dist.rank, iteration=iteration, free=free, total=total,
                                         reserved=torch.cuda.memory_reserved()), flush=True)
            # As Megatron-LM: report again after the second iteration, which includes the optimizer state.
            report_memory = iteration <= 1
