"""plan/bridge_estimate.py: Megatron-Bridge 0.6.2's estimate_training_memory for NVIDIA's DeepSeek-V3 configurations.

The expected bytes come from a separate pure-Python port of the same function (``estimate_v062`` in the research
notes behind conf/test/nvidia_dsv3_*.toml), which was run side by side with the real
``megatron/bridge/training/utils/theoretical_memory_utils.py`` (Megatron-Bridge v0.6.0 = the 0.6.2 wheel, torch and
ConfigContainer stubbed) on all 47 DeepSeek-V3 configurations of Bridge 0.4.2's scripts/performance and agreed to a
relative difference of 0. Its inputs: kv_channels 64 (transformers' DeepseekV3Config head_dim = qk_rope_head_dim),
num_query_groups 128, vocabulary 129280 unpadded, one MTP layer, num_microbatches = GBS / (MBS * DP). The GiB totals
in the comments are the ones the research table prints for the same configurations.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from cloudai_mbridge.catalog import get_gpu, get_model
from cloudai_mbridge.plan import TrainingPlan
from cloudai_mbridge.plan.bridge_estimate import BridgeEstimate, bridge_estimate

DSV3_PARAMETERS = 685_388_290_048.0  # the real 0.6.2 code's total_parameters for DeepSeek-V3 (671 B + the MTP layer)


def dsv3(gpu: str, gpus: int, **kw: object) -> TrainingPlan:
    """One of NVIDIA's DeepSeek-V3 configurations as the test TOMLs run it (conf/test/nvidia_dsv3_*.toml)."""
    g = get_gpu(gpu)
    args: dict = dict(model=get_model("deepseek_v3"), gpu=g, num_nodes=gpus // g.gpus_per_node,
                      gpus_per_node=g.gpus_per_node, seq_length=4096, recompute="selective",
                      dispatcher="hybridep", force_balanced_routing=True, precision_aware_optimizer=True)
    args.update(kw)
    return TrainingPlan(**args)  # type: ignore[arg-type]


