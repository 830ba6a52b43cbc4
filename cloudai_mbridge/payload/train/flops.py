"""Model FLOPs of one training iteration of a DeepSeek-V3-family MoE, the formula Megatron-LM reports TFLOP/s with.

This is `transformer_flops()` of `num_floating_point_operations` in Megatron-LM core_v0.16.1
megatron/training/training.py, written out for our model facts so the mcore engine's "throughput per GPU" is the
number Megatron-LM (and so a Megatron-Bridge run of the same shape) would print. Per token and per layer:

- every GEMM counts 2 FLOPs per multiply-add (fma) and 3 times (forward, weight grad, data grad);
- MLA attention: q down/up projections with the q norm (q_lora_rank * (h + n*(d_qk + d_rope) + 1)), kv down/up with
  the kv norm (kv_lora_rank * (h + n*(d_qk + d_v) + 1)), the shared rope key (h * d_rope), the output projection
  (n*d_v * h), and the causal core attention (s/2 * n*(d_qk + d_rope) for QK^T plus s/2 * n*d_v for AV);
  standard attention (the mcore engine's stand-in without Transformer Engine): h*(q + k + v) + q*s/2*2 + q*h;
- MLP with SwiGLU (3 GEMM-widths per ffn unit): dense layers h*ffn*3, MoE layers h*moe_ffn*topk*3 for the routed
  experts plus h*shared*3 for the shared expert;
- MTP layers count as one more MoE layer each plus their norms and the 2h -> h projection, and one more logit pass;
- logits: h * padded_vocab per prediction head.
"""

from __future__ import annotations

from typing import Any

FWD_BWD = 3  # forward + backward wgrad + backward dgrad
FMA = 2
SWIGLU = 3  # h -> 2*ffn (gate and up) and ffn -> h


def attention_flops_per_token(model: dict[str, Any], seq_length: int, *, mla: bool,
                              kv_channels: int | None = None, num_query_groups: int | None = None) -> float:
    """Forward+backward FLOPs of one attention layer per token."""
    h = model["hidden_size"]
    n = model["num_attention_heads"]
    if mla:
        d_qk, d_rope, d_v = model["qk_head_dim"], model["qk_pos_emb_head_dim"], model["v_head_dim"]
        q_lora = model["q_lora_rank"]
        q_term = h * n * (d_qk + d_rope) if q_lora is None else q_lora * (h + n * (d_qk + d_rope) + 1)
        per_token = (
            q_term
            + model["kv_lora_rank"] * (h + n * (d_qk + d_v) + 1)
            + h * d_rope
            + n * d_v * h
            + seq_length * n * (d_qk + d_rope) / 2
            + seq_length * n * d_v / 2
        )
    else:
        kv = kv_channels or h // n
        groups = num_query_groups or n
        q, k, v = kv * n, kv * groups, kv * groups
        per_token = h * (q + k + v) + q * seq_length / 2 * 2 + q * h
    return FWD_BWD * FMA * per_token


def num_floating_point_operations(model: dict[str, Any], *, batch_size: int, seq_length: int,
                                  mtp_num_layers: int | None, padded_vocab_size: int, mla: bool = True,
                                  kv_channels: int | None = None, num_query_groups: int | None = None) -> float:
    """FLOPs of one iteration of `batch_size` sequences (the global batch), forward and backward."""
    h = model["hidden_size"]
    num_layers = model["num_layers"]
    num_moe = num_layers - model["first_k_dense"]
    num_dense = model["first_k_dense"]
    mtp = mtp_num_layers or 0
    # Megatron-LM: MTP layers are of the last decoder layer's kind (MoE for this family).
    last_is_moe = 1 if num_moe > 0 else 0
    num_moe += last_is_moe * mtp
    num_dense += (1 - last_is_moe) * mtp
    mlp = FWD_BWD * FMA * h * (
        model["ffn_hidden_size"] * SWIGLU * num_dense
        + model["moe_ffn_hidden_size"] * model["moe_router_topk"] * SWIGLU * num_moe
        + model["shared_expert_intermediate_size"] * SWIGLU * num_moe
    )
    attention = attention_flops_per_token(model, seq_length, mla=mla, kv_channels=kv_channels,
                                          num_query_groups=num_query_groups) * (num_layers + mtp)
    mtp_extra = FWD_BWD * FMA * mtp * (3 * h + 2 * h * h)
    logits = FWD_BWD * FMA * h * padded_vocab_size * (mtp + 1)
    return batch_size * seq_length * (mlp + attention + mtp_extra + logits)
