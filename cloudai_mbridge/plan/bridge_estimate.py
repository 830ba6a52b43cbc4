"""Megatron-Bridge's own per-GPU training-memory estimate for a plan, ported to pure Python (no megatron, no torch).

Source: NVIDIA-NeMo/Megatron-Bridge tag ``v0.6.0`` (51885cf132b2814188b6855c25a8588254274c2a),
``src/megatron/bridge/training/utils/theoretical_memory_utils.py``. The file in the ``megatron_bridge`` 0.6.2 wheel on
PyPI is byte-identical to it (the git repository has no v0.6.1 / v0.6.2 tag), so the line numbers below are 0.6.2's:

- ``estimate_training_memory`` L123-L222 (the function ported here, with ``include_activation=True``);
- ``MemoryComponentEstimate`` / ``TrainingMemoryEstimate`` L35-L100 (what it returns: :class:`BridgeEstimate`);
- ``report_theoretical_memory`` L305-L353 (what Bridge prints: :meth:`BridgeEstimate.report_line`);
- ``_compute_activation_memory_bytes`` L356-L432, ``_count_parameters`` L435-L510, ``_get_layer_counts`` L513-L520,
  ``_get_moe_layer_pattern`` L523-L543, ``_embedding_parameters_on_most_loaded_shard`` L546-L554,
  ``_dense_parameters_on_most_loaded_shard`` L557-L586, ``_routed_expert_parameters_on_most_loaded_shard``
  L589-L612, ``_bytes_per_parameter`` L693-L696, ``_expert_optimizer_shard_size`` L699-L710,
  ``_ffn_projection_factor`` L762-L766, ``_ffn_activation_ratio`` L769-L791, ``_get_vocab_size`` L819-L836.

Bridge runs it once, on rank 0, at the first memory report (``training/utils/train_utils.py`` L1228-L1230:
``report_theoretical_memory(config, num_microbatches=get_num_microbatches(), verbose=True)``), after setup, so it
reads the configuration as Megatron-Core has finalized it. The operations below keep Bridge's order, so the numbers
are Bridge's to the last bit (tests/test_bridge_estimate.py checks them against a port that was run against the real
file on every DeepSeek-V3 configuration of Bridge 0.4.2's performance scripts).

What Bridge sees for one of our plans (the payload builds the provider from the catalog's Hugging Face config,
payload/hf_config.py ``architecture_config``, through Bridge's DeepSeek-V3 bridge):

- ``kv_channels``: **the model's qk_pos_emb_head_dim** (64 for DeepSeek-V3, Kimi-K2 and the proxies). Bridge's
  ``CONFIG_MAPPING`` maps the Hugging Face ``head_dim`` to ``kv_channels`` (``models/conversion/model_bridge.py``
  v0.6.0 L445, v0.4.2 L347). Our config.json writes no ``head_dim``; transformers' own ``DeepseekV3Config`` (read
  natively, no remote code) then sets ``head_dim = qk_rope_head_dim``. Without any ``head_dim`` Megatron would
  default to hidden / heads (56 for DeepSeek-V3; about 1.3-5 GiB less on NVIDIA's configurations). The estimator
  counts attention as GQA from ``kv_channels`` and ``num_query_groups``, not as MLA, so either value is a proxy.
- ``num_query_groups`` = heads (the config's ``num_key_value_heads``); ``moe_layer_freq`` = ``first_k_dense`` zeros
  then ones; SwiGLU (``gated_linear_unit`` with ``F.silu``: three projections); untied embeddings; no MoE latent.
- vocabulary: the model's, unpadded. ``setup.py`` ``_validate_and_set_vocab_size`` (v0.6.0 L676-L716) turns
  ``should_pad_vocab`` off whenever the model's vocabulary is at least the tokenizer's.
- ``mtp_num_layers``: ``plan.effective_mtp_layers`` (None = no MTP layer).
- ``virtual_pipeline_model_parallel_size``: ``plan.interleaved_vp`` when it is above 1, else None. The payload hands
  Megatron None for 1 (payload/train/config.py ``virtual_pipeline``), and an explicit layout with several stages per
  rank sets it (megatron-core 0.16.1 ``transformer_config.py`` L1339-L1352). Bridge does not look at the layout
  itself: it spreads the layers evenly over PP. ``num_layers_in_first/last_pipeline_stage`` are never set by our
  plans (Megatron-Core refuses them next to a layout), so Bridge's uneven-stage branch (L557-L690 with those fields)
  is not ported.
- ``data_parallel_size`` = ``plan.dp``; ``num_microbatches`` = ``plan.num_microbatches``; ``micro_batch_size``,
  ``seq_length`` and the parallel sizes as planned.
- ``use_distributed_optimizer``: ``ConfigContainer`` ORs the ddp and optimizer flags (``training/config.py``
  v0.6.0 L1945-L1966), and the recipes' Adam (``recipes/utils/optimizer_utils.py``
  ``distributed_fused_adam_with_cosine_annealing``, L150) sets the optimizer's to True, so it is on for Adam
  whatever ``plan.use_distributed_optimizer`` says; Muon follows the plan; Megatron FSDP turns it on (L1065-L1118).

What the estimator leaves out, by its own account (``_estimate_assumptions`` L713-L738): precision (FP8 / bf16
moments: always 6 B per parameter plus 12 B sharded over the optimizer group), recompute modules, full recompute,
CPU offload, CUDA graphs, dispatcher buffers, layouts and the allocator. Its activation term is the whole-model
Korthikanti formula (sequence parallelism plus selective recompute) times the interleaving penalty. So it is a
reference number to set beside plan/memory.py's estimate, not a peak to plan against.

Releases: this is 0.6.2's estimate whatever ``plan.bridge_version`` says. 0.5.1 has the same function without the
uneven-stage branch; 0.4.x (NGC nemo 26.04) prints an older formula (``compute_weight_and_optimizer_memory``, 0.4.2
L29-L116) that multiplies the dense FFN by the expert count on every layer (about 6e12 parameters for DeepSeek-V3),
which is meaningless for these models.

:func:`bridge_estimate` returns None where Bridge would never get as far as its report for the plan: the mcore
engine (``plan.transformer_impl == "local"``, no Bridge in the loop), a model outside the DeepSeek-V3 family Bridge's
DeepSeek-V3 bridge maps, a world size that tp·pp·cp does not divide or a global batch that mbs·dp does not divide
(``set_data_parallel_size`` and the micro-batch calculator assert), and a pipeline layout Megatron-Core rejects.
"""

