"""Model architectures the workloads know, with the facts the rules, the memory estimate and the payload need.

Kimi-K2 and DeepSeek-V3 values are those of their Hugging Face configs (moonshotai/Kimi-K2-Base,
deepseek-ai/DeepSeek-V3) as Megatron-Bridge's DeepSeek-V3 bridge maps them. The proxies keep the family's structure
(MLA, shared expert, first dense layer(s), top-k routing) at a size that fits 1-8 GPUs, so a dispatcher A/B on one
node exercises the same code paths.
"""

from __future__ import annotations

from dataclasses import dataclass

from .bridge import DSV3_LAYOUT_PP_VP, KIMI_K2_LAYOUT_PP_VP


@dataclass(frozen=True)
class ModelSpec:
    name: str
    family: str  # "deepseek_v3": the Megatron-Bridge recipe family all models here belong to
    hf_id: str | None
    num_layers: int
    hidden_size: int
    ffn_hidden_size: int  # dense-layer MLP
    moe_ffn_hidden_size: int  # per routed expert
    num_attention_heads: int
    num_experts: int
    moe_router_topk: int
    shared_expert_intermediate_size: int  # 0 = no shared expert
    first_k_dense: int
    vocab_size: int
    mtp_num_layers: int | None  # None = no MTP (0 is NOT the same to Megatron's a2a-overlap check)
    max_position_embeddings: int
    router_num_groups: int
    router_group_topk: int
    # MLA
    q_lora_rank: int | None
    kv_lora_rank: int
    qk_head_dim: int
    qk_pos_emb_head_dim: int
    v_head_dim: int
    # the (PP, VP) pairs for which the Megatron-Bridge recipe derives a pipeline layout itself
    recipe_pp_vp: frozenset[tuple[int, int]]
    is_proxy: bool = False
    # RoPE (YaRN) and router scaling, as in the Hugging Face config; DeepSeek-V3's values unless a model says otherwise
    rope_theta: float = 10000.0
    rope_scaling_factor: float = 40.0
    rope_beta_fast: float = 32.0
    routed_scaling_factor: float = 2.5

    @property
    def num_shared_experts(self) -> int:
        return 1 if self.shared_expert_intermediate_size else 0


# Each model follows its own Megatron-Bridge recipe's (pp, vp) layout table (catalog/bridge.py).
_DSV3_LAYOUT_TABLE = DSV3_LAYOUT_PP_VP

_MLA = {"q_lora_rank": 1536, "kv_lora_rank": 512, "qk_head_dim": 128, "qk_pos_emb_head_dim": 64, "v_head_dim": 128}

KIMI_K2 = ModelSpec(
    name="kimi_k2",
    family="deepseek_v3",
    hf_id="moonshotai/Kimi-K2-Base",
    num_layers=61,
    hidden_size=7168,
    ffn_hidden_size=18432,
    moe_ffn_hidden_size=2048,
    num_attention_heads=64,
    num_experts=384,
    moe_router_topk=8,
    shared_expert_intermediate_size=2048,
    first_k_dense=1,
    vocab_size=163840,
    mtp_num_layers=None,
    max_position_embeddings=131072,
    router_num_groups=1,
    router_group_topk=1,
    recipe_pp_vp=KIMI_K2_LAYOUT_PP_VP,
    rope_theta=50000.0,
    rope_scaling_factor=32.0,
    rope_beta_fast=1.0,
    routed_scaling_factor=2.827,
    **_MLA,
)

DEEPSEEK_V3 = ModelSpec(
    name="deepseek_v3",
    family="deepseek_v3",
    hf_id="deepseek-ai/DeepSeek-V3",
    num_layers=61,
    hidden_size=7168,
    ffn_hidden_size=18432,
    moe_ffn_hidden_size=2048,
    num_attention_heads=128,
    num_experts=256,
    moe_router_topk=8,
    shared_expert_intermediate_size=2048,
    first_k_dense=3,
    vocab_size=129280,
    mtp_num_layers=1,
    max_position_embeddings=163840,
    router_num_groups=8,
    router_group_topk=4,
    recipe_pp_vp=_DSV3_LAYOUT_TABLE,
    **_MLA,
)

# Proxies: same family, few layers; experts/heads keep Kimi's / DSV3's ratios to hidden where it matters for routing.
KIMI_K2_PROXY = ModelSpec(
    name="kimi_k2_proxy",
    family="deepseek_v3",
    hf_id=None,
    num_layers=4,
    hidden_size=2048,
    ffn_hidden_size=6144,
    moe_ffn_hidden_size=768,
    num_attention_heads=16,
    num_experts=32,
    moe_router_topk=8,
    shared_expert_intermediate_size=768,
    first_k_dense=1,
    vocab_size=32768,
    mtp_num_layers=None,
    max_position_embeddings=4096,
    router_num_groups=1,
    router_group_topk=1,
    q_lora_rank=512,
    kv_lora_rank=256,
    qk_head_dim=128,
    qk_pos_emb_head_dim=64,
    v_head_dim=128,
    recipe_pp_vp=frozenset({(1, 1), (2, 1), (4, 1), (2, 2)}),
    is_proxy=True,
)

DEEPSEEK_V3_PROXY = ModelSpec(
    name="deepseek_v3_proxy",
    family="deepseek_v3",
    hf_id=None,
    num_layers=4,
    hidden_size=2048,
    ffn_hidden_size=6144,
    moe_ffn_hidden_size=768,
    num_attention_heads=32,
    num_experts=16,
    moe_router_topk=4,
    shared_expert_intermediate_size=768,
    first_k_dense=1,
    vocab_size=32768,
    mtp_num_layers=1,
    max_position_embeddings=4096,
    router_num_groups=4,
    router_group_topk=2,
    q_lora_rank=512,
    kv_lora_rank=256,
    qk_head_dim=128,
    qk_pos_emb_head_dim=64,
    v_head_dim=128,
    recipe_pp_vp=frozenset({(1, 1), (2, 1), (4, 1), (2, 2)}),
    is_proxy=True,
)

# Small enough for a CPU refit over gloo in CI (two copies of it live in RAM at once), same MoE structure.
TINY_MOE = ModelSpec(
    name="tiny_moe",
    family="deepseek_v3",
    hf_id=None,
    num_layers=2,
    hidden_size=128,
    ffn_hidden_size=256,
    moe_ffn_hidden_size=64,
    num_attention_heads=8,
    num_experts=16,
    moe_router_topk=2,
    shared_expert_intermediate_size=64,
    first_k_dense=0,
    vocab_size=1024,
    mtp_num_layers=None,
    max_position_embeddings=512,
    router_num_groups=1,
    router_group_topk=1,
    q_lora_rank=None,
    kv_lora_rank=32,
    qk_head_dim=16,
    qk_pos_emb_head_dim=8,
    v_head_dim=16,
    recipe_pp_vp=frozenset({(1, 1), (2, 1)}),
    is_proxy=True,
)

MODELS: dict[str, ModelSpec] = {
    m.name: m for m in (KIMI_K2, DEEPSEEK_V3, KIMI_K2_PROXY, DEEPSEEK_V3_PROXY, TINY_MOE)
}


def get_model(name: str) -> ModelSpec:
    try:
        return MODELS[name]
    except KeyError:
        raise ValueError(f"unknown model {name!r}; known models: {', '.join(sorted(MODELS))}") from None
