"""Architectures known only to the refit byte plan (plan/refit_bytes.py ``gqa_tensors``): grouped-query attention
with QK norm, every layer MoE (or every layer dense), no shared expert; the Qwen3 family of NeMo-RL's NCCL-Xfer refit
table (seed 001, benchmarks/refit_vs_published.py). Not training models: the rules, the memory estimate and the
payload know the MLA family of catalog/models.py only.

Values are those of each model's public Hugging Face ``config.json`` (the URL in ``source``); Megatron-Core names:
num_layers = num_hidden_layers, num_query_groups = num_key_value_heads, kv_channels = head_dim,
moe_ffn_hidden_size = moe_intermediate_size, ffn_hidden_size = intermediate_size (dense models).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class GQAModelSpec:
    name: str
    hf_id: str
    source: str  # the config.json the values come from
    num_layers: int
    hidden_size: int
    num_attention_heads: int
    num_query_groups: int
    head_dim: int
    vocab_size: int
    tie_word_embeddings: bool
    ffn_hidden_size: int = 0  # dense MLP (0: every layer MoE)
    num_experts: int = 0  # 0: a dense model
    moe_ffn_hidden_size: int = 0
    moe_router_topk: int = 0
    qk_norm: bool = True


def _hf(model: str) -> str:
    return f"https://huggingface.co/{model}/blob/main/config.json"


QWEN3_4B = GQAModelSpec("qwen3_4b", "Qwen/Qwen3-4B", _hf("Qwen/Qwen3-4B"), num_layers=36, hidden_size=2560,
                        num_attention_heads=32, num_query_groups=8, head_dim=128, vocab_size=151936,
                        tie_word_embeddings=True, ffn_hidden_size=9728)
QWEN3_30B_A3B = GQAModelSpec("qwen3_30b_a3b", "Qwen/Qwen3-30B-A3B", _hf("Qwen/Qwen3-30B-A3B"), num_layers=48,
                             hidden_size=2048, num_attention_heads=32, num_query_groups=4, head_dim=128,
                             vocab_size=151936, tie_word_embeddings=False, num_experts=128, moe_ffn_hidden_size=768,
                             moe_router_topk=8)
QWEN3_235B_A22B = GQAModelSpec("qwen3_235b_a22b", "Qwen/Qwen3-235B-A22B", _hf("Qwen/Qwen3-235B-A22B"), num_layers=94,
                               hidden_size=4096, num_attention_heads=64, num_query_groups=4, head_dim=128,
                               vocab_size=151936, tie_word_embeddings=False, num_experts=128,
                               moe_ffn_hidden_size=1536, moe_router_topk=8)

REFIT_MODELS: dict[str, GQAModelSpec] = {m.name: m for m in (QWEN3_4B, QWEN3_30B_A3B, QWEN3_235B_A22B)}
