"""Every training rule: one sweep point that violates it, one that just passes (and passes every other rule)."""

from __future__ import annotations

import pytest
from rules_support import seed_plan, small_plan

from cloudai_mbridge.plan import EchoOptions
from cloudai_mbridge.rules import TRAINING_RULES
from cloudai_mbridge.rules.base import show_value

OVERLAP = {"moe_a2a_overlap": True}
GB200 = {"gpu": "gb200", "num_nodes": 64, "gpus_per_node": 4}
# An ncclep arm as it can run: Megatron-Bridge 0.6(.2) with megatron-core 0.19, a capacity factor (H100, 8 GPUs)
NCCLEP = {"dispatcher": "ncclep", "bridge_version": "0.6", "moe_expert_rank_capacity_factor": 1.5}
# NVIDIA's Megatron-MoE-ModelZoo DeepSeek-V3 default split: pp 16, 4 layers on the first rank (and 1 on the last)
UNEVEN = {"model": "deepseek_v3", "tp": 1, "pp": 16, "vp": None, "ep": 16, "num_layers_in_first_pipeline_stage": 4}

# rule id -> (violating point, passing point); the passing one is as close to the violating one as we could make it.
CASES = {
    "node-shape": (seed_plan(gpus_per_node=16, num_nodes=16), seed_plan()),
    "world-size-model-parallel": (seed_plan(num_nodes=31), seed_plan()),
    "world-size-expert-parallel": (seed_plan(ep=64), seed_plan()),
    "global-batch": (seed_plan(gbs=258), seed_plan()),
    "experts-per-ep": (small_plan(ep=3, gpus_per_node=6, gbs=6), small_plan(ep=2, gpus_per_node=6, gbs=6)),
    "heads-per-tp": (small_plan(tp=3, ep=2, gpus_per_node=6), small_plan(tp=2, ep=2, gpus_per_node=6, gbs=6)),
    "sequence-parallel": (seed_plan(seq_length=4100), seed_plan(seq_length=4104)),
    "moe-tp-sequence-parallel": (seed_plan(sequence_parallel=False), seed_plan(sequence_parallel=False, tp=1)),
    "context-parallel": (seed_plan(cp=2, seq_length=4098), seed_plan(cp=2)),
    "distributed-optimizer-instances": (small_plan(ep=2, num_distributed_optimizer_instances=3),
                                        small_plan(ep=2, num_distributed_optimizer_instances=2)),
    "virtual-pipeline": (small_plan(vp=2), small_plan(vp=1)),
    "pipeline-layout-table": (seed_plan(pp=2), seed_plan(pp=4, vp=2)),
    "pipeline-layout": (seed_plan(pipeline_layout="Et*4|(t*4|)*14,ttL"),
                        seed_plan(pipeline_layout="Et*4|(t*4|)*14,tL")),
    "interleaved-microbatches": (seed_plan(gbs=48), seed_plan(gbs=64)),
    "a2a-overlap": (seed_plan(model="deepseek_v3", **OVERLAP, mtp_num_layers=2),
                    seed_plan(model="deepseek_v3", **OVERLAP)),
    "a2a-overlap-cuda-graph": (seed_plan(**OVERLAP, cuda_graph_impl="local", cuda_graph_scope=("full_iteration",)),
                               seed_plan(**OVERLAP, cuda_graph_impl="transformer_engine", cuda_graph_scope=("attn",))),
    "delay-wgrad": (seed_plan(delay_wgrad_compute=True), seed_plan(**OVERLAP, delay_wgrad_compute=True)),
    "optimizer-cpu-offload": (seed_plan(optimizer_cpu_offload=True),
                              seed_plan(optimizer_cpu_offload=True, precision_aware_optimizer=True)),
    "dispatcher-gpu": (seed_plan(dispatcher="deepep", **GB200), seed_plan(dispatcher="deepep")),
    "flex-dispatcher-ep": (small_plan(dispatcher="deepep", ep=1), small_plan(dispatcher="deepep", ep=8)),
    "dispatcher-bridge-release": (small_plan(**{**NCCLEP, "bridge_version": "0.5"}), small_plan(**NCCLEP)),
    "ncclep-capacity-factor": (small_plan(**{**NCCLEP, "moe_expert_rank_capacity_factor": None}),
                               small_plan(**NCCLEP)),
    "ncclep-limits": (small_plan(**NCCLEP, mbs=4, gbs=32), small_plan(**NCCLEP, mbs=2, gbs=16)),
    "ncclep-cuda-graph": (small_plan(**NCCLEP, cuda_graph_impl="local", cuda_graph_scope=("full_iteration",)),
                          small_plan(**NCCLEP, cuda_graph_impl="transformer_engine",
                                     cuda_graph_scope=("moe_router", "moe_preprocess"))),
    "ncclep-a2a-overlap-offload": (small_plan(**NCCLEP, **OVERLAP, offload_modules=("expert_fc1",)),
                                   small_plan(**NCCLEP, **OVERLAP, offload_modules=("moe_act",))),
    "deepep-network": (seed_plan(dispatcher="deepep", deepep_impl="nvidia"), seed_plan(dispatcher="deepep")),
    "hybridep-uccl": (seed_plan(dispatcher="hybridep"), seed_plan(dispatcher="hybridep", deepep_impl="nvidia")),
    "hybridep-nvlink-domain": (seed_plan(dispatcher="hybridep", deepep_impl="nvidia", tp=1, pp=1, vp=None, ep=96,
                                         **GB200),
                               seed_plan(dispatcher="hybridep", deepep_impl="nvidia", **GB200)),
    "shared-expert-overlap": (seed_plan(dispatcher="deepep", moe_shared_expert_overlap=True),
                              seed_plan(dispatcher="deepep")),
    "cpu-offloading": (small_plan(cpu_offloading_num_layers=1, recompute="full"),
                       small_plan(cpu_offloading_num_layers=1)),
    "cuda-graph": (small_plan(cuda_graph_impl="transformer_engine", cuda_graph_scope=("full_iteration",)),
                   small_plan(cuda_graph_impl="local", cuda_graph_scope=("full_iteration",))),
    "recompute-modules": (small_plan(recompute="selective", recompute_modules=("shared_experts",)),
                          small_plan(recompute="selective", recompute_modules=("shared_experts",),
                                     moe_shared_expert_overlap=False)),
    "megatron-fsdp": (small_plan(use_megatron_fsdp=True, optimizer="muon"), small_plan(use_megatron_fsdp=True)),
    "recipe062-fields": (small_plan(moe_paged_stash=True, moe_expert_rank_capacity_factor=1.5),
                         small_plan(moe_paged_stash=True, moe_expert_rank_capacity_factor=1.5, bridge_version="0.6")),
    "fp8-recipe-gpu": (small_plan(precision="mxfp8"), small_plan(precision="fp8_blockwise")),
    "muon-mxfp8-param-gather": (
        small_plan(model="kimi_k2_proxy", gpu="b200", optimizer="muon", precision="mxfp8", fp8_param_gather=True,
                   bridge_version="0.4"),
        small_plan(model="kimi_k2_proxy", gpu="b200", optimizer="muon", precision="mxfp8", bridge_version="0.4")),
    "echo-dispatcher": (small_plan(echo=EchoOptions(8)), small_plan(echo=EchoOptions(8), dispatcher="hybridep")),
    "echo-experts": (small_plan(echo=EchoOptions(6), dispatcher="hybridep"),
                     small_plan(echo=EchoOptions(16), dispatcher="hybridep")),
    "echo-grouped-gemm": (small_plan(echo=EchoOptions(8, device_initiated_grouped_gemm=True), dispatcher="hybridep",
                                     precision="fp8_blockwise"),
                          small_plan(echo=EchoOptions(8, device_initiated_grouped_gemm=True), dispatcher="hybridep",
                                     precision="mxfp8", gpu="b300")),
    "echo-cuda-graph": (small_plan(echo=EchoOptions(8), dispatcher="hybridep", cuda_graph_impl="local",
                                   cuda_graph_scope=("full_iteration",)),
                        small_plan(echo=EchoOptions(8, received_token_capacity=2.0), dispatcher="hybridep",
                                   cuda_graph_impl="local", cuda_graph_scope=("full_iteration",))),
    "memory": (seed_plan(mbs=32, gbs=1024), seed_plan(mbs=12, gbs=384)),  # does not fit / tight (runs)
    # megatron-core 0.19.2 transformer_config.py L1988-L2062; ModelZoo's DeepSeek-V3 default (pp 16, first 4, last 1)
    "uneven-pipeline": (seed_plan(**UNEVEN, num_layers_in_last_pipeline_stage=2),
                        seed_plan(**UNEVEN, num_layers_in_last_pipeline_stage=1)),
    "uneven-pipeline-pp": (small_plan(num_layers_in_first_pipeline_stage=2, num_layers_in_last_pipeline_stage=1),
                           small_plan(pp=2, ep=4, num_layers_in_first_pipeline_stage=2,
                                      num_layers_in_last_pipeline_stage=2)),
    "offload-optimizer-states": (small_plan(offload_optimizer_states=True), small_plan(optimizer_cpu_offload=True,
                                                                                     precision_aware_optimizer=True)),
    # megatron-core 0.19.2 transformer_config.py L1874-L1884 (issue 45)
    "offload-recompute-moe": (small_plan(recompute="selective", recompute_modules=("moe",),
                                         offload_modules=("moe_act",), bridge_version="0.6"),
                              small_plan(recompute="selective", recompute_modules=("moe",),
                                         offload_modules=("core_attn",), bridge_version="0.6")),
    # megatron-core 0.19.2 transformer_config.py L2634-L2642
    "offload-cuda-graph": (small_plan(cuda_graph_impl="full_iteration", offload_modules=("core_attn",),
                                      bridge_version="0.6"),
                           small_plan(cuda_graph_impl="full_iteration", offload_modules=("core_attn",),
                                      fine_grained_offloading_max_inflight_offloads=1, bridge_version="0.6")),
    "explicit-vp": (seed_plan(model="deepseek_v3", pp=8, vp=1, pipeline_layout="Et*4|(t*4|)*14tmL"),
                    seed_plan(model="deepseek_v3", pp=8, vp=2, pipeline_layout="Et*4|(t*4|)*14tmL")),
    "a2a-overlap-bridge-vp": (
        seed_plan(model="deepseek_v3", ep=32, pp=8, vp=None, moe_a2a_overlap=True, dispatcher="deepep",
                  pipeline_layout="Et*4|(t*4|)*14tmL"),
        seed_plan(model="deepseek_v3", ep=32, pp=8, vp=2, moe_a2a_overlap=True, dispatcher="deepep",
                  pipeline_layout="Et*4|(t*4|)*14tmL")),
}


