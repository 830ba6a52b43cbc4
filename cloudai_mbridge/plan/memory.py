"""Per-GPU memory estimate of one training sweep point: what the busiest pipeline rank holds at its peak.

The estimate is a sum of six terms, each derived below from the model's architecture (``ModelSpec``) and the plan's
parallel layout. Sizes are bytes; ``s`` = seq_length, ``b`` = mbs, ``h`` = hidden, ``t`` = tp, ``c`` = cp,
``e`` = ep, ``et`` = etp, ``k`` = top-k, ``E`` = experts, ``f`` = moe_ffn, ``fs`` = shared-expert ffn, ``F`` = dense
ffn, ``V`` = vocab padded to a multiple of 128·t (Megatron's ``make_vocab_size_divisible_by``), ``a`` = heads and
the MLA dims ``ql`` (q_lora_rank), ``kl`` (kv_lora_rank), ``dq`` (qk_head_dim), ``dr`` (qk_pos_emb_head_dim),
``dv`` (v_head_dim).

1. Parameters per layer (counted per rank, split into *dense* params, sharded by the distributed optimizer over
   DP·CP, and *expert* params, sharded over expert-DP = world / (et·e·pp)):

   - MLA attention (megatron/core/transformer/multi_latent_attention.py, core_v0.16.1 L393-L510): the down
     projections are ``duplicated`` over TP, the up projections and the output projection are TP-split::

         replicated  h·ql + ql + h·(kl + dr) + kl + h              (q_down, q_norm, kv_down, kv_norm, input norm)
         TP-split    (ql·a·(dq + dr) + kl·a·(dq + dv) + a·dv·h) / t  (q_up, kv_up, linear_proj)

     (without ``q_lora_rank``: ``h·a·(dq + dr) / t`` for linear_q_proj instead of q_down/q_up).
   - dense MLP (the first ``first_k_dense`` layers): ``3·h·F / t + h`` (SwiGLU fc1 is 2·h·F, fc2 F·h).
   - MoE MLP: router ``E·h + E`` (replicated, expert bias), shared expert ``3·h·fs / t``, pre-MLP norm ``h``, and
     the routed experts ``(E / e)·3·h·f / et`` -- the only *expert* parameters. MoE Echo adds
     ``num_echo_experts / e`` expert slots per rank, counted like home experts (an upper bound for their state).
   - embedding ``V·h / t`` on the stage with ``E``; output layer ``V·h / t`` + final norm ``h`` on the stage with
     ``L`` (Kimi-K2 / DSV3 do not tie them).
   - MTP layer (DSV3): ``2h`` norms + ``eh_proj 2h·h / t`` + one MoE transformer layer + final norm, and a copy of
     the embedding when the MTP stage is not the first stage (GPTModel builds the embedding where ``mtp_process``).

   Which layers a rank holds comes from the resolved pipeline layout (explicit / recipe table / even split,
   ``plan/layout.py``); the estimate is taken on every pipeline rank and the worst one is reported.

2. Weights: bf16, ``2`` bytes per parameter (FP8 recipes keep bf16 master weights in the param buffer). Megatron
   FSDP shards them (dense over DP·CP, experts over expert-DP) and keeps two layers gathered.

3. Gradients: the DDP grad buffer, full size on every rank: ``2`` bytes per parameter, ``4`` with
   ``grad_reduce_in_fp32`` (Kimi's own recipe; the DSV3 recipe the seed ran uses bf16). Sharded like the weights
   under Megatron FSDP.

4. Optimizer state: Adam keeps an fp32 master copy and two fp32 moments, ``12`` bytes per parameter
   (megatron/core/optimizer/distrib_optimizer.py); Muon (``dist_muon``, megatron/core/optimizer/muon.py) keeps an
   fp32 master copy and one momentum buffer, ``8`` bytes, for every matrix except embedding / output, which stay on
   Adam. The distributed optimizer (and Muon's layer-wise distribution) divides dense state by DP·CP and expert
   state by expert-DP; ``num_distributed_optimizer_instances`` replicates the shard that many times. Without a
   distributed optimizer every rank holds all of it.

5. Activations, bf16, saved for backward per layer and micro-batch, with sequence parallelism (``T = s·b / c``
   tokens, ``T / t`` per rank in the sequence-parallel regions) and fused/flash attention (no s² term):

   - attention: ``2·(T/t)·(2h + 2ql + (kl + dr) + 2kl)`` for the norm inputs, the down-projection inputs and
     outputs, plus ``2·T·(a/t)·(2(dq + dr) + (dq + dv) + dv)`` for q, k, the kv up-projection (alive through v) and
     the attention output; ``4·T·(a/t)`` for the softmax statistics.
   - MoE: ``2·(T/t)·2h`` (norm input, router/shared-expert input), ``8·(T/t)·E`` (fp32 router logits and scores),
     ``2·T·3fs/t`` (shared-expert fc1 and activation outputs) and, per routed token copy (``(T/t)·k`` of them
     with balanced routing), ``2·(2h + 3f)`` (expert input, fc1 output, activation output, expert output kept
     for the probability-weighted combine).
   - dense MLP: ``2·(T/t)·2h + 2·T·3F/t``.
   - loss stage: the logits, ``T·V/t`` in bf16 plus the fp32 softmax the vocab-parallel cross entropy keeps:
     ``6·T·V/t``; the MTP layer adds its own MoE layer, the eh_proj input ``2·(T/t)·2h`` and another set of
     logits.
   - recompute: ``full`` keeps only each layer's input ``2·(T/t)·h`` and rebuilds one layer at a time;
     ``selective`` drops what its modules recompute (core_attn: attention output; mla_up_proj: q, k, kv;
     moe_act: the expert activation output; mlp: the dense MLP; moe: the whole MoE block; shared_experts: the
     shared expert; layernorm: the norm outputs).
   - in flight: the 1F1B schedule keeps ``min(pp - r, M)`` micro-batches on rank ``r``; the interleaved schedule
     (megatron/core/pipeline_parallel/schedules.py get_pp_rank_microbatches L738-L796, get_schedule_table
     L798-L826) keeps ``2(pp - r - 1) + (vp - 1)·pp + 1`` model chunks (+1 with a2a overlap), in schedule-table
     order, so rank 0 of PP8/VP2 holds 15 forward passes of its first chunk and 8 of its second. The activations of
     each in-flight chunk are summed layer by layer; one more layer is added as backward working space.

6. Dispatcher buffers and runtime:

   - all-to-all: the send and receive token buffers of one layer, ``2·2·(T/t)·k·h``.
   - DeepEP (NVIDIA or UCCL's drop-in, megatron/core/transformer/moe/fused_a2a.py get_buffer L33-L66): a fixed
     NVLink buffer of ``channels · min(G, 8) · 256 · 2h`` and an RDMA buffer of ``channels · ceil(G / 8) · 128 ·
     2h · 2`` (DeepEP's default chunked-token configs; ``channels`` = 12, G = et·e), plus the dispatched tokens.
   - HybridEP: dispatch and combine buffers sized for every rank of the NVLink domain, ``2·(T/t)·R·2h`` with R
     ranks per domain, and the same per remote domain for the RDMA staging, plus the dispatched tokens.
   - runtime: CUDA context, NCCL communicators, cuBLAS/TE workspaces and allocator fragmentation
     (``CALIBRATION``).

Calibration: the constants in ``CALIBRATION`` are engineering guesses, not fits. The per-token activation terms are
derived from the saved tensors of Megatron-Core 0.16.1's MLA/MoE layers with Transformer Engine and may be off by
the tensors TE keeps that we do not see (FP8 casts, fused-kernel workspaces); the DeepEP/UCCL/HybridEP sizes follow
their default configs. The GPU issue holds this estimate against measured ``torch.cuda.max_memory_reserved`` peaks
(target: within 15 %); fit ``runtime_gib`` and ``activation_factor`` there, not the derivation.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

from .layout import DECODER, EMBEDDING, LOSS, MTP, PipelineLayout, recipe_mtp_layers
from .training import TrainingPlan

GIB = 1024**3

CALIBRATION = {
    # CUDA context (~0.6 GiB), NCCL communicators of ~8 process groups, cuBLAS / TE workspaces, allocator slack.
    "runtime_gib": 4.0,
    # Multiplier on the derived activations for tensors the derivation misses (TE casts, kernel workspaces).
    "activation_factor": 1.0,
    # DeepEP default channels (Buffer.num_sms = 24 SMs, two per channel).
    "deepep_channels": 12,
}


@dataclass(frozen=True)
class MemoryEstimate:
    """Per-GPU bytes on the worst pipeline rank, by term; ``capacity`` is the GPU's usable memory."""

    weights: int
    gradients: int
    optimizer: int
    activations: int
    dispatcher: int
    runtime: int
    capacity: int
    pp_rank: int
    in_flight: int  # model chunks (micro-batch x virtual stage) whose activations the rank holds at its peak

    @property
    def total(self) -> int:
        return self.weights + self.gradients + self.optimizer + self.activations + self.dispatcher + self.runtime

    @property
    def fits(self) -> bool:
        return self.total <= self.capacity

    def terms(self) -> dict[str, int]:
        return {"weights": self.weights, "gradients": self.gradients, "optimizer": self.optimizer,
                "activations": self.activations, "dispatcher": self.dispatcher, "runtime": self.runtime}

    def summary(self) -> str:
        parts = ", ".join(f"{k} {v / GIB:.1f}" for k, v in self.terms().items())
        return (f"{self.total / GIB:.1f} of {self.capacity / GIB:.1f} GiB on pp rank {self.pp_rank} "
                f"({parts}; {self.in_flight} chunks in flight)")