# name -> (plan, dense_bytes, routed_bytes, activation_bytes, total_bytes)
CASES = {
    # DEEPSEEK_V3_PRETRAIN_CONFIG_H100_BF16_V1: TP2 PP8 VP4 EP64, layout Et|(tt|)*30mL, GBS 8192 -> 53.15 GiB
    "H100_BF16_V1": (
        dsv3("h100", 1024, tp=2, pp=8, vp=4, ep=64, mbs=1, gbs=8192, pipeline_layout="Et|(tt|)*30mL",
             recompute_modules=("mla_up_proj", "mlp")),
        9963926280.0, 15590227968.0, 31519567872.0, 57073722120.0,
    ),
    # GB300_FP8_CS_V1 (= FP8_MX_V1): TP1 PP2 VP8 EP32, MBS 2, layout Et*4|(t*4|)*14tmL, GBS 2048 -> 246.47 GiB
    "GB300_FP8_CS_V1": (
        dsv3("gb300", 256, pp=2, vp=8, ep=32, mbs=2, gbs=2048, pipeline_layout="Et*4|(t*4|)*14tmL",
             recompute_modules=("mla_up_proj",), precision="fp8_tensorwise"),
        61562810400.0, 93541367808.0, 109539631104.0, 264643809312.0,
    ),
    # B300_BF16_V2: TP1 PP8 EP8, no VP (recipe table (8, 1)), MBS 2, GBS 4096 -> 202.58 GiB
    "B300_BF16_V2": (
        dsv3("b300", 256, pp=8, ep=8, mbs=2, gbs=4096, recompute_modules=("mla_up_proj",),
             cuda_graph_impl="transformer_engine", cuda_graph_scope=("attn", "moe_router", "moe_preprocess")),
        20531726880.0, 93541367808.0, 103448838144.0, 217521932832.0,
    ),
    # B200_FP8_MX_V2: TP1 PP8 VP2 EP32, DeepEP with a2a overlap, recipe table (8, 2), GBS 4096 -> 131.93 GiB
    "B200_FP8_MX_V2": (
        dsv3("b200", 256, pp=8, vp=2, ep=32, mbs=1, gbs=4096, dispatcher="deepep", moe_a2a_overlap=True,
             recompute_modules=("mla_up_proj", "mlp"), precision="mxfp8"),
        20531726880.0, 46770683904.0, 74353852416.0, 141656263200.0,
    ),
    # H100_FP8_SC_V2: TP2 PP8 VP2 EP64, recipe table (8, 2), GBS 16384 -> 58.42 GiB
    "H100_FP8_SC_V2": (
        dsv3("h100", 1024, tp=2, pp=8, vp=2, ep=64, mbs=1, gbs=16384, recompute_modules=("mla_up_proj", "mlp"),
             precision="fp8_blockwise"),
        9963926280.0, 15590227968.0, 37176926208.0, 62731080456.0,
    ),
    # B200_BF16_V1: TP1 PP16 EP8, recipe table (16, 1), GBS 2048 -> 119.51 GiB
    "B200_BF16_V1": (
        dsv3("b200", 256, pp=16, ep=8, mbs=1, gbs=2048, recompute_modules=("mla_up_proj",)),
        13997279520.0, 62360911872.0, 51959562240.0, 128317753632.0,
    ),
    # GB200_BF16_V1: TP1 PP4 VP4 EP64, recipe table (4, 4), GBS 2048 -> 132.41 GiB
    "GB200_BF16_V1": (
        dsv3("gb200", 256, pp=4, vp=4, ep=64, mbs=1, gbs=2048, recompute_modules=("mla_up_proj",)),
        34121878560.0, 46770683904.0, 61283131392.0, 142175693856.0,
    ),
    # not an NVIDIA configuration: PP 1 (both embeddings on every rank, the output-layer activation term) and an
    # expert optimizer group of 1 (dp * tp / ep = 8 * 8 / 64): estimate_v062(tp=8, pp=1, ep=64, dp=8, mbs=1, nmb=8)
    "DSV3_TP8_PP1_EP64": (
        dsv3("h100", 64, tp=8, ep=64, mbs=1, gbs=64),
        18942403200.0, 187082735616.0, 6719279104.0, 212744417920.0,
    ),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_equals_bridge_for_nvidia_configurations(name: str) -> None:
    plan, dense, routed, activations, total = CASES[name]
    est = bridge_estimate(plan)
    assert est is not None
    assert est.dense_and_embedding == pytest.approx(dense, rel=1e-12)
    assert est.routed_experts == pytest.approx(routed, rel=1e-12)
    assert est.weights_and_optimizer == pytest.approx(dense + routed, rel=1e-12)
    assert est.activations == pytest.approx(activations, rel=1e-12)
    assert est.total == pytest.approx(total, rel=1e-12)
    assert est.total_parameters == DSV3_PARAMETERS
    assert est.kv_channels == 64


def test_kimi_k2_without_mtp() -> None:
    # estimate_v062 with Kimi-K2's inputs (64 heads and query groups, 384 experts, one dense layer, vocabulary
    # 163840, no MTP layer): TP1 PP8 VP2 EP32 on 256 B200, MBS 1, GBS 4096
    g = get_gpu("b200")
    plan = TrainingPlan(model=get_model("kimi_k2"), gpu=g, num_nodes=32, gpus_per_node=8, pp=8, vp=2, ep=32,
                        mbs=1, gbs=4096, recompute="selective", dispatcher="hybridep")
    est = bridge_estimate(plan)
    assert est is not None
    assert est.total_parameters == 1027239241728.0
    assert est.dense_and_embedding == pytest.approx(15618470112.0, rel=1e-12)
    assert est.routed_experts == pytest.approx(71345111040.0, rel=1e-12)
    assert est.activations == pytest.approx(73160048640.0, rel=1e-12)
    assert est.total == pytest.approx(160123629792.0, rel=1e-12)


def test_vp_comes_from_an_explicit_layout() -> None:
    """Megatron-Core sets virtual_pipeline_model_parallel_size from a layout with several stages per rank, so the
    H100 layout without vp gives the same (interleaved) estimate as with vp = 4."""
    plan, *_ = CASES["H100_BF16_V1"]
    assert bridge_estimate(dataclasses.replace(plan, vp=None)) == bridge_estimate(plan)


def test_report_line_is_what_bridge_prints() -> None:
    h100 = bridge_estimate(CASES["H100_BF16_V1"][0])
    b300 = bridge_estimate(CASES["B300_BF16_V2"][0])
    assert isinstance(h100, BridgeEstimate) and isinstance(b300, BridgeEstimate)
    # TP 2 with sequence parallelism and selective recompute: all three terms
    assert h100.activation_reported
    assert h100.report_line() == ("Theoretical memory footprints: weight and optimizer=24370.34 MB, "
                                  "activation=30059.40 MB, total=54429.74 MB")
    # TP 1: no sequence parallelism, so Bridge prints weights and optimizer only
    assert not b300.activation_reported
    assert b300.report_line() == "Theoretical memory footprints: weight and optimizer=108788.58 MB"


def test_precision_and_recompute_modules_do_not_change_it() -> None:
    plan, *_ = CASES["GB300_FP8_CS_V1"]
    other = dataclasses.replace(plan, precision="mxfp8", recompute_modules=("moe_act",))
    assert bridge_estimate(other) == bridge_estimate(plan)


@pytest.mark.parametrize("change", [
    {"transformer_impl": "local"},  # the mcore engine: no Megatron-Bridge in the loop
    {"num_nodes": 3},  # 24 GPUs: tp * pp = 16 does not divide the world size
    {"gbs": 8100},  # 8100 is not a multiple of mbs * dp = 64
    {"vp": 2},  # the layout has 4 virtual stages per rank: Megatron-Core's VP/layout assert
])
def test_none_where_bridge_never_reports(change: dict) -> None:
    plan, *_ = CASES["H100_BF16_V1"]
    assert bridge_estimate(plan) is not None
    assert bridge_estimate(dataclasses.replace(plan, **change)) is None


def test_which_estimate_to_trust_is_what_the_gpu_records_say() -> None:
    """plan/bridge_estimate.py MEASURED_ERRORS (the line preflight prints) recomputed from the recorded bridge-engine
    GPU runs with today's estimates: when the estimate changes, the stated errors must change with it."""
    import json

    from gpu_memory import bridge_errors, make_plan

    from cloudai_mbridge.plan.bridge_estimate import MEASURED_ERRORS, trust_note
    from cloudai_mbridge.plan.memory import estimate_memory

    results = Path(__file__).resolve().parent.parent / "benchmarks" / "results" / "bridge"
    errs: dict[str, list[float]] = {"ours": [], "bridge": [], "alloc": []}
    for name in ("bridge_train_memory.json", "bridge_0.6.2_train_memory.json"):
        for config in json.loads((results / name).read_text())["configs"]:
            if "measured" not in config:
                continue
            plan = make_plan(config["name"], 4)
            e = bridge_errors(plan, estimate_memory(plan).total, config["measured"])
            errs["ours"].append(e["ours_device_error_pct"])
            errs["bridge"].append(e["bridge_device_error_pct"])
            errs["alloc"].append(e["bridge_max_alloc_error_pct"])
    span = {k: (round(min(v), 1), round(max(v), 1)) for k, v in errs.items()}
    assert MEASURED_ERRORS["runs"] == len(errs["ours"])
    assert MEASURED_ERRORS["ours_vs_device_peak_pct"] == span["ours"]
    assert MEASURED_ERRORS["bridge_vs_device_peak_pct"] == span["bridge"]
    assert MEASURED_ERRORS["bridge_vs_max_allocated_pct"] == span["alloc"]
    assert max(abs(x) for x in span["ours"]) < min(abs(x) for x in span["bridge"]), "ours no longer the closer one"
    assert "trust mem/GPU" in trust_note()