def test_every_rule_has_a_case() -> None:
    assert set(CASES) == set(TRAINING_RULES.rules)


@pytest.mark.parametrize("rule_id", sorted(CASES))
def test_violating_point_is_rejected_by_that_rule(rule_id: str) -> None:
    bad, _ = CASES[rule_id]
    found = TRAINING_RULES.check(bad)
    mine = [v for v in found if v.rule == rule_id]
    assert mine, f"{rule_id} did not fire; got {[str(v) for v in found]}"
    for v in mine:
        text = str(v)
        assert text.startswith(f"[{rule_id}] ") and "Fix: " in text and v.fields and v.fix
        for name, value in v.fields.items():
            assert f"{name}={show_value(value)}" in text  # as the TOML writes it (true, "text", unset)


@pytest.mark.parametrize("rule_id", sorted(CASES))
def test_passing_point_passes_every_rule(rule_id: str) -> None:
    _, good = CASES[rule_id]
    assert [str(v) for v in TRAINING_RULES.check(good)] == []


def test_gb200_deepep_names_the_allowlist() -> None:
    (v,) = TRAINING_RULES.check(seed_plan(dispatcher="deepep", **GB200))
    assert v.rule == "dispatcher-gpu"
    assert "allowlist" in v.message and "NVIDIA GB200" in v.message and "fall back to alltoall" in v.message
    assert v.fields == {"dispatcher": "deepep", "gpu": "gb200", "compute_capability": "10.0", "bridge_version": "0.4"}