@dataclass(frozen=True)
class _Params:
    dense: int
    expert: int
    embedding: int  # embedding + output-layer params (Adam even under Muon)


def _padded_vocab(vocab: int, tp: int) -> int:
    step = 128 * tp
    return math.ceil(vocab / step) * step


def _attention_params(p: TrainingPlan) -> int:
    m, t = p.model, p.tp
    h, a = m.hidden_size, m.num_attention_heads
    kv = h * (m.kv_lora_rank + m.qk_pos_emb_head_dim) + m.kv_lora_rank + h
    split = m.kv_lora_rank * a * (m.qk_head_dim + m.v_head_dim) + a * m.v_head_dim * h
    if m.q_lora_rank:
        kv += h * m.q_lora_rank + m.q_lora_rank
        split += m.q_lora_rank * a * (m.qk_head_dim + m.qk_pos_emb_head_dim)
    else:
        split += h * a * (m.qk_head_dim + m.qk_pos_emb_head_dim)
    return kv + split // t


def _moe_params(p: TrainingPlan) -> tuple[int, int]:
    """(dense, expert) params of one MoE MLP on one rank."""
    m = p.model
    h = m.hidden_size
    dense = h + m.num_experts * h + m.num_experts + 3 * h * m.shared_expert_intermediate_size // p.tp
    experts_here = m.num_experts // p.ep + (p.echo.num_echo_experts // p.ep if p.echo else 0)
    return dense, experts_here * 3 * h * m.moe_ffn_hidden_size // p.etp


