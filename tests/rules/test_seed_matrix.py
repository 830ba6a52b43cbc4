"""Seed 000's measured matrix passes on B300; the same on GB200 with DeepEP, and MTP 0 with overlap, do not."""

from __future__ import annotations

import itertools

import pytest
from rules_support import seed_plan

from cloudai_mbridge.plan.memory import estimate_memory
from cloudai_mbridge.rules import TRAINING_RULES

MATRIX = list(itertools.product(["kimi_k2", "deepseek_v3"], [1, 4], [False, True], ["alltoall", "deepep"]))


@pytest.mark.parametrize(("model", "mbs", "overlap", "dispatcher"), MATRIX)
def test_seed_000_point_passes_on_b300(model: str, mbs: int, overlap: bool, dispatcher: str) -> None:
    plan = seed_plan(model=model, mbs=mbs, moe_a2a_overlap=overlap, dispatcher=dispatcher)
    assert (plan.world_size, plan.dp, plan.expert_dp) == (256, 4, 1)
    assert [str(v) for v in TRAINING_RULES.check(plan)] == []
    assert estimate_memory(plan).fits


@pytest.mark.parametrize(("model", "mbs", "overlap"), [m[:3] for m in MATRIX if m[3] == "deepep"])
def test_seed_000_point_with_deepep_is_rejected_on_gb200(model: str, mbs: int, overlap: bool) -> None:
    plan = seed_plan(model=model, mbs=mbs, moe_a2a_overlap=overlap, dispatcher="deepep", gpu="gb200",
                     num_nodes=64, gpus_per_node=4)
    (v,) = TRAINING_RULES.check(plan)
    assert v.rule == "dispatcher-gpu" and "DeepEP allowlist" in str(v)
    assert TRAINING_RULES.check(seed_plan(model=model, mbs=mbs, moe_a2a_overlap=overlap, dispatcher="alltoall",
                                          gpu="gb200", num_nodes=64, gpus_per_node=4)) == []


@pytest.mark.parametrize("model", ["kimi_k2", "deepseek_v3"])
def test_mtp_zero_with_overlap_is_accepted(model: str) -> None:
    """mtp_num_layers = 0 reaches Megatron as None (payload/train/config.py megatron_mtp_layers), which the a2a
    overlap accepts; the rules judge what Megatron sees."""
    assert TRAINING_RULES.check(seed_plan(model=model, mbs=4, moe_a2a_overlap=True, mtp_num_layers=0)) == []
    assert TRAINING_RULES.check(seed_plan(model=model, mbs=4, moe_a2a_overlap=False, mtp_num_layers=0)) == []
