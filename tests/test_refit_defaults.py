"""Every refit field left unset takes the value upstream gives it. One row per field: where we read it, the value (or
the rule) upstream gives it, and the upstream file:line that gives it; each row is asserted against what our test
definition (the TOML's reader, MBridgeRefitCmdArgs) and the payload (payload/refit/config.py, for a JSON written by
hand) actually produce for a point that leaves the field unset.

Upstream versions: megatron-core / Megatron-LM 0.19.2 (training/arguments.py, core/model_parallel_config.py,
core/inference/shards.py; 0.16.1's model_parallel_config.py L413-414 says the same for etp), and Megatron-LM's
examples/rl/benchmark_refit.py (the refit benchmark of seed 002).
"""

from __future__ import annotations

import pytest

from cloudai_mbridge.payload.refit.config import RefitConfig, derive_layouts, from_dict
from cloudai_mbridge.workloads.refit.test_definition import MBridgeRefitTestDefinition

SRC = {"tp": 4, "pp": 2, "ep": 2}  # a source that sets its sizes, for the rows that inherit from it
# field (where unset), what a point with it unset gets, upstream's value, upstream's line
TABLE = [
    ("src.tp", lambda s, d: s["tp"], lambda s: 1, "core/model_parallel_config.py:55 tensor_model_parallel_size = 1"),
    ("src.pp", lambda s, d: s["pp"], lambda s: 1, "core/model_parallel_config.py:83 pipeline_model_parallel_size = 1"),
    ("src.ep", lambda s, d: s["ep"], lambda s: 1, "core/model_parallel_config.py:127 expert_model_parallel_size = 1"),
    ("src.etp", lambda s, d: s["etp"] or s["tp"], lambda s: s["tp"],
     "training/arguments.py:569-570, core/model_parallel_config.py:506-507: expert_tensor_parallel_size None -> tp"),
    ("dst.tp", lambda s, d: d["tp"], lambda s: s["tp"],
     "training/arguments.py:2652 --rl-inference-tensor-model-parallel-size None; core/inference/shards.py:58 "
     "tp_size None -> training's; benchmark_refit.py: dst_tp = ... else src_tp"),
    ("dst.pp", lambda s, d: d["pp"], lambda s: s["pp"],
     "training/arguments.py:2655 --rl-inference-pipeline-model-parallel-size None; core/inference/shards.py:62"),
    ("dst.ep", lambda s, d: d["ep"], lambda s: s["ep"],
     "training/arguments.py:2661 --rl-inference-expert-model-parallel-size None; core/inference/shards.py:64"),
    ("dst.etp", lambda s, d: d["etp"], lambda s: s["etp"] or s["tp"],
     "training/arguments.py:2667-2672 --rl-inference-expert-tensor-model-parallel-size: 'Defaults to training "
     "expert_tensor_parallel_size'; core/inference/shards.py:66 expt_tp_size None -> training's"),
]
SCALARS = [  # field, upstream's value, upstream's line
    ("transport", "gloo", "training/arguments.py:2698 --refit-method default='gloo'"),
    ("warmup", 2, "examples/rl/benchmark_refit.py --num-benchmark-warmup default=2"),
    ("iterations", 10, "examples/rl/benchmark_refit.py --num-benchmark-iterations default=10"),
]


def _ours_toml(src: dict, dst: dict) -> tuple[dict, dict, dict]:
    tdef = MBridgeRefitTestDefinition.model_validate({
        "name": "d", "description": "d", "test_template_name": "MBridgeRefit",
        "cmd_args": {"model": "tiny_moe", "src": src, "dst": dst}})
    config = tdef.payload_config()
    return config["src"], config["dst"], config


def _ours_payload(src: dict, dst: dict) -> tuple[dict, dict, dict]:
    cfg = from_dict({"src": src, "dst": dst})
    config = cfg.to_dict()
    return config["src"], config["dst"], config


@pytest.mark.parametrize("read", [_ours_toml, _ours_payload], ids=["test-toml", "payload-json"])
@pytest.mark.parametrize(("field", "ours", "upstream", "line"), TABLE, ids=[row[0] for row in TABLE])
def test_an_unset_side_size_is_upstreams(read, field, ours, upstream, line) -> None:
    side, key = field.split(".")
    for src in ({}, SRC, {**SRC, "etp": 1}):
        src_cfg = {k: v for k, v in src.items() if not (side == "src" and k == key)}
        dst_cfg = {"tp": 8, "pp": 1, "ep": 4, "etp": 2}
        dst_cfg.pop(key) if side == "dst" else None
        got_src, got_dst, _ = read(src_cfg, dst_cfg)
        resolved_src = {**{"tp": 1, "pp": 1, "ep": 1, "etp": None}, **src_cfg}
        assert ours(got_src, got_dst) == upstream(resolved_src), (field, src_cfg, dst_cfg, line)


@pytest.mark.parametrize("read", [_ours_toml, _ours_payload], ids=["test-toml", "payload-json"])
@pytest.mark.parametrize(("field", "upstream", "line"), SCALARS, ids=[row[0] for row in SCALARS])
def test_an_unset_run_field_is_upstreams(read, field, upstream, line) -> None:
    assert read({}, {})[2][field] == upstream, line


def test_the_layout_that_runs_is_upstreams_for_a_kimi_k2_swap() -> None:
    """Seed 002's TP16/EP8 -> TP8/EP16 with the destination's etp left unset: upstream gives it the source's 16
    (shards.py builds expt_tp 16 x ep 16 = 256 ranks on 128: an assertion), so we refuse it too; with etp named, the
    world of each non-collocated side is tp*pp*ep as benchmark_refit.py counts it, whatever the etp."""
    src, dst = derive_layouts(from_dict({"src": {"tp": 8, "ep": 8, "etp": 1}, "dst": {"ep": 4},
                                         "mode": "non-collocated", "model": {"num_experts": 8}}), 96)
    assert (src.world, dst.world, dst.tp, dst.etp, dst.rank_offset) == (64, 32, 8, 1, 64)
    assert RefitConfig().dst.etp == 1


# Training sizes left unset (MBridgeTrainingCmdArgs): the value Megatron-Core gives them. etp is not here: ours is 1,
# the value Bridge's DeepSeek-V3 / Kimi-K2 recipes set, where Megatron-Core's own is tp (model_parallel_config.py
# L506-507); the refit side above follows Megatron-Core, the training side the recipes it runs.
TRAINING = [
    ("tp", 1, "core/model_parallel_config.py:55 tensor_model_parallel_size = 1"),
    ("pp", 1, "core/model_parallel_config.py:83 pipeline_model_parallel_size = 1"),
    ("vp", None, "core/model_parallel_config.py:86 virtual_pipeline_model_parallel_size = None"),
    ("cp", 1, "core/model_parallel_config.py:100 context_parallel_size = 1"),
    ("ep", 1, "core/model_parallel_config.py:127 expert_model_parallel_size = 1"),
]


@pytest.mark.parametrize(("field", "upstream", "line"), TRAINING, ids=[row[0] for row in TRAINING])
def test_an_unset_training_size_is_megatron_cores(field, upstream, line) -> None:
    from cloudai_mbridge.workloads.training.test_definition import MBridgeTrainingCmdArgs

    args = MBridgeTrainingCmdArgs.model_validate({"model": "tiny_moe"})
    assert getattr(args, field) == upstream, line
