"""Step-0 rules that depend on the model's own recipe and the Bridge release (catalog/bridge.py), and the checks
Megatron-Bridge runs before Megatron-Core's: an explicit value is never changed silently."""

from __future__ import annotations

from rules_support import seed_plan

from cloudai_mbridge.rules import TRAINING_RULES


def rules(plan) -> list[str]:
    return [v.rule for v in TRAINING_RULES.check(plan) if v.rule != "memory"]


def test_explicit_vp_1_beside_a_two_chunk_layout_is_refused_not_changed() -> None:
    # 8 pp ranks, a 16-stage layout: Megatron would derive vp = 2 while the test says 1
    layout = "Et*4|(t*4|)*14tmL"
    base = seed_plan(model="deepseek_v3", gpu="h100", num_nodes=128, tp=2, pp=8, ep=64, gbs=8192,
                     pipeline_layout=layout, vp=1)
    (v,) = [v for v in TRAINING_RULES.check(base) if v.rule == "explicit-vp"]
    assert "would run vp = 2" in v.message and "set vp = 2" in v.fix
    assert "explicit-vp" not in rules(seed_plan(model="deepseek_v3", gpu="h100", num_nodes=128, tp=2, pp=8, ep=64,
                                                gbs=8192, pipeline_layout=layout, vp=2))
    assert "explicit-vp" not in rules(seed_plan(model="deepseek_v3", gpu="h100", num_nodes=128, tp=2, pp=8, ep=64,
                                                gbs=8192, pipeline_layout=layout, vp=None))


def test_layout_with_several_stages_at_pp_1_is_refused() -> None:
    plan = seed_plan(model="deepseek_v3_proxy", gpu="h100", num_nodes=1, gpus_per_node=8, tp=1, pp=1, vp=None,
                     ep=8, gbs=8, pipeline_layout="Ett|ttmL")
    assert "virtual-pipeline" in rules(plan)


def test_a2a_overlap_needs_vp_in_the_test_not_only_in_the_layout() -> None:
    """Bridge's comm_overlap check runs before Megatron derives vp from the layout."""
    kwargs = {"model": "deepseek_v3", "gpu": "b200", "num_nodes": 32, "tp": 1, "pp": 8, "ep": 32, "gbs": 4096,
              "mbs": 1, "dispatcher": "deepep", "moe_a2a_overlap": True, "pipeline_layout": "Et*4|(t*4|)*14tmL"}
    assert "a2a-overlap-bridge-vp" in rules(seed_plan(**kwargs, vp=None))
    assert "a2a-overlap-bridge-vp" not in rules(seed_plan(**kwargs, vp=2))


def test_local_cuda_graph_scopes_by_release() -> None:
    kwargs = {"model": "kimi_k2_proxy", "gpu": "h100", "num_nodes": 1, "gpus_per_node": 8, "tp": 1, "pp": 1,
              "vp": None, "ep": 8, "gbs": 8, "cuda_graph_impl": "local", "cuda_graph_scope": ("attn",)}
    assert "cuda-graph" in rules(seed_plan(**kwargs, bridge_version="0.6"))
    assert "cuda-graph" not in rules(seed_plan(**kwargs, bridge_version="0.4"))


def test_each_model_follows_its_own_recipe_table() -> None:
    """Kimi-K2's recipe has (pp, vp) = (2, 8); DeepSeek-V3's does not."""
    kimi = seed_plan(model="kimi_k2", pp=2, vp=8, tp=8, ep=32, gbs=256)
    assert "pipeline-layout-table" not in rules(kimi) and "pipeline-layout" not in rules(kimi)
    assert kimi.pipeline.layout is not None and kimi.pipeline.layout.vp == 8
    dsv3 = seed_plan(model="deepseek_v3", pp=2, vp=8, tp=8, ep=32, gbs=256)
    assert "pipeline-layout-table" in rules(dsv3)
