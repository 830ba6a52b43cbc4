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
   - standard attention instead (``transformer_impl`` "local", the payload's mcore engine: megatron-core 0.16/0.17's
     local ``DotProductAttention`` takes no separate k/v head sizes, so payload/train_mcore.py builds multi-head
     attention with ``kv_channels = dv`` and ``num_query_groups = a``, and says so in its ``MBRIDGE_ATTENTION``
     line): ``linear_qkv`` ``h·3a·dv / t`` + ``linear_proj`` ``a·dv·h / t`` + input norm ``h`` (no biases, no
     q/k norms; attention.py SelfAttention ``linear_qkv_out_dim = query_projection_size + 2·kv_projection_size``).
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

4. Optimizer state: Adam keeps an fp32 master copy and two fp32 moments, ``12`` bytes per parameter (``8`` with the
   Megatron-Bridge recipes' precision-aware optimizer, ``plan.precision_aware_optimizer``: bf16 moments; measured by
   owner and dtype on the bridge engine, benchmarks/results/bridge/README.md; its step transient, the fp32 gradient
   of the shard kept until the next ``zero_grad``, measured 4.4 B per parameter, is counted as ``4``)
   (megatron/core/optimizer/distrib_optimizer.py); Muon (``dist_muon``, megatron/core/optimizer/muon.py) keeps an
   fp32 master copy and one momentum buffer, ``8`` bytes, for every matrix except embedding / output, which stay on
   Adam. The distributed optimizer (and Muon's layer-wise distribution) divides dense state by DP·CP and expert
   state by expert-DP; ``num_distributed_optimizer_instances`` replicates the shard that many times. Without a
   distributed optimizer every rank holds all of it. With the optimizer's CPU offload (``optimizer_cpu_offload``)
   only the share ``1 - optimizer_offload_fraction`` stays on the GPU, at ``12`` bytes (fp32 copy and moments), and
   the step's fp32 gradients with it (``_optimizer_bytes``; modeled from the code, not measured).

   Optimizer step (``step``, transient): at the step the mixed-precision optimizer copies the bf16 gradient of its
   shard into fp32 ``.grad`` tensors of the main params, ``4`` bytes per parameter of the shard
   (megatron/core/optimizer/distrib_optimizer.py ``_copy_model_grads_to_main_grads``:
   ``shard_main_param.grad = shard_model_grad.float()``, L2419 in megatron-core 0.16.1, L2476 in 0.17.1; the
   non-distributed Float16OptimizerWithFloat16Params, also under Muon's layer-wise optimizer, does
   ``main_param.grad = model_param.main_grad.float()``, optimizer.py L759 in 0.16.1, over all of its params; Megatron
   FSDP returns before the copy). They live until the next ``optimizer.zero_grad()`` (``set_to_none=True``), which
   the training step calls *before* its forward passes (payload/train_mcore.py ``_train``, as Megatron-LM and
   Megatron-Bridge ``train_step`` do), so they never meet the activations: they are in the ``allocated`` after a
   step, not in the forward/backward peak. Without TE and apex (the local engine) Megatron falls back to
   ``torch.optim.AdamW`` (megatron/core/optimizer/__init__.py L32), whose default foreach step allocates one more
   fp32 temporary per parameter of the group (torch/optim/adam.py ``_multi_tensor_adam``: ``exp_avg_sq_sqrt =
   torch._foreach_sqrt(device_exp_avg_sqs)``): another ``4`` bytes per parameter of the shard. TE's FusedAdam
   updates in place. Measured (benchmarks/results/gpu_memory.md): the first iteration's peak, which is its step
   (the Adam moments do not exist before it), exceeds the ``allocated`` after it by 2694.6 MiB on k2_1gpu and
   2695.3 MiB on k2_1gpu_s2048, i.e. 4.0 B per parameter of the 706.4 M the rank holds -- the foreach temporary.

5. Activations, bf16, saved for backward per layer and micro-batch, with sequence parallelism (``T = s·b / c``
   tokens, ``T / t`` per rank in the sequence-parallel regions) and, for Transformer Engine layers, fused/flash
   attention (no s² term; the local layers' terms follow the loss stage):

   - Transformer Engine layers (the bridge engine, NVIDIA's configurations): per token, measured at full width on an
     H100 (DeepSeek-V3 and Kimi-K2 layers, bf16 / fp8 tensorwise / fp8 blockwise, every recompute set the recipes
     use; benchmarks/results/fullwidth/README.md, within 1.4 % per layer on held-out shapes), see
     ``_te_activations``: attention ``h + ql + (kl + dr) + a·dv`` (+ ``ql + kl + a·(2(dq + dr) + dv)`` unless
     ``mla_up_proj``; + fp32 softmax statistics unless ``core_attn``), ``2h`` residuals, dense MLP ``h + 3F``, MoE
     ``h + 3fs`` and per routed token copy ``h + 3f`` (bf16 elements; FP8 keeps its GEMM inputs at 1 byte); the
     loss stage keeps the final norm output and the bf16 logits ``2·T·V/t`` (TE's fused cross entropy writes their
     gradient in place), MTP adds a MoE layer and ``5h``. Fine-grained activation offloading (``offload_modules``)
     takes the named modules' saved tensors off every in-flight layer but the last one of each module name
     (``_offloaded``; modeled from megatron-core 0.19.2's code, not measured). FP8 attention
     (``fp8_dot_product_attention``) saves q, k, v at 1 byte (``_qkv_saved_bytes``; modeled from Transformer Engine's
     code, not measured). Paged stashing (``moe_paged_stash``, HybridEP with a rank budget) keeps the routed experts'
     saved tensors in a static page buffer and reloads one layer at the budget's rows (``_expert_rows``; modeled
     from megatron-core 0.19.2's code, not measured). The TE op fuser
     (``use_transformer_engine_op_fuser``) is not modeled apart: its MLP is counted as the unfused one.
   - local layers (``transformer_impl`` "local", megatron-core's non-TE specs as the mcore engine builds them;
     counted on a CPU autograd saved-tensor audit of megatron-core 0.16.1's layers and checked on CUDA):

     - attention, standard and unfused: the norm input and output ``2·(T/t)·2h`` (torch's fused RMSNorm on CUDA
       saves its input and an fp32 rstd per token), the ``linear_qkv`` output ``2·T·3a·dv/t`` (``value`` is a
       ``torch.split`` view of it, attention.py get_query_key_value_tensors, and the context ``bmm`` saves it, so
       the whole output stays), the rotated q and k ``2·T·2a·dv/t`` (rope_utils.py ``_apply_rotary_pos_emb_bshd``
       makes new tensors; ``baddbmm`` saves them) and the context ``2·T·a·dv/t`` (``linear_proj``'s input). Then the
       score tensors of transformer/dot_product_attention.py ``forward`` (L142-L251, identical in 0.17.1), per
       element of ``b·(a/t)·s²`` (``(s/c)·s`` with CP): ``baddbmm`` writes bf16 scores (2 B, L194, not saved:
       baddbmm's backward needs only q and k), ``FusedScaleMaskSoftmax.forward_torch_softmax`` (no fused kernel:
       fusions are off without TE/apex) makes an fp32 copy (4 B, fusions/fused_softmax.py L314, masked in place),
       ``torch.softmax`` an fp32 output (4 B, **saved**: softmax's backward uses its result) and ``.bfloat16()`` a
       bf16 copy (2 B, L340, **saved** by the context ``bmm``, L239); dropout with p = 0 returns its input. So
       **6 B per score element stay saved** per layer and micro-batch (fp32 softmax output + bf16 probabilities);
       the forward peaks at 12 B inside the softmax. Measured on one H200 with megatron-core 0.17.1 (b 1, a 16,
       s 4096, dv 128; benchmarks/results/gpu_memory.md): +6.06 B per element after the forward (with the 16 MiB
       output), a forward peak of +12.0 B and a backward peak of +16.1 B over the state before the forward.
       Flash attention's fp32 softmax statistics (``4·T·a/t``) are not kept. ``core_attn`` recompute drops the 6 B
       (q, k and the qkv output stay: they are the checkpoint's inputs); ``mla_up_proj`` does not apply.
     - backward working space: the score tensors peak at 16 B per element in backward (measured), 10 B beyond
       the 6 B saved: the saved fp32 output, the incoming fp32 gradient, softmax's fp32 gradient and the masked-fill
       gradient at once (12 B counted op by op; see "Not explained" in the results).
     - workspace: the scores' ``baddbmm`` input is a persistent buffer, ``get_global_memory_buffer().get_tensor(
       (b·a/t, s, s), bf16, "mpu")`` (dot_product_attention.py L189), allocated once and kept: ``2·b·(a/t)·s²``
       per rank, in every phase (``workspace``).
     - dense MLP, unfused SwiGLU (``bias_activation_fusion`` off, mlp.py ``glu`` L219-L225 in 0.16.1): norm input
       and output ``2·(T/t)·2h``, the fc1 output ``2·T·2F/t``, ``silu(x_glu)`` ``2·T·F/t``, ``x_linear +
       glu_linear_offset`` (a new tensor even at offset 0) ``2·T·F/t`` and their product (fc2's input)
       ``2·T·F/t``: ``2·T·5F/t`` in place of TE's ``2·T·3F/t``.
     - MoE: routed experts are SequentialMLP (no grouped GEMM) with the probabilities applied inside each expert
       (mlp.py ``per_token_scale``, L232-L235): per routed token copy the expert input ``2h`` (the permuted tokens;
       index_select / scatter_add save only indices, so no expert output is kept for the combine), fc1 output
       ``4f``, ``silu`` ``2f``, the offset copy ``2f``, the GLU product ``2f`` (saved by the scale multiply), the
       scaled bf16 fc2 input ``2f`` and the fp32 probability ``4``: ``2h + 12f + 4`` bytes. SequentialMLP ignores
       ``moe_act`` recompute (only the grouped MLPs read it, experts.py L102/L588). The shared expert with
       ``moe_shared_expert_overlap`` runs shared_experts.py ``linear_fc1_forward_and_act`` (its own ``glu``
       without the offset, L216-L218 in 0.16.1): ``2·T·4fs/t``; without overlap it is an MLP: ``2·T·5fs/t``.
   - recompute: ``full`` keeps only each layer's input ``2·(T/t)·h`` and rebuilds one layer at a time;
     ``selective`` drops what its modules recompute (core_attn: attention output; mla_up_proj: q, k, kv;
     moe_act: the expert activation output; mlp: the dense MLP; moe: the whole MoE block; shared_experts: the
     shared expert; layernorm: the norm outputs).
   - in flight: the 1F1B schedule keeps ``min(pp - r, M)`` micro-batches on rank ``r``; the interleaved schedule
     (megatron/core/pipeline_parallel/schedules.py get_pp_rank_microbatches L738-L796, get_schedule_table
     L798-L826) keeps ``2(pp - r - 1) + (vp - 1)·pp + 1`` model chunks (+1 with a2a overlap), in schedule-table
     order, so rank 0 of PP8/VP2 holds 15 forward passes of its first chunk and 8 of its second. The activations of
     each in-flight chunk are summed layer by layer.
   - backward working space: the largest phase of the first backward on the rank (``_backward_working``): the
     logits' gradient; the last layer's MLP / MoE block (logits freed, gradients as large as its saved tensors);
     its attention block (that block freed too; gradients as large as its saved tensors, or 10 B per score
     element for the unfused local attention). Recompute first rebuilds the layer in full.

6. Dispatcher buffers and runtime:

   - all-to-all: the send and receive token buffers of one layer, ``2·2·(T/t)·k·h``.
   - DeepEP (NVIDIA or UCCL's drop-in, megatron/core/transformer/moe/fused_a2a.py get_buffer L33-L66): a fixed
     NVLink buffer of ``channels · min(G, 8) · 256 · 2h`` and an RDMA buffer of ``channels · ceil(G / 8) · 128 ·
     2h · 2`` (DeepEP's default chunked-token configs; ``channels`` = 12, G = et·e), plus the dispatched tokens.
   - HybridEP: dispatch and combine buffers sized for every rank of the NVLink domain, ``2·(T/t)·R·2h`` with R
     ranks per domain, and the same per remote domain for the RDMA staging, plus the dispatched tokens.
   - NCCL EP (``ncclep``, megatron-core 0.19.2 ``_NCCLEPManager`` over Transformer Engine 2.20's
     ``transformer_engine.pytorch.ep``): every buffer is sized by the fixed per-rank receive budget
     ``Rc = int(ceil64(T/t)·k'·cf)`` (token_dispatcher.py L1597-L1609; ``k' = et·k``, ``cf`` =
     ``moe_expert_rank_capacity_factor``), not by the tokens a step really receives: the receive buffer ``Rc·2h``
     and its fp32 weights ``4·Rc`` (te ep.py L610-L612), the expert output padded back to ``Rc`` rows for the combine
     (token_dispatcher.py L1709-L1722), the combine's backward gradient ``Rc·2h`` (ep.py L806) and NCCL EP's own
     staging for the dispatch output and the combine input (nccl_ep.h L319-L323, "library-owned dispatch / combine
     token staging"; its sizes are not published, modeled as ``Rc·2h`` each): ``4·Rc·2h + 4·Rc``. In bf16 the
     experts' saved input is a view of the receive buffer (token_dispatcher.py L1698-L1700 narrows it, TE's grouped
     GEMM saves the views), so each in-flight MoE layer keeps all ``Rc`` rows, not the ``(T/t)·k`` it received: the
     activations count ``(Rc - (T/t)·k)·(2h + 4)`` more per MoE layer (FP8 saves its own quantised copy of the
     received rows). From the code, not measured.
   - runtime (``RUNTIME``, ``runtime_bytes``): the CUDA context and the cuBLAS workspace (measured), NCCL's first
     communicator and each further one the rank uses (measured on 1-2 GPUs, ``communicators``), allocator
     fragmentation (modeled: 3 % of what the allocator holds at the peak).

The estimate carries an error band (``BAND``, ``MemoryEstimate.band``): 5 % of the activations, 2 % of the static
state, 50 % of the modeled runtime and dispatcher buffers. ``verdict``: *fits* below capacity by more than the band,
*tight* within it (the job runs, with a warning), *does not fit* above it (rejected unless ``memory_check``).

Peak: the forward/backward passes and the optimizer step do not overlap (see 4.), so ``total`` = weights +
gradients + optimizer + workspace + dispatcher + runtime + max(activations, step).

Calibration: the TE terms come from the full-width measurements above; the local layers' terms were counted on
their saved tensors: against ``torch.cuda.max_memory_allocated`` of 7 proxy runs on H200 (Kimi-K2 and DSV3
proxies, 1 and 2 GPUs, s 1024-4096; benchmarks/results/gpu_memory.md) the estimate without its runtime term is within
-0.2 .. +3.2 %, three of the runs held out from the derivation.
The DeepEP/UCCL/HybridEP sizes follow their default configs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from functools import lru_cache

from .layout import DECODER, EMBEDDING, LOSS, MTP, PipelineLayout, recipe_mtp_layers
from .predicates import optimizer_distributed
from .training import TrainingPlan

GIB = 1024**3

CALIBRATION = {
    # Multiplier on the derived activations for tensors the derivation misses (none found at full width, see
    # benchmarks/results/fullwidth/README.md).
    "activation_factor": 1.0,
    # DeepEP default channels (Buffer.num_sms = 24 SMs, two per channel).
    "deepep_channels": 12,
}

# Memory outside torch's allocator and the allocator's own slack, by what it is made of. "measured": mem_get_info used
# - memory_reserved on one H100 / H200 with torch 2.11, NCCL 2.28 (benchmarks/results/gpu_runtime_memory.log,
# benchmarks/results/fullwidth/gpu_fullwidth_memory.json "runtime"); "modeled": not measurable on 1-2 GPUs.
RUNTIME = {
    "cuda_context_gib": 0.62,  # measured: 619 MiB on H100 and H200
    "cublas_workspace_gib": 0.07,  # measured: 66 MiB after the first bf16 GEMM
    "nccl_library_gib": 0.17,  # measured: the first communicator costs 168 MiB more than later ones (NCCL's kernels)
    # per communicator, Bridge creating them lazily (no device_id at init_process_group, training/initialize.py L631
    # in 0.4.2): a one-rank group 0.41 GiB (the mcore engine's 1-GPU runs: 3.95 GiB outside the allocator over 8
    # communicators; a one-rank all-reduce alone: 390 MiB), a group with peers 0.94 GiB (its 2-GPU runs: 6.07 GiB,
    # 4 of the 8 groups with 2 ranks; NCCL opens more channels, each with NCCL_BUFFSIZE = 4 MiB buffers per peer, for
    # training-sized collectives). Larger groups are modeled at the two-rank size: 1-2 GPUs cannot show more.
    "nccl_single_rank_gib": 0.41,
    "nccl_with_peers_gib": 0.94,
    # allocator fragmentation, modeled as a share of what the allocator holds at the peak (the Bridge perf scripts
    # set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True for DeepSeek-V3); the proxy runs measured 0.4-3.5 GiB
    "fragmentation_share": 0.03,
}

# The estimate's error band, by term: activations (held-out full-width layers within 1.4 %, TP2 + SP layers within
# 1.8 %, whole backward peaks within 0.4 % without full recompute, the loss-holding PP2 / PP2-VP2 rank's peak within
# 0.1 %: 5 %); activations of a pipeline rank that holds no loss stage (PP2 / PP2-VP2 first ranks measured -9.4 ..
# +1.3 %, a few hundred MiB of the embedding's backward not explained: 10 %); static state (weights, gradients,
# optimizer: exact parameter counts, 2 %), runtime and dispatcher buffers (modeled from defaults: +/- 50 %).
BAND = {"activations": 0.05, "activations_pipeline": 0.10, "static": 0.02, "modeled": 0.5}

MEMORY_CHECKS = ("reject", "warn", "off")


def communicator_sizes(p: TrainingPlan) -> list[int]:
    """Ranks of each NCCL communicator a rank holds in training. The step runs collectives on the world, data-
    parallel, data x context parallel, tensor-, pipeline-, expert-, expert-data- and model-parallel groups, and torch
    creates a communicator for a group at its first collective even when the group has one rank (measured: a
    one-rank data-parallel all-reduce added 390 MiB): eight, one more for context parallelism and for several
    distributed-optimizer instances."""
    sizes = [p.world_size, max(p.dp, 1), max(p.dp, 1) * p.cp, p.tp, p.pp, p.etp * p.ep, max(p.expert_dp, 1),
             p.tp * p.pp * p.cp]
    if p.cp > 1:
        sizes.append(p.cp)
    if p.num_distributed_optimizer_instances > 1:
        sizes.append(p.num_distributed_optimizer_instances)
    return sizes


def communicators(p: TrainingPlan) -> int:
    return len(communicator_sizes(p))


def runtime_bytes(p: TrainingPlan) -> dict[str, int]:
    """The runtime term's parts (without fragmentation, which depends on the allocator's peak)."""
    r = RUNTIME
    nccl = r["nccl_library_gib"] + sum(r["nccl_single_rank_gib"] if n == 1 else r["nccl_with_peers_gib"]
                                       for n in communicator_sizes(p))
    parts = {"cuda_context": r["cuda_context_gib"], "cublas_workspace": r["cublas_workspace_gib"], "nccl": nccl}
    return {k: int(v * GIB) for k, v in parts.items()}


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
    step: int = 0  # optimizer step transient (fp32 main-grad shard + optimizer temporaries), never with activations
    workspace: int = 0  # persistent non-parameter buffers (the local attention's score buffer, FP8 weight copies)
    activation_band: float = BAND["activations"]  # BAND["activations_pipeline"] on a pipeline rank without the loss

    @property
    def total(self) -> int:
        return (self.weights + self.gradients + self.optimizer + self.workspace + self.dispatcher + self.runtime
                + max(self.activations, self.step))

    @property
    def band(self) -> int:
        """The estimate's uncertainty in bytes (``BAND`` applied term by term)."""
        static = self.weights + self.gradients + self.optimizer + self.workspace
        return int(self.activation_band * max(self.activations, self.step) + BAND["static"] * static
                   + BAND["modeled"] * (self.runtime + self.dispatcher))

    @property
    def band_pct(self) -> float:
        return 100.0 * self.band / self.total if self.total else 0.0

    @property
    def verdict(self) -> str:
        """``fits`` (below capacity by more than the band), ``tight`` (within the band of it: the job runs, with a
        warning) or ``does not fit`` (above it by more than the band)."""
        if self.total + self.band <= self.capacity:
            return "fits"
        if self.total - self.band <= self.capacity:
            return "tight"
        return "does not fit"

    @property
    def fits(self) -> bool:
        return self.verdict != "does not fit"

    @property
    def headroom(self) -> int:
        return self.capacity - self.total

    def terms(self) -> dict[str, int]:
        """Every term; ``total`` is their sum with ``activations`` and ``step`` replaced by the larger of the two."""
        return {"weights": self.weights, "gradients": self.gradients, "optimizer": self.optimizer,
                "activations": self.activations, "dispatcher": self.dispatcher, "runtime": self.runtime,
                "step": self.step, "workspace": self.workspace}

    def headline(self) -> str:
        """``82.3 of 79.6 GiB (estimate +/- 6 %): tight``"""
        return (f"{self.total / GIB:.1f} of {self.capacity / GIB:.1f} GiB (estimate +/- {self.band_pct:.0f} %): "
                f"{self.verdict}")

    def summary(self) -> str:
        terms = self.terms()
        if not self.workspace:
            del terms["workspace"]
        parts = ", ".join(f"{k} {v / GIB:.1f}" for k, v in terms.items())
        phase = "step" if self.step > self.activations else "forward/backward"
        return (f"{self.headline()} on pp rank {self.pp_rank} "
                f"({parts}; peak in the {phase}; {self.in_flight} chunks in flight)")


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
    if p.transformer_impl == "local":  # standard attention, kv_channels = v_head_dim, num_query_groups = heads
        return (3 * a * m.v_head_dim * h + a * m.v_head_dim * h) // t + h
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
    scores: float = 0.0  # elements of one layer's unfused attention score tensor, b·(a/t)·(s/c)·s; 0 with flash
    attention: float = 0.0  # the attention block's share of ``dense`` and ``moe`` (the rest is the MLP / MoE block)
    logits_grad: float = 0.0  # the loss backward's gradient of the logits, bf16 ``2·T·V/t``
    offload_dense: float = 0.0  # of ``dense``, the bytes fine-grained activation offloading moves to the host
    offload_moe: float = 0.0  # of ``moe``, the same
    stash_reload: float = 0.0  # paged stash: one MoE layer's expert tensors reloaded at the budget's rows (backward)


# Precisions whose GEMM inputs Transformer Engine keeps in 1-byte form for backward (measured for tensorwise and
# blockwise on H100, benchmarks/results/fullwidth/README.md; MXFP8 from TE's code: MXFP8Quantizer keeps the 1-byte
# rowwise / columnwise data plus one E8M0 scale per 32 elements, transformer_engine/pytorch/tensor/mxfp8_tensor.py).
FP8_PRECISIONS = frozenset({"fp8_delayed", "fp8_tensorwise", "fp8_blockwise", "mxfp8"})
# NVFP4 (Blackwell; Bridge's bf16_with_nvfp4_mixed): FP4 E2M1 data, two values a byte, and one FP8 E4M3 scale per 16
# elements (transformer_engine/common/cast/nvfp4/quantize_transpose_nvfp4.cuh: SCALE_DIM = 16): 0.5625 B per
# element of a quantised GEMM input. Modeled from TE's code, not measured (no Blackwell GPU here).
QUANTISED_INPUT_BYTES = {**{p: 1.0 for p in FP8_PRECISIONS}, "nvfp4": 0.5 + 1 / 16}


def _te_activations(p: TrainingPlan, recompute: str) -> _Activations:
    """Saved bytes per layer and micro-batch of Transformer Engine layers (MLA, fused attention, grouped-GEMM MoE),
    as measured at full width on one H100 (benchmarks/gpu_fullwidth_memory.py; the elements below, counted per token,
    reproduce every measured layer of DeepSeek-V3 and Kimi-K2 within 0.5 %):

    - attention: the input norm output ``h``, the q / kv down-projection outputs ``ql`` and ``kl + dr``, their norm
      outputs ``ql + kl`` and the up-projections' q, k and contiguous v ``a·(2(dq + dr) + dv)`` (both dropped by
      ``mla_up_proj``), the attention output ``a·dv`` (linear_proj's input, kept under ``core_attn``) and the fp32
      softmax statistics ``4a`` bytes (dropped by ``core_attn``); ``layernorm`` drops the norm output.
    - the layer's output and the mid-layer residual, ``2h``.
    - dense MLP: the fused LayerNorm-fc1's normalised input ``h``, the fc1 output ``2F`` and the SwiGLU output ``F``
      (all dropped by ``mlp``).
    - MoE: the pre-MLP norm output ``h`` (``layernorm``), the fp32 router scores ``8E`` bytes, the shared expert's
      ``3fs`` (``shared_experts``) and per routed token copy the permuted input ``h``, the fc1 output ``2f`` and the
      probability-weighted activation ``f`` (``moe_act`` drops it) plus its fp32 probability; the combine keeps no
      expert output. ``moe`` keeps only the layer's output.
    - FP8 (every layer; the Bridge fp8 presets NVIDIA's configurations use run all layers in FP8): the inputs of the
      FP8 GEMMs that TE saves quantised, at 1 byte: the fused LayerNorm-fc1 input, the fc2 input, the q/kv up-
      projection inputs and the routed experts' input and activation.
    - MTP: a MoE layer plus the embedding / norm / concatenated ``eh_proj`` input, ``5h`` (``4h`` in FP8 with its 2h
      concat quantised), and its final norm ``h``; the loss stage: the final norm output ``h`` and the bf16 logits
      (TE's fused cross entropy writes their gradient in place).
    """
    m = p.model
    h, t, k = m.hidden_size, p.tp, m.moe_router_topk
    tokens = p.seq_length * p.mbs / p.cp
    local = tokens / t  # sequence-parallel shard
    heads = m.num_attention_heads / t
    dq, dr, dv = m.qk_head_dim, m.qk_pos_emb_head_dim, m.v_head_dim
    ql, kl = m.q_lora_rank or 0, m.kv_lora_rank
    f, fs, ffn = m.moe_ffn_hidden_size, m.shared_expert_intermediate_size, m.ffn_hidden_size
    mods = set(p.recompute_modules) if recompute == "selective" else set()
    if recompute == "selective" and not mods:
        mods = {"core_attn"}  # transformer_config.py L1200: Megatron's default recompute_modules
    q8 = QUANTISED_INPUT_BYTES.get(p.precision, 2.0)  # bytes of a quantised GEMM input

    proj_in = 2 * tokens * heads * dv  # the attention output, linear_proj's input
    qkv = 0.0 if "mla_up_proj" in mods else _qkv_saved_bytes(p) * tokens * heads * (2 * (dq + dr) + dv)
    stats = 0.0 if "core_attn" in mods else 4 * tokens * heads  # fp32 softmax statistics
    attn = 2 * local * (ql + kl + dr) + proj_in + qkv + stats
    if "layernorm" not in mods:
        attn += 2 * local * h
    if "mla_up_proj" not in mods:
        attn += q8 * local * (ql + kl)
    if p.fp8_dot_product_attention and p.precision == "fp8_delayed":
        attn += tokens * heads * dv  # the delayed recipe also keeps an FP8 copy of the attention output
    residuals = 2 * local * 2 * h  # the layer's output and the mid-layer residual
    dense_mlp = 0.0 if "mlp" in mods else q8 * local * h + 2 * tokens * 2 * ffn / t + q8 * tokens * ffn / t
    experts: dict[str, float] = {}  # what the routed experts save per layer, by tensor (none when "moe" recomputes)
    stash_reload = 0.0
    if "moe" in mods:
        moe_block = -2 * local * h  # measured: only the layer's output stays (the mid residual goes too)
    else:
        saved_rows, padded_rows = _expert_rows(p)
        copies = local * k * saved_rows
        experts = {"fc1_in": copies * q8 * h, "fc1_out": copies * 2 * 2 * f,
                   "act_out": 0.0 if "moe_act" in mods else copies * q8 * f}
        routed = copies * (q8 * h + 2 * 2 * f + 4) + experts["act_out"]
        moe_block = 8 * local * m.num_experts + routed
        if p.moe_paged_stash:
            stash_reload = routed * padded_rows / saved_rows
        if "layernorm" not in mods:
            moe_block += 2 * local * h
        if "shared_experts" not in mods:
            moe_block += 2 * tokens * 3 * fs / t
            if p.shared_expert_overlap and p.sequence_parallel and t > 1:
                # shared_experts.py pre_forward_comm: the overlapped shared expert all-gathers its input from the
                # sequence-parallel shards itself and keeps it (cached_fc1_input), a whole [s, b, h] in bf16
                # (measured at TP2 + SP, benchmarks/results/fullwidth/fullwidth_parallel.md: +56 MiB a layer)
                moe_block += 2 * tokens * h
        if p.dispatcher == "ncclep" and q8 == 2.0:
            # bf16: the experts' saved input and probabilities are views of the whole receive buffer (module doc, 6.)
            moe_block += max(0.0, ncclep_recv_rows(p) - copies) * (2 * h + 4)
    scale = CALIBRATION["activation_factor"]
    dense = (attn + residuals + dense_mlp) * scale
    moe = (attn + residuals + moe_block) * scale
    vocab = _padded_vocab(m.vocab_size, t) / t
    logits = 2 * tokens * vocab + 2 * local * h  # bf16 logits + the final norm output
    layer_input = 2 * local * h
    mtp_extra = (3 * 2 + 2 * q8) * local * h  # embedding, enorm, hnorm, eh_proj output (2 B) + its 2h input
    if p.sequence_parallel and t > 1:
        # multi_token_prediction.py _concat_embeddings: eh_proj's output is gathered to [s, b, h] and scattered
        # back to the sequence shard as a view, which keeps the whole gathered tensor alive (measured at TP2 + SP)
        mtp_extra += 2 * (tokens - local) * h
    if recompute == "full":
        return _Activations(layer_input, layer_input, layer_input, logits, layer_input + logits, 0.0, 0.0, 0.0)
    off_dense, off_moe = _offloaded(p.offload_modules, norm_in=2 * local * h, core_attn=qkv + stats,
                                    proj_in=proj_in, experts=experts)
    return _Activations(dense, moe, layer_input, logits, moe + mtp_extra * scale + logits, 0.0,
                        (attn + residuals / 2) * scale, 0.0, off_dense * scale, off_moe * scale,
                        stash_reload * scale)


# megatron-core 0.19.2 transformer_config.py L1274: the paged stash's CUDA buffer, sized from the average tokens
# (positive factor), with 10 % headroom.
PAGED_STASH_BUFFER_FACTOR = 1.10


def _expert_rows(p: TrainingPlan) -> tuple[float, float]:
    """The routed experts' rows per MoE layer that stay saved, and the rows the experts compute on, as multiples of
    the balanced ``(T/t)·k`` copies. Modeled from megatron-core 0.19.2's code, not measured.

    HybridEP with paged stashing (``moe_paged_stash``, the TE op fuser and ``moe_expert_rank_capacity_factor`` ``cf``:
    the only HybridEP points the payload hands the factor, payload/train/config.py ``rank_capacity_factor``): the
    dispatch output is a static ``int(T/t · k · cf)`` rows (token_dispatcher.py L1090-L1102); the saved expert
    tensors go, at their real rows, into one static page buffer sized at 1.10 times the average rows of every layer
    in flight (experts.py L653-L668; paged_stash.py ``on_save_for_backward``, ``allocate_stash_buffers`` with the
    default ``moe_paged_stash_buffer_size_factor_cuda``); in backward each layer is reloaded at the full ``cf`` rows
    (``reload_paged_tensors``), one layer at a time (``_Activations.stash_reload``).

    Every other point: the balanced rows (the ncclep receive budget is counted in _te_activations)."""
    cf = p.moe_expert_rank_capacity_factor
    if not (p.dispatcher == "hybridep" and cf and p.moe_paged_stash and p.use_transformer_engine_op_fuser):
        return 1.0, 1.0
    return PAGED_STASH_BUFFER_FACTOR, cf


def _qkv_saved_bytes(p: TrainingPlan) -> float:
    """Bytes per element of the q, k, v the fused attention saves for backward: bf16, or with
    ``fp8_dot_product_attention`` (any FP8 / FP4 precision) their FP8 copies (Transformer Engine 2.20.2
    attention/dot_product_attention/backends.py L1760-L1767: an FP8 backward saves q_fp8, k_fp8, v_fp8, and the
    attention output in bf16 for current scaling and MXFP8, in FP8 as well for the delayed recipe). Modeled from the
    code, not measured."""
    return 1.0 if p.fp8_dot_product_attention and p.precision != "bf16" else 2.0


def _offloaded(modules: tuple[str, ...], *, norm_in: float, core_attn: float, proj_in: float,
               experts: dict[str, float]) -> tuple[float, float]:
    """Bytes per dense / MoE layer and micro-batch that fine-grained activation offloading (``offload_modules``)
    moves to the host: the tensors each named module saves for backward (megatron-core 0.19.2
    pipeline_parallel/fine_grained_activation_offload.py records a module's saved tensors between its group start and
    commit), as _te_activations counts them. Modeled from the code, not measured:

    - ``attn_norm`` / ``mlp_norm``: the norm's input, the layer input / the mid-layer residual, ``2h`` each;
    - ``core_attn``: the up-projections' q, k, v ``a·(2(dq + dr) + dv)`` (unless ``mla_up_proj`` recomputes them)
      and the fp32 softmax statistics (unless ``core_attn`` recomputes them); ``attn_proj``: linear_proj's input,
      the attention output ``a·dv``;
    - ``expert_fc1``: the routed experts' permuted input ``q8·h`` per routed copy; ``moe_act``: the fc1 output
      ``2·2f`` per copy; ``fused_group_mlp``: both and the activation output ``q8·f``;
    - ``qkv_linear``: not modeled (counted as kept).

    Kept on the GPU: the last layer of every module name (``post_warmup_callback`` marks it not offloadable so its
    reload does not block), which ``estimate_ranks`` adds back once; the first (warm-up) iteration offloads every
    group (``should_bulk_offload``), so the peak is no higher then."""
    off = set(modules)
    if not off:
        return 0.0, 0.0
    common = norm_in * len({"attn_norm", "mlp_norm"} & off)
    if "core_attn" in off:
        common += core_attn
    if "attn_proj" in off:
        common += proj_in
    moe_only = 0.0
    if experts:
        fused = "fused_group_mlp" in off
        if "expert_fc1" in off or fused:
            moe_only += experts["fc1_in"]
        if "moe_act" in off or fused:
            moe_only += experts["fc1_out"]
        if fused:
            moe_only += experts["act_out"]
    return common, common + moe_only


def _activations(p: TrainingPlan, recompute: str) -> _Activations:
    """Per layer kind, kept on the (frozen) plan: the estimate asks for the same ones from every backward phase."""
    key = f"_activations_{recompute}"
    known = p.__dict__.get(key)
    if known is None:
        known = _te_activations(p, recompute) if p.transformer_impl != "local" else _local_activations(p, recompute)
        p.__dict__[key] = known
    return known


def _local_activations(p: TrainingPlan, recompute: str) -> _Activations:
    """Saved bytes of Megatron-Core's local (non-TE) layers, the mcore engine's (see the module docstring)."""
    m = p.model
    h, t, k = m.hidden_size, p.tp, m.moe_router_topk
    tokens = p.seq_length * p.mbs / p.cp
    local = tokens / t  # sequence-parallel shard
    heads = m.num_attention_heads / t
    dv = m.v_head_dim
    mods = set(p.recompute_modules) if recompute == "selective" else set()
    if recompute == "selective" and not mods:
        mods = {"core_attn"}  # transformer_config.py L1200: Megatron's default recompute_modules

    norm_out = 0 if "layernorm" in mods else 2 * local * h
    # standard attention, unfused local DotProductAttention: qkv output, rotated q and k, context
    scores = p.mbs * heads * (p.seq_length / p.cp) * p.seq_length
    attn = 2 * local * h + norm_out + 2 * tokens * heads * dv * (3 + 2 + 1)
    if "core_attn" not in mods:
        attn += 6 * scores  # fp32 softmax output + bf16 probabilities

    moe = 2 * local * h + norm_out + 8 * local * m.num_experts
    fs = m.shared_expert_intermediate_size
    if "shared_experts" not in mods:
        moe += 2 * tokens * (4 if p.shared_expert_overlap else 5) * fs / t
    # SequentialMLP (ignores moe_act), see the module docstring
    moe += local * k * (2 * h + 12 * m.moe_ffn_hidden_size + 4)
    if "moe" in mods:
        moe = 2 * local * h
    dense_mlp = 2 * local * h + norm_out
    if "mlp" not in mods:
        dense_mlp += 2 * tokens * 5 * m.ffn_hidden_size / t

    vocab = _padded_vocab(m.vocab_size, t) / t
    layer_input = 2 * local * h
    scale = CALIBRATION["activation_factor"]
    # vocab-parallel cross entropy: bf16 logits + the fp32 softmax it saves; a bf16 gradient in backward
    logits, logits_grad = 6 * tokens * vocab, 2 * tokens * vocab
    if recompute == "full":
        return _Activations(layer_input * scale, layer_input * scale, layer_input, logits, layer_input + logits,
                            scores, 0.0, logits_grad)
    return _Activations((attn + dense_mlp) * scale, (attn + moe) * scale, layer_input, logits,
                        (attn + moe + 2 * local * 2 * h) * scale + logits, scores, attn * scale, logits_grad)


def _backward_working(p: TrainingPlan, act: _Activations, holds_loss: bool, holds_moe: bool = True) -> float:
    """Bytes the first backward on a rank needs beyond the saved activations, as the largest of its phases.

    The backward of the rank's last layer starts after the loss backward (only on the rank that holds the loss
    stage) and walks the layer's blocks in reverse:

    - loss: the logits' gradient, ``2·T·V/t``, while everything is still saved;
    - the MLP / MoE block: the logits are freed; the block's gradients are as large as what it saved (the usual
      "one block of working space" convention);
    - the attention block: the MLP / MoE block's saved tensors are freed too; its gradients are as large as its
      saved tensors, except the unfused local attention, whose score tensors peak at 16 B per element in backward
      (measured, benchmarks/results/gpu_memory.md), 10 B beyond the 6 B it saved.

    With recompute the layer is first rebuilt in full (its no-recompute activations come back), then differentiated.
    Walked against the Kimi-K2 proxy's measured peaks (local layers, 4 layers, s 4096 and 2048) this lands within
    2 % of the forward/backward peak, where "one whole extra layer" over-counted by 20-33 %.

    Transformer Engine layers on the rank holding the loss stage add two phases before any layer's backward
    (measured at full width, DeepSeek-V3 / Kimi-K2, TP1 and TP2 + SP, s 2048-8192: each backward peak within a few
    MiB, benchmarks/results/fullwidth/fullwidth_parallel.md):

    - the output layer's backward: its input gradient ``2·T·h`` (+ the sequence-parallel shard ``2·T·h/t`` it is
      reduce-scattered to) and, without gradient-accumulation fusion, its weight gradient ``2·V·h/t`` as a
      temporary (the fused cross entropy wrote the logits' gradient into the logits, so no ``2·T·V/t`` more);
    - with MTP: the MTP block's backward ends in its embedding lookup's dense weight gradient ``2·V·h/t``, after the
      main logits are freed, beside both output-layer input gradients ``4·T·h`` (and the output layer's weight
      gradient temporary without the fusion).
    """
    full = _activations(p, "none")
    freed = act.loss if holds_loss else 0.0
    # the rank's last layer: an MoE layer if the rank holds one (a first pipeline stage may hold dense layers only)
    layer = max(full.moe, full.dense) if holds_moe else full.dense
    attention = full.attention
    mlp = layer - attention
    # recompute brings back what it dropped (full: the whole layer; selective: the recomputed modules' tensors)
    saved = max(act.moe, act.dense) if holds_moe else act.dense
    rebuilt = max(0.0, layer - saved) if p.recompute != "none" else 0.0
    attention_grads = 10 * full.scores if p.transformer_impl == "local" else attention
    phases = [
        act.logits_grad if holds_loss else 0.0,
        rebuilt + mlp + (act.stash_reload if holds_moe else 0.0) - freed,
        rebuilt - mlp + attention_grads - freed,
    ]
    if holds_loss and p.transformer_impl != "local":
        m, t = p.model, p.tp
        h, tokens = m.hidden_size, p.seq_length * p.mbs / p.cp
        weight = 2 * _padded_vocab(m.vocab_size, t) * h / t  # the output layer's (and the embedding's) weight
        wgrad = 0.0 if p.gradient_accumulation_fusion else weight
        phases.append(wgrad + 2 * tokens * h * (1 + (1 / t if p.sequence_parallel and t > 1 else 0)))
        if p.effective_mtp_layers:
            logits = 2 * tokens * _padded_vocab(m.vocab_size, t) / t
            phases.append(wgrad + weight - logits + 4 * tokens * h)
    return max(0.0, *phases)


def _bf16_layer_extra(p: TrainingPlan, layout: PipelineLayout, act: _Activations) -> dict[tuple[int, int], float]:
    """Bytes beyond the FP8 estimate on the chunks holding the model's first and last decoder layers, which Bridge's
    ``bf16_with_fp8_current_scaling_mixed`` preset (the payload's fp8_tensorwise) runs in bf16
    (``first_last_layers_bf16``, ``num_layers_at_start_in_bf16 = num_layers_at_end_in_bf16 = 1``,
    training/mixed_precision.py L291-L310 in 0.4.2). Keyed by (pp rank, virtual stage)."""
    if p.precision != "fp8_tensorwise":
        return {}
    from dataclasses import replace

    bf16 = _activations(replace(p, precision="bf16"), p.recompute)
    last_index = p.model.num_layers - 1
    extra: dict[tuple[int, int], float] = {}
    index = 0
    for v in range(layout.vp):
        for r in range(layout.pp):
            for name in layout.by_rank[r][v]:
                if name != DECODER:
                    continue
                if index in (0, last_index):
                    dense = index < p.model.first_k_dense
                    more = (bf16.dense - act.dense) if dense else (bf16.moe - act.moe)
                    extra[(r, v)] = extra.get((r, v), 0.0) + more
                index += 1
    return extra


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
    if p.dispatcher == "ncclep":
        recv = ncclep_recv_rows(p)
        return int(4 * recv * 2 * h + 4 * recv)  # receive, combine input, combine gradient, staging (x2); weights
    return int(a2a)


def ncclep_recv_rows(p: TrainingPlan) -> int:
    """The ncclep receive budget in rows (TrainingPlan.ncclep_recv_capacity); without a capacity factor (a point the
    ncclep-capacity-factor rule rejects) the balanced share."""
    recv = p.ncclep_recv_capacity
    return recv if recv is not None else p.ncclep_tokens_per_rank * p.flex_topk


def _optimizer_bytes(p: TrainingPlan, params: _Params, dp_shards: int, ep_shards: int) -> float:
    """Adam: 12 B per parameter (fp32 master + two fp32 moments). The Bridge recipes' precision-aware Adam: 8 B (fp32
    master 4 + bf16 exp_avg 2 + bf16 exp_avg_sq 2), as measured by owner and dtype on an H100 with megatron-core 0.17.1
    and 0.19.2 (MBRIDGE_MEMORY_BREAKDOWN; the recipes' store_param_remainders = True left the master in fp32). Muon:
    8 B for its matrices; embeddings stay on Adam."""
    adam = 8 if p.precision_aware_optimizer else 12
    per_matrix = 8 if p.optimizer == "muon" else adam
    if p.optimizer_cpu_offload:
        # Megatron-Core's HybridDeviceOptimizer (optimizer/cpu_offloading/hybrid_optimizer.py
        # _get_sub_optimizer_param_groups): the first optimizer_offload_fraction of the shard's parameters, by count,
        # get their fp32 copy and states on the host; the rest an fp32 copy (param_update_in_fp32) and fp32 Adam
        # states on the GPU, 12 B. Modeled from the code, not measured.
        adam = per_matrix = 12 * (1 - p.optimizer_offload_fraction)
    return (params.embedding * adam + params.dense * per_matrix) / dp_shards + params.expert * per_matrix / ep_shards


def _step_bytes(p: TrainingPlan, params: _Params, dp_shards: int, ep_shards: int) -> float:
    """The optimizer step's transient: fp32 main grads of the shard, plus torch AdamW's foreach temporary."""
    if p.use_megatron_fsdp:
        return 0.0  # distrib_optimizer.py _copy_model_grads_to_main_grads returns before the copy
    shard = (params.embedding + params.dense) / dp_shards + params.expert / ep_shards
    per_param = 4 + (4 if p.transformer_impl == "local" and p.optimizer == "adam" else 0)
    if p.optimizer_cpu_offload:  # hybrid_optimizer.py _set_sub_optimizer_grads: fp32 grads of the GPU share only
        per_param = 4 * (1 - p.optimizer_offload_fraction)
    return per_param * shard


def estimate_memory(plan: TrainingPlan) -> MemoryEstimate:
    """:func:`_estimate_memory`, remembered per plan: the memory rule, the dry-run note, the caution and preflight's
    table all ask for the same point's estimate (plans and estimates are frozen, so a remembered one is the same)."""
    known = plan.__dict__.get("_memory_estimate")  # asked again for the same plan (the rule, then the table)
    if known is not None:
        return known
    try:
        estimate = _remembered_estimate(_memory_key(plan))
    except TypeError:  # a plan with an unhashable field: computed each time
        return _estimate_memory(plan)
    plan.__dict__["_memory_estimate"] = estimate  # a frozen plan never changes: the answer stays right
    return estimate


def _memory_key(plan: TrainingPlan) -> TrainingPlan:
    """The plan an estimate is remembered under: the global batch enters the estimate only through the micro-batch
    count of ``in_flight_chunks``, which no longer changes past ``pp * (vp + 3)`` micro-batches (every rank's
    warm-up is shorter than that, in full groups of pp), so a sweep over gbs shares one estimate from there on."""
    m = plan.num_microbatches
    cap = plan.pp * (plan.interleaved_vp + 3)
    if m <= cap:
        return plan
    return replace(plan, gbs=cap * plan.mbs * plan.dp)


def _estimate_memory(plan: TrainingPlan) -> MemoryEstimate:
    """The per-GPU memory of ``plan`` on its busiest pipeline rank (see the module docstring for every term).

    Needs a plan whose pipeline layout resolves (the layout rules report the others); a plan whose layout does not
    resolve is estimated with Megatron's even split rounded down, which is good enough to rank sweep points.
    """
    return max(estimate_ranks(plan, busiest_only=True), key=lambda e: e.total)


def estimate_ranks(plan: TrainingPlan, busiest_only: bool = False) -> list[MemoryEstimate]:
    """The estimate of every pipeline rank, in rank order (``estimate_memory`` takes the largest).

    ``busiest_only``: of ranks holding alike stages (the same layers and the same bf16 first/last-layer extras),
    only the first. Both schedules keep at least as many micro-batches of every chunk in flight on a lower rank
    (``in_flight_chunks`` does not grow with the rank) and every other term depends on the stages only, so the
    first of such ranks is the largest of them: the maximum over ranks is the same, from a few ranks of a deep
    pipeline instead of all of them."""
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
    if optimizer_distributed(p):
        dp_shards, ep_shards = max(1, dp_cp // ndo), max(1, edp // ndo)
    else:
        dp_shards = ep_shards = 1
    grad_bytes = 4 if p.grad_reduce_in_fp32 else 2
    dispatcher = _dispatcher_bytes(p)
    fixed_runtime = sum(runtime_bytes(p).values())
    workspace = int(2 * act.scores)  # the unfused attention's persistent global score buffer
    # the same for every rank but for whether it holds the loss stage
    working = {(loss, moe): _backward_working(p, act, holds_loss=loss, holds_moe=moe)
               for loss in (False, True) for moe in (False, True)}
    # the embedding's backward, a chunk's last: its dense weight gradient (TE path, measured with PP2 at full width)
    # while the rank's other in-flight chunks stay saved, that chunk's own freed
    embedding_grad = 2 * _padded_vocab(p.model.vocab_size, p.tp) * p.model.hidden_size / p.tp \
        if p.transformer_impl != "local" else 0.0
    counts_by_rank = _stage_counts(layout, p.model.first_k_dense)
    bf16_extra = _bf16_layer_extra(p, layout, act)
    ranks: list[MemoryEstimate] = []
    # the parameter terms depend on the rank's stages only, and most ranks of a deep pipeline hold alike stages
    by_stages: dict[tuple, tuple[float, float, float, float, float]] = {}
    seen: set[tuple] = set()
    for rank in range(p.pp):
        stages = counts_by_rank[rank]
        if busiest_only:
            alike = (stages, tuple(bf16_extra.get((rank, v), 0.0) for v in range(len(stages)))) if bf16_extra \
                else stages
            if alike in seen:
                continue
            seen.add(alike)
        if stages not in by_stages:
            params = _rank_params(p, stages)
            n_dense = params.dense + params.embedding
            if p.use_megatron_fsdp:
                gathered = 2 * _largest_layer_params(p)
                weights = 2 * (n_dense / dp_cp + params.expert / edp + gathered)
                grads = grad_bytes * (n_dense / dp_cp + params.expert / edp)
            else:
                weights = 2 * (n_dense + params.expert)
                grads = grad_bytes * (n_dense + params.expert)
            # FP8 blockwise (no fp8 param gather in Bridge's preset): TE keeps each GEMM weight's rowwise and
            # columnwise 1-byte copies next to the bf16 weight (measured: 2.0 B per GEMM parameter, DeepSeek-V3 and
            # Kimi-K2 slices)
            by_stages[stages] = (weights, grads, _optimizer_bytes(p, params, dp_shards, ep_shards),
                                 _step_bytes(p, params, dp_shards, ep_shards),
                                 2 * (params.dense + params.expert) if p.precision == "fp8_blockwise" else 0)
        weights, grads, optimizer, step, cache = by_stages[stages]
        in_flight = in_flight_chunks(p.pp, rank, layout.vp, p.num_microbatches, p.moe_a2a_overlap)
        activations = sum(n * (_chunk_bytes(c, act) + bf16_extra.get((rank, v), 0.0))
                          for v, (n, c) in enumerate(zip(in_flight, stages, strict=True)))
        if p.cpu_offloading:
            activations -= min(p.cpu_offloading_num_layers, sum(c[0] + c[1] for c in stages)) * act.moe
        if act.offload_dense or act.offload_moe:
            moved = sum(n * (c[0] * act.offload_dense + c[1] * act.offload_moe)
                        for n, c in zip(in_flight, stages, strict=True))
            # the last layer of each module name stays on the GPU (_offloaded)
            activations -= max(0.0, moved - max(act.offload_dense if any(c[0] for c in stages) else 0.0,
                                                act.offload_moe if any(c[1] for c in stages) else 0.0))
        holds_moe = any(c[1] or c[4] for c in stages) or (p.model.num_experts > 0 and p.model.first_k_dense == 0)
        work = working[(any(c[3] for c in stages), holds_moe)]
        for v, (n, c) in enumerate(zip(in_flight, stages, strict=True)):
            if c[2] and n:
                work = max(work, embedding_grad - _chunk_bytes(c, act) - bf16_extra.get((rank, v), 0.0))
        activations += work
        held = weights + grads + optimizer + workspace + cache + dispatcher + max(activations, step)
        runtime = fixed_runtime + int(RUNTIME["fragmentation_share"] * held)
        est = MemoryEstimate(
            weights=int(weights), gradients=int(grads), optimizer=int(optimizer), activations=int(activations),
            dispatcher=dispatcher, runtime=runtime, capacity=int(p.gpu.memory_gib * GIB), pp_rank=rank,
            in_flight=sum(in_flight), step=int(step), workspace=workspace + int(cache),
            activation_band=BAND["activations"] if p.pp == 1 or any(c[3] for c in stages)
            else BAND["activations_pipeline"],
        )
        ranks.append(est)
    return ranks


_remembered_estimate = lru_cache(maxsize=4096)(_estimate_memory)


def _largest_layer_params(p: TrainingPlan) -> int:
    moe_dense, moe_expert = _moe_params(p)
    return _attention_params(p) + max(moe_dense + moe_expert, 3 * p.model.hidden_size * p.model.ffn_hidden_size)