def test_mtp_two_with_overlap_is_rejected_but_zero_none_and_one_pass() -> None:
    # 0 is what the payload hands Megatron as None (megatron_mtp_layers): Megatron never sees a 0 to reject
    assert TRAINING_RULES.check(seed_plan(**OVERLAP, mtp_num_layers=0)) == []
    assert TRAINING_RULES.check(seed_plan(**OVERLAP)) == []  # Kimi-K2: None
    assert TRAINING_RULES.check(seed_plan(model="deepseek_v3", **OVERLAP)) == []  # DSV3: 1
    (v,) = TRAINING_RULES.check(seed_plan(model="deepseek_v3", **OVERLAP, mtp_num_layers=2))
    assert v.rule == "a2a-overlap" and "MTP layernum only supports 1" in v.message
    assert v.fields["mtp_num_layers"] == 2


def test_a2a_overlap_reports_each_reason() -> None:
    bad = seed_plan(**OVERLAP, vp=None, recompute="full", moe_shared_expert_overlap=True)
    messages = [v.message for v in TRAINING_RULES.check(bad) if v.rule == "a2a-overlap"]
    assert any("virtual pipeline" in m for m in messages)
    assert any("full activation recompute" in m for m in messages)
    assert any("shared-expert overlap" in m for m in messages)
    moe = seed_plan(**OVERLAP, recompute="selective", recompute_modules=("moe",))
    assert [v.rule for v in TRAINING_RULES.check(moe)] == ["a2a-overlap"]
    assert any(v.rule == "a2a-overlap" for v in TRAINING_RULES.check(seed_plan(**OVERLAP, ep=1)))
    mtp_pp1 = small_plan(model="deepseek_v3_proxy", ep=8, **OVERLAP)
    assert [v.message for v in TRAINING_RULES.check(mtp_pp1)] == ["a2a overlap with an MTP layer needs pipeline "
                                                                  "parallelism"]


