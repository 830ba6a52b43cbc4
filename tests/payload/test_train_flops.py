"""The MoE FLOPs formula behind "throughput per GPU (TFLOP/s/GPU)", against hand arithmetic and a published number."""

from __future__ import annotations

from dataclasses import asdict

import pytest

from cloudai_mbridge.catalog import get_model
from cloudai_mbridge.payload.train.config import padded_vocab_size
from cloudai_mbridge.payload.train.flops import attention_flops_per_token, num_floating_point_operations

TINY = {
    "hidden_size": 8, "num_attention_heads": 2, "qk_head_dim": 4, "qk_pos_emb_head_dim": 2, "v_head_dim": 4,
    "q_lora_rank": 6, "kv_lora_rank": 3, "num_layers": 3, "first_k_dense": 1, "ffn_hidden_size": 16,
    "moe_ffn_hidden_size": 4, "moe_router_topk": 2, "shared_expert_intermediate_size": 4,
}


def test_mla_attention_by_hand():
    # q down+up with q norm: 6*(8 + 2*(4+2) + 1) = 126; kv down+up with kv norm: 3*(8 + 2*(4+4) + 1) = 75;
    # shared rope key: 8*2 = 16; output projection: 2*4*8 = 64;
    # causal core attention at s = 10: QK^T 10*2*(4+2)/2 = 60, AV 10*2*4/2 = 40.
    # 381 multiply-adds per token, x2 FLOPs each, x3 for forward + two backward GEMMs.
    assert attention_flops_per_token(TINY, 10, mla=True) == 6 * (126 + 75 + 16 + 64 + 60 + 40)


def test_standard_attention_by_hand():
    # q, k, v = 2 heads * 4 channels = 8 each: qkv 8*24 = 192; QK^T and AV, causal: 8*10/2*2 = 80; out 8*8 = 64.
    assert attention_flops_per_token(TINY, 10, mla=False, kv_channels=4, num_query_groups=2) == 6 * (192 + 80 + 64)


def test_whole_iteration_by_hand():
    # One MTP layer: the MoE layer count becomes 2 + 1, attention runs in 3 + 1 layers, two logit heads.
    mlp = 6 * 8 * (16 * 3 * 1 + 4 * 2 * 3 * 3 + 4 * 3 * 3)  # dense, routed experts (top-2), shared expert
    attention = 6 * 381 * 4
    mtp = 6 * 1 * (3 * 8 + 2 * 8 * 8)  # eh norms + 2h -> h projection
    logits = 6 * 8 * 32 * 2
    expected = 2 * 10 * (mlp + attention + mtp + logits)
    assert expected == 412_320
    got = num_floating_point_operations(TINY, batch_size=2, seq_length=10, mtp_num_layers=1, padded_vocab_size=32)
    assert got == expected


def test_no_mtp_is_zero_mtp():
    kw = {"batch_size": 2, "seq_length": 10, "padded_vocab_size": 32}
    assert num_floating_point_operations(TINY, mtp_num_layers=None, **kw) == num_floating_point_operations(
        TINY, mtp_num_layers=0, **kw)


def test_matches_the_seed_measurement():
    """Seed 000 (256x B300, DSV3 recipe, TP8/PP8/EP32, seq 4096, gbs 256): Megatron printed 178.62 TFLOP/s/GPU
    (mean over iterations) at a mean 5.9786 s per iteration. The same formula must land within half a percent."""
    dsv3 = asdict(get_model("deepseek_v3"))
    flops = num_floating_point_operations(dsv3, batch_size=256, seq_length=4096, mtp_num_layers=1,
                                          padded_vocab_size=padded_vocab_size(dsv3["vocab_size"], 8))
    assert flops / (5.9786 * 1e12 * 256) == pytest.approx(178.62, rel=5e-3)