from __future__ import annotations

from dataclasses import dataclass

from .training import TrainingPlan

NUM_BYTES_IN_MEGABYTE = 1024 * 1024  # L31; Bridge's "MB" is MiB


@dataclass(frozen=True)
class BridgeEstimate:
    """``estimate_training_memory``'s result for the most-loaded GPU, in bytes (floats, as Bridge computes them).

    ``dense_and_embedding`` and ``routed_experts`` are its two model-state components ("dense parameters and
    optimizer", "routed expert parameters and optimizer"; the second is 0 for a model without routed experts, where
    Bridge leaves it out). ``activation_reported`` is whether ``report_theoretical_memory`` prints the activation
    term: only with sequence parallelism (TP > 1) and selective recompute; otherwise it prints weights and optimizer
    alone, and ``total`` here still includes the activations.
    """

    dense_and_embedding: float
    routed_experts: float
    weights_and_optimizer: float
    activations: float
    total: float
    total_parameters: float
    dense_parameters: float
    dense_parameters_per_gpu: float
    dense_bytes_per_parameter: float
    routed_expert_parameters: float
    routed_expert_parameters_per_gpu: float
    routed_bytes_per_parameter: float
    kv_channels: int
    activation_reported: bool

    def report_line(self) -> str:
        """The line ``report_theoretical_memory`` prints (L339-L352), without its trailing newline."""
        weights = self.weights_and_optimizer / NUM_BYTES_IN_MEGABYTE
        if not self.activation_reported:
            return f"Theoretical memory footprints: weight and optimizer={weights:.2f} MB"
        activation = self.activations / NUM_BYTES_IN_MEGABYTE
        return (f"Theoretical memory footprints: weight and optimizer={weights:.2f} MB, "
                f"activation={activation:.2f} MB, total={weights + activation:.2f} MB")


@dataclass(frozen=True)
class _Config:
    """The fields of Bridge's ``ConfigContainer`` the estimator reads, as Bridge would hold them for the plan."""

    hidden_size: int
    num_layers: int
    ffn_hidden_size: int
    num_attention_heads: int
    kv_channels: int
    num_query_groups: int
    num_moe_experts: int
    moe_layer_pattern: tuple[bool, ...]  # num_layers entries plus one per MTP layer (L523-L543)
    moe_ffn_hidden_size: int
    moe_shared_expert_intermediate_size: int
    moe_router_topk: int
    vocab_size: int
    tp: int
    pp: int
    vp: int | None
    cp: int
    ep: int
    etp: int
    seq_length: int
    micro_batch_size: int
    data_parallel_size: int
    use_distributed_optimizer: bool