def test_uccl_needs_efa_across_nodes() -> None:
    bad = seed_plan(dispatcher="deepep", network="ib")
    assert [v.rule for v in TRAINING_RULES.check(bad)] == ["deepep-network"]
    assert TRAINING_RULES.check(small_plan(dispatcher="deepep", deepep_impl="uccl")) == []  # one node: NVLink only


def test_cuda_graph_checks_follow_megatron() -> None:
    def rules(**kw: object) -> list[str]:
        return [v.message for v in TRAINING_RULES.check(small_plan(**kw)) if v.rule == "cuda-graph"]

    assert rules(cuda_graph_impl="local", cuda_graph_scope=("moe_preprocess",)) == []  # local adds moe_router
    assert rules(cuda_graph_impl="transformer_engine", cuda_graph_scope=("moe_preprocess",)) != []
    assert rules(cuda_graph_impl="transformer_engine", cuda_graph_scope=("moe",)) != []  # dropless
    assert rules(cuda_graph_impl="transformer_engine", cuda_graph_scope=("mlp",)) == []  # a dense first layer
    assert rules(cuda_graph_impl="local", cuda_graph_scope=("attn",), recompute="full") != []
    assert rules(cuda_graph_impl="transformer_engine", cuda_graph_scope=("moe_router",), recompute="selective",
                 recompute_modules=("moe",)) != []


def test_cpu_offloading_reports_pp_and_layer_count() -> None:
    bad = seed_plan(cpu_offloading_num_layers=61)
    messages = [v.message for v in TRAINING_RULES.check(bad) if v.rule == "cpu-offloading"]
    assert len(messages) == 2 and any("fewer than 61" in m for m in messages)


def test_deepep_allowlist_predicate_agrees_with_the_catalog() -> None:
    from cloudai_mbridge.catalog import GPUS
    from cloudai_mbridge.rules.training import cuda_device_name, deepep_allowed, hybridep_allowed

    for gpu in GPUS.values():
        assert deepep_allowed(gpu) == gpu.deepep, gpu.name
        assert hybridep_allowed(gpu) == gpu.hybridep, gpu.name
    assert cuda_device_name(GPUS["b300"]).startswith("NVIDIA B300")


def test_moe_with_tp_needs_sequence_parallel_only_when_tp_is_above_one() -> None:
    (v,) = TRAINING_RULES.check(seed_plan(sequence_parallel=False))
    assert v.rule == "moe-tp-sequence-parallel" and v.fields == {"tp": 8, "sequence_parallel": False}
    assert "moe-tp-sequence-parallel" not in {v.rule for v in TRAINING_RULES.check(small_plan(sequence_parallel=False))}


def test_explicit_vp_must_match_the_layout_but_unset_vp_is_derived() -> None:
    layout = "Et*4|(t*4|)*14,tL"  # 16 stages: vp 2 at pp 8
    assert TRAINING_RULES.check(seed_plan(pipeline_layout=layout, vp=None)) == []  # Megatron derives vp = 2
    assert TRAINING_RULES.check(seed_plan(pipeline_layout=layout, vp=2)) == []
    (v,) = TRAINING_RULES.check(seed_plan(pipeline_layout=layout, vp=4))
    assert v.rule == "pipeline-layout" and "vp=4 conflicts with the layout's 2 virtual stages" in v.message


