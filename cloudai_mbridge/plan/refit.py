"""One refit sweep point: the payload's config plus the system facts the rules need."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..catalog import ModelSpec

DEFAULT_SEQ_LENGTH = 4096


def refit_model(model: ModelSpec, num_layers: int | None, seq_length: int | None) -> dict[str, Any]:
    """The refit payload's model block. Refit moves every parameter alike, so attention is the payload's GQA stand-in
    for MLA and every layer is MoE; the parameter count per layer matches the model's MoE layers. No seq_length:
    DEFAULT_SEQ_LENGTH, or the model's max_position_embeddings when that is smaller."""
    if seq_length is None:
        seq_length = min(DEFAULT_SEQ_LENGTH, model.max_position_embeddings)
    return {
        "name": model.name,
        "num_layers": num_layers or model.num_layers,
        "hidden_size": model.hidden_size,
        "ffn_hidden_size": model.ffn_hidden_size,
        "moe_ffn_hidden_size": model.moe_ffn_hidden_size,
        "num_attention_heads": model.num_attention_heads,
        "num_query_groups": None,
        "num_experts": model.num_experts,
        "moe_router_topk": model.moe_router_topk,
        "moe_shared_expert_intermediate_size": model.shared_expert_intermediate_size or None,
        "vocab_size": model.vocab_size,
        "seq_length": seq_length,
    }


@dataclass(frozen=True)
class RefitPlan:
    config: dict[str, Any]  # exactly what payload/refit/__main__.py receives
    num_nodes: int
    tasks_per_node: int
    system_has_gpus: bool

    @property
    def world_size(self) -> int:
        return self.num_nodes * self.tasks_per_node