def _config(plan: TrainingPlan) -> _Config | None:
    m = plan.model
    if plan.transformer_impl == "local" or m.family != "deepseek_v3":
        return None
    if plan.dp == 0 or plan.num_microbatches == 0 or plan.pipeline.problems:
        return None
    freq = [0] * m.first_k_dense + [1] * (m.num_layers - m.first_k_dense)
    pattern = tuple(bool(x) for x in freq) if m.num_experts > 0 else (False,) * m.num_layers
    mtp = plan.effective_mtp_layers or 0
    if mtp > 0:
        pattern += (pattern[-1],) * mtp
    vp = plan.interleaved_vp
    return _Config(
        hidden_size=m.hidden_size,
        num_layers=m.num_layers,
        ffn_hidden_size=m.ffn_hidden_size,
        num_attention_heads=m.num_attention_heads,
        kv_channels=m.qk_pos_emb_head_dim,
        num_query_groups=m.num_attention_heads,
        num_moe_experts=m.num_experts,
        moe_layer_pattern=pattern,
        moe_ffn_hidden_size=m.moe_ffn_hidden_size,
        moe_shared_expert_intermediate_size=m.shared_expert_intermediate_size,
        moe_router_topk=m.moe_router_topk,
        vocab_size=m.vocab_size,
        tp=plan.tp,
        pp=plan.pp,
        vp=vp if vp > 1 else None,
        cp=plan.cp,
        ep=plan.ep,
        etp=plan.etp,
        seq_length=plan.seq_length,
        micro_batch_size=plan.mbs,
        data_parallel_size=plan.dp,
        use_distributed_optimizer=plan.use_distributed_optimizer or plan.use_megatron_fsdp or plan.optimizer == "adam",
    )


def _bytes_per_parameter(c: _Config, optimizer_shard_size: int) -> float:
    """L693-L696."""
    if not c.use_distributed_optimizer:
        return 18.0
    return 6.0 + (12.0 / max(1, optimizer_shard_size))


def _activation_bytes(c: _Config, num_microbatches: int) -> float:
    """_compute_activation_memory_bytes L356-L432 with _ffn_activation_ratio L769-L791 (first pipeline stage)."""
    pattern = c.moe_layer_pattern
    moe_layers = sum(pattern)
    total_layers = len(pattern)
    dense_layers = total_layers - moe_layers
    ratio = 0.0
    if total_layers:
        dense_ffn = dense_layers * c.ffn_hidden_size
        moe_ffn = 0.0
        if c.num_moe_experts > 0 and moe_layers > 0:
            moe_ffn = moe_layers * ((c.moe_ffn_hidden_size * c.moe_router_topk) + c.moe_shared_expert_intermediate_size)
        ratio = (dense_ffn + moe_ffn) / (total_layers * c.hidden_size)

    s, b, h, pp = c.seq_length, c.micro_batch_size, c.hidden_size, c.pp
    activation = s * b * h * (18 + (4 * ratio))
    activation *= total_layers
    activation += 8 * s * b * pp  # input to the embedding, pp micro-batches in flight
    activation += s * b * h * pp  # embedding dropout
    if c.vp is not None:
        activation *= 1 + ((pp - 1) / (pp * c.vp))
    if c.vp is None and pp > 1:
        activation *= min(1, num_microbatches / pp)
    if pp == 1:
        activation += s * b * h * 4 * (1 + (c.vocab_size / h))  # output layer and cross-entropy inputs
    return activation / (c.tp * c.cp)