def test_b300_deepep_depends_on_the_bridge_release() -> None:
    """Megatron-Bridge 0.3 matches the whole device name ('NVIDIA B300 SXM6 AC' is not 'NVIDIA B300'), 0.4 on the
    prefix: the same DeepEP arm is silently all-to-all in a 0.3 container and real DeepEP in a 0.4 one."""
    from dataclasses import replace

    from cloudai_mbridge.catalog import get_gpu
    from cloudai_mbridge.catalog.bridge import bridge_release

    plan = replace(seed_plan(dispatcher="deepep"), gpu=get_gpu("b300"))
    assert [v for v in TRAINING_RULES.check(plan) if v.rule == "dispatcher-gpu"] == []
    (v,) = [v for v in TRAINING_RULES.check(replace(plan, bridge_version="0.3")) if v.rule == "dispatcher-gpu"]
    assert "NVIDIA B300 SXM6 AC" in v.message and "Megatron-Bridge 0.3" in v.message and "equal to" in v.message
    assert v.fields["bridge_version"] == "0.3"
    assert bridge_release(None, "nvcr.io/nvidia/nemo:26.04.01").version == "0.4"
    assert bridge_release("0.6", "nvcr.io/nvidia/nemo:26.04.01").version == "0.6"  # the field wins
    with pytest.raises(ValueError, match="is not one of"):
        bridge_release("0.9")


# --------------------------------------------------------------------------------------------------------------
# ncclep
# --------------------------------------------------------------------------------------------------------------


def _ncclep_rules(**kw: object) -> list[str]:
    return [v.rule for v in TRAINING_RULES.check(small_plan(**{**NCCLEP, **kw}))]


def test_ncclep_is_a_flex_backend_of_bridge_06_only() -> None:
    from cloudai_mbridge.catalog.bridge import BRIDGE_RELEASES

    assert [v for v, r in BRIDGE_RELEASES.items() if r.takes_backend("ncclep")] == ["0.6"]
    for version in ("0.3", "0.4", "0.5"):
        (v,) = [v for v in TRAINING_RULES.check(small_plan(**{**NCCLEP, "bridge_version": version}))]
        assert v.rule == "dispatcher-bridge-release" and f"Megatron-Bridge {version}" in v.message
        assert 'bridge_version = "0.6"' in v.fix
    # deepep / hybridep are known to every release: never this rule
    for version in ("0.3", "0.4", "0.5", "0.6"):
        assert "dispatcher-bridge-release" not in _ncclep_rules(dispatcher="hybridep", bridge_version=version,
                                                                moe_expert_rank_capacity_factor=None)


def test_ncclep_gpu_allowlist_is_hopper_and_blackwell() -> None:
    from dataclasses import replace

    from cloudai_mbridge.catalog import GPUS, get_gpu
    from cloudai_mbridge.catalog.bridge import BRIDGE_RELEASES

    release = BRIDGE_RELEASES["0.6"]
    assert all(release.ncclep_allowed(g) for g in GPUS.values())  # H100 ... GB300: 9.x and 10.x
    ampere = replace(get_gpu("h100"), name="a100", compute_capability=(8, 0))
    assert not release.ncclep_allowed(ampere) and release.hybridep_allowed(ampere)
    bad = replace(small_plan(**NCCLEP), gpu=ampere)
    (v,) = TRAINING_RULES.check(bad)
    assert v.rule == "dispatcher-gpu" and "NCCL EP allowlist" in v.message and v.fields["compute_capability"] == "8.0"
    assert TRAINING_RULES.check(replace(bad, dispatcher="hybridep", moe_expert_rank_capacity_factor=None)) == []


def test_ncclep_needs_two_ranks() -> None:
    assert _ncclep_rules(ep=1) == ["flex-dispatcher-ep"]


