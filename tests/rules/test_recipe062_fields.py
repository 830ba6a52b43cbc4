"""Bridge 0.6.2's perf-recipe settings per release (catalog/bridge.py newer_fields): bridge_version "0.4"
(Megatron-Core 0.17.1) takes fine-grained activation offloading and HSDP's outer sharding, which 0.17.1 has, and
refuses the settings only 0.19.2 has, naming the setting; "0.6" takes them all."""

from __future__ import annotations

import pytest
from rules_support import small_plan

from cloudai_mbridge.rules import TRAINING_RULES


def refusals(**changes) -> list:
    return [v for v in TRAINING_RULES.check(small_plan(**changes)) if v.rule == "recipe062-fields"]


@pytest.mark.parametrize("release", ["0.4", "0.6"])
def test_offloading_and_outer_sharding_are_taken_where_megatron_core_has_them(release: str) -> None:
    assert refusals(bridge_version=release, offload_modules=("core_attn", "attn_proj")) == []
    assert refusals(bridge_version=release, offload_modules=("expert_fc1",)) == []
    assert refusals(bridge_version=release, use_megatron_fsdp=True, outer_dp_sharding_strategy="optim",
                    num_distributed_optimizer_instances=2) == []


@pytest.mark.parametrize("changes, named", [
    ({"moe_paged_stash": True, "moe_expert_rank_capacity_factor": 1.5}, "moe_paged_stash"),
    ({"use_transformer_engine_op_fuser": True}, "use_transformer_engine_op_fuser"),
    ({"offload_modules": ("fused_group_mlp",), "use_transformer_engine_op_fuser": True},
     "offload_modules = 'fused_group_mlp'"),
])
def test_0_19_only_settings_are_refused_for_bridge_0_4_by_name(changes: dict, named: str) -> None:
    found = [v for v in refusals(bridge_version="0.4", **changes) if v.message.startswith(f"{named} is ")]
    assert len(found) == 1, refusals(bridge_version="0.4", **changes)
    v = found[0]
    assert "'0.4'" in v.message, v.message
    assert 'bridge_version = "0.6"' in v.fix
    assert refusals(bridge_version="0.6", **changes) == []


def test_fused_group_mlp_offload_needs_the_op_fuser_and_no_partial_moe_offload() -> None:
    (v,) = refusals(bridge_version="0.6", offload_modules=("fused_group_mlp",))
    assert "TE op fuser" in v.message
    (v,) = refusals(bridge_version="0.6", offload_modules=("fused_group_mlp", "moe_act"),
                    use_transformer_engine_op_fuser=True)
    assert "remove moe_act" in v.fix