def _estimate(c: _Config, num_microbatches: int, activation_reported: bool) -> BridgeEstimate:
    """estimate_training_memory L123-L222 with _count_parameters L435-L510 (even pipeline stages)."""
    h = c.hidden_size
    ffn_projection_factor = 3.0  # SwiGLU (L762-L766): every catalog model is gated SiLU
    query_projection_to_hidden_size_ratio = (c.kv_channels * c.num_attention_heads) / h
    attention = 2 * h * h * ((1 + (c.num_query_groups / c.num_attention_heads)) * query_projection_to_hidden_size_ratio)
    layernorm = 4 * h
    final_layernorm = 2 * h
    dense_mlp = ffn_projection_factor * h * c.ffn_hidden_size
    shared_expert = ffn_projection_factor * h * c.moe_shared_expert_intermediate_size
    routed_per_layer = 0.0
    if c.num_moe_experts > 0 and any(c.moe_layer_pattern):
        routed_per_layer = ffn_projection_factor * h * c.moe_ffn_hidden_size * c.num_moe_experts
    dense_by_layer = tuple(
        attention + layernorm + (shared_expert if moe else dense_mlp) for moe in c.moe_layer_pattern
    )
    routed_by_layer = tuple(routed_per_layer if moe else 0.0 for moe in c.moe_layer_pattern)
    dense_transformer = sum(dense_by_layer) + final_layernorm
    routed_experts = sum(routed_by_layer)
    embedding_size = h * c.vocab_size
    embeddings = embedding_size + embedding_size  # untied input embedding and output layer
    total_parameters = dense_transformer + routed_experts + embeddings

    # _embedding_parameters_on_most_loaded_shard L546-L554, _dense_parameters_on_most_loaded_shard L565-L568
    embedding_per_gpu = embedding_size / c.tp
    if c.pp == 1:
        embedding_per_gpu += embedding_size / c.tp
    dense_per_gpu = dense_transformer / (c.pp * c.tp) + embedding_per_gpu
    dense_bpp = _bytes_per_parameter(c, c.data_parallel_size * c.cp)
    dense_bytes = dense_per_gpu * dense_bpp

    routed_per_gpu = routed_bpp = routed_bytes = 0.0
    if routed_experts > 0:
        # _routed_expert_parameters_on_most_loaded_shard L598-L601, _expert_optimizer_shard_size L699-L710
        routed_per_gpu = routed_experts / (c.pp * c.ep * c.etp)
        shard = c.data_parallel_size * c.tp * c.cp
        shard //= max(1, c.ep * c.etp)
        routed_bpp = _bytes_per_parameter(c, max(1, shard))
        routed_bytes = routed_per_gpu * routed_bpp

    activations = _activation_bytes(c, num_microbatches)
    weights_and_optimizer = dense_bytes + routed_bytes  # TrainingMemoryEstimate.weight_and_optimizer_bytes
    return BridgeEstimate(
        dense_and_embedding=dense_bytes,
        routed_experts=routed_bytes,
        weights_and_optimizer=weights_and_optimizer,
        activations=activations,
        total=weights_and_optimizer + activations,
        total_parameters=total_parameters,
        dense_parameters=dense_transformer + embeddings,
        dense_parameters_per_gpu=dense_per_gpu,
        dense_bytes_per_parameter=dense_bpp,
        routed_expert_parameters=routed_experts,
        routed_expert_parameters_per_gpu=routed_per_gpu,
        routed_bytes_per_parameter=routed_bpp,
        kv_channels=c.kv_channels,
        activation_reported=activation_reported,
    )


def bridge_estimate(plan: TrainingPlan) -> BridgeEstimate | None:
    """What Megatron-Bridge 0.6.2's ``estimate_training_memory`` gives for this plan's busiest GPU; None where
    Bridge would not reach its report (see the module docstring)."""
    config = _config(plan)
    if config is None:
        return None
    # report_theoretical_memory L329: sequence parallelism (the payload turns it off at TP 1) and selective recompute
    reported = plan.sequence_parallel and plan.tp > 1 and plan.recompute == "selective"
    return _estimate(config, plan.num_microbatches, reported)


# Which estimate to trust, measured: both estimates for the bridge-engine runs recorded on GPUs (DeepSeek-V3 and
# Kimi-K2 proxies, 1 GPU, bf16 and FP8, Megatron-Bridge 0.4.2 and 0.6.2, TE 2.20.2, H100 and H200;
# benchmarks/results/bridge/bridge_train_memory.json and bridge_0.6.2_train_memory.json), each against the device
# peak (nvidia-smi: what decides an out-of-memory) and against torch's max allocated. `python3
# benchmarks/gpu_memory.py --offline <json>` prints the same; tests/test_bridge_estimate.py recomputes these ranges
# from the records and fails when they no longer hold.
MEASURED_ERRORS = {
    "runs": 10,
    "ours_vs_device_peak_pct": (-7.5, 3.1),
    "bridge_vs_device_peak_pct": (-22.3, -10.5),
    "bridge_vs_max_allocated_pct": (16.9, 24.5),
    "source": "benchmarks/results/bridge/bridge_train_memory.json, bridge_0.6.2_train_memory.json",
}


def trust_note() -> str:
    """One line for preflight: which memory estimate to trust and why, with the measured error of each."""
    m = MEASURED_ERRORS
    o, b, a = m["ours_vs_device_peak_pct"], m["bridge_vs_device_peak_pct"], m["bridge_vs_max_allocated_pct"]
    return (f"memory: trust mem/GPU (the plugin's estimate of the device peak): on {m['runs']} Megatron-Bridge runs "
            f"measured on GPUs (DeepSeek-V3 / Kimi-K2 proxies, 1 GPU) it was {o[0]:+.1f} .. {o[1]:+.1f} % of the "
            f"device peak; Megatron-Bridge's own estimate (Bridge est., what Bridge prints at step 0) was "
            f"{b[0]:+.1f} .. {b[1]:+.1f} % of it, i.e. under: it ignores precision, recompute modules, the "
            f"dispatcher's buffers and the runtime (CUDA context, NCCL) ({a[0]:+.1f} .. {a[1]:+.1f} % of torch's max "
            f"allocated). Source: {m['source']}")


__all__ = ["MEASURED_ERRORS", "BridgeEstimate", "bridge_estimate", "trust_note"]
