"""Issue 31 item 5: the pipeline layout the plan checks (plan/layout.py) is the one the payload hands Megatron, for
every catalog model, every (pp, vp) of its recipe table, MTP on and off, and explicit layouts. The payload's layout
goes through Megatron-Core's own PipelineParallelLayerLayout (installed here) for its stages, vp and validation.

Megatron-Bridge is not installed here: for Kimi-K2's recipe entries the table is Kimi-K2's as Bridge ships it (no MTP
layer; recipes/kimi/kimi_k2.py _get_kimi_k2_pipeline_layout), built from the plan's decoder counts without an MTP
tail, and the payload's own step after it (with_mtp_tail) is what is compared. DeepSeek-V3's table is applied by
Bridge's helper on the provider, which this machine cannot run; its inputs (pp, vp, mtp_num_layers) are the
payload overrides checked in tests/payload/test_train_config.py.
"""

from __future__ import annotations

import warnings

import pytest

with warnings.catch_warnings():  # torch's own DeprecationWarning while megatron.core imports it
    warnings.simplefilter("ignore", DeprecationWarning)
    from megatron.core.transformer.pipeline_parallel_layer_layout import PipelineParallelLayerLayout

from cloudai_mbridge.catalog import MODELS, get_gpu, get_model
from cloudai_mbridge.launch.training import training_config
from cloudai_mbridge.payload.train import config as tc
from cloudai_mbridge.plan import TrainingPlan
from cloudai_mbridge.plan.layout import recipe_stages

EXPLICIT = {  # per model: layouts a test may write (valid and not)
    "deepseek_v3_proxy": ["Et|t*3,mL", "Et*2|t*2,mL", "Et|t|t|t,mL", "Et*4,mL", "Et*2|t*2,L"],
    "kimi_k2_proxy": ["Et|t*3,L", "Et|t|t|t,L", "Et*2|t*2,mL"],
    "tiny_moe": ["Et|t,L", "Et*2|L"],
    "deepseek_v3": ["Et*16|t*16|t*16|t*13,mL"],
    "kimi_k2": ["Et*16|t*16|t*16|t*13,L", "Et*16|t*16|t*16|t*13,mL"],
}


def cases():
    for name in MODELS:
        model = get_model(name)
        for mtp in (None, 0, 1):
            for pp, vp in sorted(model.recipe_pp_vp):
                yield name, pp, vp, None, mtp
            for layout in EXPLICIT.get(name, []):
                for pp in (1, 2, 4):
                    yield name, pp, None, layout, mtp


def payload_layout(cfg):
    """What the payload sets as pipeline_model_parallel_layout, or 'table' where Bridge's DSV3 helper decides."""
    source, layout = tc.pipeline_layout(cfg)
    if source != "recipe":
        return layout
    if cfg["model"]["name"] != "kimi_k2":
        return "table"
    table = recipe_stages(cfg["pp"], cfg["vp"], 0)  # Kimi-K2's table: no MTP layer
    return tc.with_mtp_tail(None if table is None else [list(s) for s in table], tc.megatron_mtp_layers(cfg))


@pytest.mark.parametrize(("name", "pp", "vp", "explicit", "mtp"), list(cases()))
def test_plan_and_payload_agree_on_the_layout(name, pp, vp, explicit, mtp) -> None:
    plan = TrainingPlan(model=get_model(name), gpu=get_gpu("h100"), num_nodes=64, gpus_per_node=8, pp=pp, vp=vp,
                        pipeline_layout=explicit, mtp_num_layers=mtp)
    cfg = tc.check_config({**training_config(plan, data="mock", seed=1, log_interval=1), "checkpoint_dir": None})
    layout = payload_layout(cfg)
    if layout == "table":
        pytest.skip("DeepSeek-V3's recipe layout is set by Megatron-Bridge's helper, not installed here")
    resolved = plan.pipeline
    if layout is None:
        assert resolved.layout is None and not resolved.problems
        return
    try:
        built = PipelineParallelLayerLayout(layout, pp)
        vp_megatron = tc.virtual_pipeline(cfg)
        assert vp_megatron is None or vp_megatron == built.virtual_pipeline_model_parallel_size
        built.validate_layer_layout(num_layers=cfg["model"]["num_layers"], mtp_num_layers=tc.megatron_mtp_layers(cfg))
    except (AssertionError, ValueError, NotImplementedError) as e:
        assert resolved.problems, f"Megatron-Core refuses the payload's layout ({e}) but the plan accepts it"
        return
    assert not resolved.problems, f"the plan refuses what Megatron-Core accepts: {resolved.problems}"
    by_rank = [[[t.name for t in stage] for stage in row] for row in built.layout]
    assert by_rank == [[list(stage) for stage in row] for row in resolved.layout.by_rank]
    assert built.virtual_pipeline_model_parallel_size == (plan.interleaved_vp if pp > 1 else resolved.layout.vp)