def test_ncclep_capacity_factor_budget() -> None:
    """R = int(ceil64(s*b/(cp*tp)) x etp*k x cf); below tokens x k some rank receives more than R (pigeonhole)."""
    base = small_plan(**NCCLEP)  # kimi_k2_proxy: s 4096, tp 1 -> 4096 tokens per rank
    k = base.model.moe_router_topk
    assert base.ncclep_tokens_per_rank == 4096 and base.flex_topk == k
    assert base.ncclep_recv_capacity == int(4096 * k * 1.5)
    assert _ncclep_rules(moe_expert_rank_capacity_factor=1.0) == []
    (v,) = TRAINING_RULES.check(small_plan(**{**NCCLEP, "moe_expert_rank_capacity_factor": 0.9}))
    assert v.rule == "ncclep-capacity-factor" and "balanced share" in v.message and ">= 1" in v.fix
    # below one token per dispatched token: NCCL EP's HT group refuses it (recv >= dispatch)
    (v,) = TRAINING_RULES.check(small_plan(**{**NCCLEP, "moe_expert_rank_capacity_factor": 0.5 / k}))
    assert v.rule == "ncclep-capacity-factor" and "refuses to create the group" in v.message
    # tokens rounded up to NCCL EP's 64-token chunk: 4096 / 3 = 1365.3 -> 1366 tokens, 1408 dispatched
    odd = small_plan(**NCCLEP, tp=3, ep=2, gpus_per_node=6, gbs=6, model="deepseek_v3_proxy")
    assert odd.ncclep_tokens_per_rank == 1408


def test_ncclep_limits_each_reason() -> None:
    from dataclasses import replace

    from cloudai_mbridge.catalog import get_model

    def messages(plan) -> list[str]:
        return [v.message for v in TRAINING_RULES.check(plan) if v.rule == "ncclep-limits"]

    plan = small_plan(**NCCLEP)
    assert messages(plan) == []
    assert any("8192" in m for m in messages(small_plan(**NCCLEP, mbs=4, gbs=32)))  # 16384 tokens per rank
    wide = replace(plan, model=replace(get_model("kimi_k2_proxy"), hidden_size=16392))
    assert any("hidden sizes up to 16384" in m for m in messages(wide))
    odd = replace(plan, model=replace(get_model("kimi_k2_proxy"), hidden_size=1028))  # 2056-byte rows
    assert any("16 bytes" in m for m in messages(odd))
    assert any("top-k of at most 32" in m for m in messages(replace(plan, etp=8, ep=1)))
    many = replace(plan, model=replace(get_model("kimi_k2_proxy"), num_experts=4096), ep=2, gpus_per_node=2, gbs=2)
    assert any("at most 1024 experts per rank" in m for m in messages(many))
    # 2 ranks x 1 expert per rank in one NVLink team: 2 experts, not a multiple of 4
    few = replace(plan, model=replace(get_model("kimi_k2_proxy"), num_experts=2), ep=2, gpus_per_node=2, gbs=2)
    assert any("multiple of 4" in m for m in messages(few))


def test_ncclep_with_a2a_overlap_refuses_only_an_expert_fc1_offload() -> None:
    # Megatron-Core 0.19.2 transformer_config.py L2729-L2736; without the overlap, or with alltoall, it is taken
    assert _ncclep_rules(**OVERLAP, offload_modules=("core_attn", "expert_fc1")) == ["ncclep-a2a-overlap-offload"]
    assert _ncclep_rules(offload_modules=("expert_fc1",)) == []
    assert [v.rule for v in TRAINING_RULES.check(small_plan(**OVERLAP, offload_modules=("expert_fc1",)))] == []


def test_ncclep_full_iteration_graph_is_refused_but_layer_graphs_pass() -> None:
    assert _ncclep_rules(cuda_graph_impl="local", cuda_graph_scope=("full_iteration",)) == ["ncclep-cuda-graph"]
    assert _ncclep_rules(cuda_graph_impl="transformer_engine", cuda_graph_scope=("attn", "moe_router")) == []


def test_ncclep_with_a2a_overlap_and_fp8_passes() -> None:
    plan = seed_plan(model="deepseek_v3", gpu="b300", **NCCLEP, moe_a2a_overlap=True, precision="mxfp8",
                     deepep_impl="nvidia")
    assert [str(v) for v in TRAINING_RULES.check(plan)] == []


def test_a_device_name_maps_to_its_catalog_gpu_longest_key_first() -> None:
    # how a GPU host's runs name their GPU (gpu_dispatcher_ab.py, gpu_cloudai_ab_run.sh): the catalog, not a list
    from cloudai_mbridge.catalog.gpus import gpu_for_device_name

    assert gpu_for_device_name("NVIDIA H200") == "h200"
    assert gpu_for_device_name("NVIDIA H100 80GB HBM3") == "h100"
    assert gpu_for_device_name("NVIDIA GB200") == "gb200"  # not b200, which it also contains
    assert gpu_for_device_name("Tesla T4") is None
