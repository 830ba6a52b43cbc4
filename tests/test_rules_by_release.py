"""docs/rules_by_release.md holds one row per registered rule id, and the checks that differ between releases
follow the plan's bridge_version (issue 31, item 3)."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

from cloudai_mbridge.rules.refit import REFIT_RULES
from cloudai_mbridge.rules.training import TRAINING_RULES
from tests.rules.rules_support import small_plan

DOC = Path(__file__).resolve().parent.parent / "docs" / "rules_by_release.md"


def _table_ids() -> list[str]:
    ids = []
    for line in DOC.read_text(encoding="utf-8").splitlines():
        m = re.match(r"^\|\s*`([a-z0-9-]+)`\s*\|", line)
        if m:
            ids.append(m.group(1))
    return ids


def test_every_rule_has_exactly_one_row() -> None:
    registered = set(TRAINING_RULES.rules) | set(REFIT_RULES.rules)
    rows = Counter(_table_ids())
    assert {r for r, n in rows.items() if n > 1} == set(), "rule ids with more than one row"
    assert registered - set(rows) == set(), "rules without a row in docs/rules_by_release.md"
    assert set(rows) - registered == set(), "rows for rule ids no rule set registers"


def _rules(p) -> set[str]:
    return {v.rule for v in TRAINING_RULES.check(p)}


def test_a2a_overlap_mtp_at_pp1_follows_release() -> None:
    """Megatron-Core 0.17.1 refuses a2a overlap with one MTP layer at pp = 1; 0.19.2 takes it."""
    kw = {"model": "deepseek_v3_proxy", "moe_a2a_overlap": True, "mtp_num_layers": 1, "pp": 1, "memory_check": "off"}
    assert "a2a-overlap" in _rules(small_plan(**kw, bridge_version="0.4"))
    assert "a2a-overlap" not in _rules(small_plan(**kw, bridge_version="0.6"))


def test_a2a_overlap_full_iteration_graph_follows_release() -> None:
    """Megatron-Core 0.17.1 takes only Transformer Engine graphs with a2a overlap; 0.19.2 a full-iteration one too."""
    kw = {"moe_a2a_overlap": True, "cuda_graph_impl": "local", "cuda_graph_scope": ("full_iteration",),
          "memory_check": "off"}
    assert "a2a-overlap-cuda-graph" in _rules(small_plan(**kw, bridge_version="0.4"))
    assert "a2a-overlap-cuda-graph" not in _rules(small_plan(**kw, bridge_version="0.6"))
    te = {**kw, "cuda_graph_impl": "transformer_engine", "cuda_graph_scope": ("moe",)}
    for version in ("0.4", "0.6"):
        assert "a2a-overlap-cuda-graph" in _rules(small_plan(**te, bridge_version=version))


def test_muon_mxfp8_param_gather_follows_release() -> None:
    """Megatron-Core 0.17.1's optimizer step needs DistributedOptimizer's param buffer for the MXFP8 gather, which
    Muon's optimizer lacks; 0.19.2 falls back. Without the gather (upstream's Kimi-K2 MXFP8 configs) both run."""
    kw = {"model": "kimi_k2_proxy", "gpu": "b200", "optimizer": "muon", "precision": "mxfp8", "memory_check": "off"}
    assert "muon-mxfp8-param-gather" in _rules(small_plan(**kw, fp8_param_gather=True, bridge_version="0.4"))
    assert "muon-mxfp8-param-gather" not in _rules(small_plan(**kw, fp8_param_gather=True, bridge_version="0.6"))
    assert "muon-mxfp8-param-gather" not in _rules(small_plan(**kw, bridge_version="0.4"))
    adam = {**kw, "optimizer": "adam"}
    assert "muon-mxfp8-param-gather" not in _rules(small_plan(**adam, fp8_param_gather=True, bridge_version="0.4"))


def test_offload_checks_follow_release() -> None:
    """issue 45 item 4: megatron-core 0.19.2 refuses offloading inside a recomputed MoE layer (TC L1874-L1884; refused
    under 0.4 too) and an activation offload inside a full-iteration graph without an in-flight cap (TC L2634-L2642,
    0.6 only: 0.17.1 has neither the field nor the check), and offloading with CUDA graphs but no warm-up."""
    moe = {"recompute": "selective", "recompute_modules": ("moe",), "memory_check": "off"}
    for version in ("0.4", "0.6"):
        assert "offload-recompute-moe" in _rules(small_plan(**moe, offload_modules=("expert_fc1",),
                                                            bridge_version=version))
        assert "offload-recompute-moe" not in _rules(small_plan(**moe, offload_modules=("core_attn",),
                                                                bridge_version=version))
    graph = {"offload_modules": ("core_attn",), "cuda_graph_impl": "local", "cuda_graph_scope": ("full_iteration",),
             "memory_check": "off"}
    assert "offload-cuda-graph" in _rules(small_plan(**graph, bridge_version="0.6"))
    assert "offload-cuda-graph" not in _rules(small_plan(**graph, bridge_version="0.4"))
    assert "offload-cuda-graph" not in _rules(small_plan(**graph, bridge_version="0.6",
                                                         fine_grained_offloading_max_inflight_offloads=0))
    te = {**graph, "cuda_graph_impl": "transformer_engine", "cuda_graph_scope": ("attn",), "bridge_version": "0.6"}
    assert "offload-cuda-graph" in _rules(small_plan(**te, cuda_graph_warmup_steps=0))
    assert "offload-cuda-graph" not in _rules(small_plan(**te))