@lru_cache(maxsize=1024)
def _stage_counts(layout: PipelineLayout, first_k_dense: int) -> tuple[tuple[tuple[int, int, int, int, int], ...], ...]:
    """``[rank][virtual stage]`` = (dense decoders, MoE decoders, embeddings, losses, MTP layers) held there."""
    counts = [[[0] * 5 for _ in range(layout.vp)] for _ in range(layout.pp)]
    index = 0
    for v in range(layout.vp):
        for r in range(layout.pp):
            c = counts[r][v]
            for name in layout.by_rank[r][v]:
                if name == DECODER:
                    c[0 if index < first_k_dense else 1] += 1
                    index += 1
                else:
                    c[{EMBEDDING: 2, LOSS: 3, MTP: 4}[name]] += 1
    return tuple(tuple(tuple(c) for c in row) for row in counts)


def _rank_params(p: TrainingPlan, stages: tuple[tuple[int, int, int, int, int], ...]) -> _Params:
    m = p.model
    h = m.hidden_size
    attn = _attention_params(p)
    moe_dense, moe_expert = _moe_params(p)
    vocab = _padded_vocab(m.vocab_size, p.tp) * h // p.tp
    n_dense, n_moe, n_emb, n_loss, n_mtp = (sum(c[i] for c in stages) for i in range(5))
    dense = n_dense * (attn + 3 * h * m.ffn_hidden_size // p.tp + h) + n_moe * (attn + moe_dense) + n_loss * h
    dense += n_mtp * (2 * h + 2 * h * h // p.tp + attn + moe_dense + h)
    embedding = (n_emb + n_loss + (1 if n_mtp and not n_emb else 0)) * vocab
    return _Params(dense, (n_moe + n_mtp) * moe_expert, embedding)


@dataclass(frozen=True)
class _Activations:
    """Bytes one micro-batch leaves saved for backward, per layer kind, on one rank."""

    dense: float
    moe: float
    embedding: float
    loss: float
    mtp: float


def _activations(p: TrainingPlan, recompute: str) -> _Activations:
    m = p.model
    h, t, k = m.hidden_size, p.tp, m.moe_router_topk
    tokens = p.seq_length * p.mbs / p.cp
    local = tokens / t  # sequence-parallel shard
    heads = m.num_attention_heads / t
    dq, dr, dv = m.qk_head_dim, m.qk_pos_emb_head_dim, m.v_head_dim
    ql, kl = m.q_lora_rank or 0, m.kv_lora_rank
    mods = set(p.recompute_modules) if recompute == "selective" else set()
    if recompute == "selective" and not mods:
        mods = {"core_attn"}  # transformer_config.py L1200: Megatron's default recompute_modules

    norm_out = 0 if "layernorm" in mods else 2 * local * h
    attn = 2 * local * h + norm_out + 2 * local * (2 * ql + (kl + dr) + 2 * kl)
    if "mla_up_proj" not in mods:
        attn += 2 * tokens * heads * (2 * (dq + dr) + (dq + dv))
    if "core_attn" not in mods:
        attn += 2 * tokens * heads * dv + 4 * tokens * heads
    else:
        attn += 2 * tokens * heads * dv  # the recomputed block's output is still linear_proj's input

    moe = 2 * local * h + norm_out + 8 * local * m.num_experts
    if "shared_experts" not in mods:
        moe += 2 * tokens * 3 * m.shared_expert_intermediate_size / t
    f = m.moe_ffn_hidden_size
    per_copy = 2 * (2 * h + (2 * f if "moe_act" in mods else 3 * f))
    moe += local * k * per_copy
    if "moe" in mods:
        moe = 2 * local * h
    dense_mlp = 2 * local * h + norm_out
    if "mlp" not in mods:
        dense_mlp += 2 * tokens * 3 * m.ffn_hidden_size / t

    vocab = _padded_vocab(m.vocab_size, t) / t
    logits = 6 * tokens * vocab
    layer_input = 2 * local * h
    scale = CALIBRATION["activation_factor"]
    if recompute == "full":
        return _Activations(layer_input * scale, layer_input * scale, layer_input, logits, layer_input + logits)
    return _Activations((attn + dense_mlp) * scale, (attn + moe) * scale, layer_input, logits,
                        (attn + moe + 2 * local * 2 * h) * scale + logits)


def _chunk_bytes(c: tuple[int, int, int, int, int], act: _Activations) -> float:
    return c[0] * act.dense + c[1] * act.moe + c[2] * act.embedding + c[3] * act.loss + c[4] * act.mtp


@lru_cache(maxsize=4096)
def in_flight_chunks(pp: int, rank: int, vp: int, num_microbatches: int, overlap: bool) -> tuple[int, ...]:
    """How many forward passes of each of the rank's model chunks are alive at the schedule's peak."""
    m = max(num_microbatches, 1)
    if pp == 1:
        return (1,) + (0,) * (vp - 1)
    if vp == 1:
        return (min(pp - rank, m),)
    warmup = 2 * (pp - rank - 1) + (vp - 1) * pp + (1 if overlap else 0)
    alive = min(warmup + 1, m * vp)
    counts = [0] * vp
    for group in range(0, m, pp):  # get_schedule_table with microbatch_group_size_per_vp_stage = pp
        size = min(pp, m - group)
        for chunk in range(vp):
            take = min(size, alive)
            counts[chunk] += take
            alive -= take
            if alive == 0:
                return tuple(counts)
    return tuple(counts)


def _dispatcher_bytes(p: TrainingPlan) -> int:
    h = p.model.hidden_size
    local = p.seq_length * p.mbs / p.cp / p.tp
    copies = local * p.model.moe_router_topk
    a2a = 2 * 2 * copies * h
    group = p.etp * p.ep
    if p.dispatcher == "deepep":
        ch = CALIBRATION["deepep_channels"]
        nvl = ch * min(group, 8) * 256 * 2 * h
        rdma = ch * math.ceil(group / 8) * 128 * 2 * h * 2 if group > 8 else 0
        return int(nvl + rdma + a2a / 2)
    if p.dispatcher == "hybridep":
        per_domain = max(1, min(group, p.gpu.nvlink_domain, p.world_size))
        domains = max(1, math.ceil(group / per_domain))
        return int(2 * local * per_domain * 2 * h + (2 * local * domains * 2 * h if domains > 1 else 0) + a2a / 2)
    return int(a2a)


def _optimizer_bytes(p: TrainingPlan, params: _Params, dp_shards: int, ep_shards: int) -> float:
    per_matrix = 8 if p.optimizer == "muon" else 12
    return (params.embedding * 12 + params.dense * per_matrix) / dp_shards + params.expert * per_matrix / ep_shards


def estimate_memory(plan: TrainingPlan) -> MemoryEstimate:
    """The per-GPU memory of ``plan`` on its busiest pipeline rank (see the module docstring for every term).

    Needs a plan whose pipeline layout resolves (the layout rules report the others); a plan whose layout does not
    resolve is estimated with Megatron's even split rounded down, which is good enough to rank sweep points.
    """
    p = plan
    layout = p.pipeline.layout
    vp = p.interleaved_vp
    if layout is None:  # one stage, or a layout the layout rules reject: split evenly
        per = max(1, p.model.num_layers // (p.pp * vp))
        stages = [[DECODER] * per for _ in range(p.pp * vp)]
        stages[0].insert(0, EMBEDDING)
        stages[-1].extend([MTP] * recipe_mtp_layers(p.effective_mtp_layers) + [LOSS])
        layout = PipelineLayout.from_stages(stages, p.pp)
    act = _activations(p, p.recompute)
    dp_cp = max(p.dp, 1) * p.cp
    edp = max(p.expert_dp, 1)
    ndo = max(p.num_distributed_optimizer_instances, 1)
    if p.use_distributed_optimizer or p.use_megatron_fsdp:
        dp_shards, ep_shards = max(1, dp_cp // ndo), max(1, edp // ndo)
    else:
        dp_shards = ep_shards = 1
    grad_bytes = 4 if p.grad_reduce_in_fp32 else 2
    dispatcher = _dispatcher_bytes(p)
    runtime = int(CALIBRATION["runtime_gib"] * GIB)
    rebuilt = _activations(p, "none") if p.recompute == "full" else act
    counts_by_rank = _stage_counts(layout, p.model.first_k_dense)
    best: MemoryEstimate | None = None
    for rank in range(p.pp):
        stages = counts_by_rank[rank]
        params = _rank_params(p, stages)
        n_dense = params.dense + params.embedding
        if p.use_megatron_fsdp:
            gathered = 2 * _largest_layer_params(p)
            weights = 2 * (n_dense / dp_cp + params.expert / edp + gathered)
            grads = grad_bytes * (n_dense / dp_cp + params.expert / edp)
        else:
            weights = 2 * (n_dense + params.expert)
            grads = grad_bytes * (n_dense + params.expert)
        optimizer = _optimizer_bytes(p, params, dp_shards, ep_shards)
        in_flight = in_flight_chunks(p.pp, rank, layout.vp, p.num_microbatches, p.moe_a2a_overlap)
        activations = sum(n * _chunk_bytes(c, act) for n, c in zip(in_flight, stages, strict=True))
        if p.cpu_offloading:
            activations -= min(p.cpu_offloading_num_layers, sum(c[0] + c[1] for c in stages)) * act.moe
        # backward working space: one layer rebuilt or being differentiated
        activations += max(rebuilt.moe, rebuilt.dense)
        est = MemoryEstimate(
            weights=int(weights), gradients=int(grads), optimizer=int(optimizer), activations=int(activations),
            dispatcher=dispatcher, runtime=runtime, capacity=int(p.gpu.memory_gib * GIB), pp_rank=rank,
            in_flight=sum(in_flight),
        )
        if best is None or est.total > best.total:
            best = est
    assert best is not None
    return best


def _largest_layer_params(p: TrainingPlan) -> int:
    moe_dense, moe_expert = _moe_params(p)
    return _attention_params(p) + max(moe_dense + moe_expert, 3 * p.model.hidden_size * p.model.ffn_hidden_size)
