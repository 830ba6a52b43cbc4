"""One predicate per concept (issue 45, item 5): every spelling Megatron-Bridge accepts for one setting gets the same
verdict from every rule.

For each question several rules ask (plan/predicates.py), the spellings Bridge treats alike are enumerated and every
rule of TRAINING_RULES runs on each spelling, across contexts that make the rules asking it fire (a2a overlap,
recompute, dispatchers, Megatron FSDP, Echo, offloading); the verdicts (which rules refuse) must be the same.
"""

from __future__ import annotations

import itertools
from dataclasses import replace

import pytest

from cloudai_mbridge.plan import EchoOptions
from cloudai_mbridge.plan.predicates import full_iteration_graph, optimizer_distributed
from cloudai_mbridge.rules.training import TRAINING_RULES
from tests.rules.rules_support import small_plan

# Bridge 0.6.2 utils/cuda_graph.py L121-L131 is_full_iteration_cuda_graph; megatron-core 0.19.2
# transformer/cuda_graph_config.py L11 (scope full_iteration -> impl full_iteration), L107-L116 (either impl)
FULL_ITERATION = [{"cuda_graph_impl": "full_iteration", "cuda_graph_scope": ()},
                  {"cuda_graph_impl": "local", "cuda_graph_scope": ("full_iteration",)},
                  {"cuda_graph_impl": "full_iteration", "cuda_graph_scope": ("full_iteration",)}]
# megatron-core 0.17.1 transformer_config.py L1969-L1978 (0.19.2 L2472-L2481): the local implementation captures
# moe_router and moe_preprocess together, whichever the scope names (a per-layer local graph: bridge_version 0.4)
LOCAL_ROUTER = [{"cuda_graph_impl": "local", "cuda_graph_scope": ("moe_router",)},
                {"cuda_graph_impl": "local", "cuda_graph_scope": ("moe_router", "moe_preprocess")},
                {"cuda_graph_impl": "local", "cuda_graph_scope": ("moe_preprocess", "moe_router", "moe_router")}]
# Bridge 0.6.2 training/config.py L1073-L1077: "Megatron-FSDP always uses a distributed optimizer"
FSDP_OPTIMIZER = [{"use_megatron_fsdp": True, "use_distributed_optimizer": True},
                  {"use_megatron_fsdp": True, "use_distributed_optimizer": False}]
# Megatron reads recompute_modules as a set (transformer_config.py: ``"moe" in self.recompute_modules``)
MOE_RECOMPUTE = [{"recompute": "selective", "recompute_modules": ("moe",)},
                 {"recompute": "selective", "recompute_modules": ("moe", "moe")}]


def _contexts(bridge_version: str):
    """Settings beside the spelled one that make the rules asking the question decide something."""
    axes = {
        "moe_a2a_overlap": [False, True],
        "recompute": ["none", "full", "selective"],
        "dispatcher": ["alltoall", "ncclep", "hybridep"],
        "use_megatron_fsdp": [False, True],
        "echo": [None, EchoOptions(8), EchoOptions(8, received_token_capacity=2.0)],
        "cpu_offloading_num_layers": [0, 1],
    }
    for values in itertools.product(*axes.values()):
        ctx = dict(zip(axes, values, strict=True))
        if ctx["dispatcher"] == "ncclep":
            ctx["moe_expert_rank_capacity_factor"] = 2.0
        if ctx["recompute"] == "selective":
            ctx["recompute_modules"] = ("mla_up_proj",)
        yield {**ctx, "bridge_version": bridge_version, "vp": None, "memory_check": "off"}


def _verdicts(**fields) -> frozenset[str]:
    return frozenset(v.rule for v in TRAINING_RULES.check(small_plan(**fields)))


def _same_verdicts(spellings: list[dict], contexts) -> set[str]:
    """Asserts each context's verdicts are the same for every spelling; returns the rules that fired anywhere."""
    fired: set[str] = set()
    for ctx in contexts:
        verdicts = [_verdicts(**{**ctx, **s}) for s in spellings]
        assert all(v == verdicts[0] for v in verdicts), (ctx, dict(zip(map(str, spellings), verdicts, strict=True)))
        fired |= verdicts[0]
    return fired


def test_full_iteration_graph_spellings_get_one_verdict() -> None:
    plans = [small_plan(bridge_version="0.6", **s) for s in FULL_ITERATION]
    assert all(full_iteration_graph(p) for p in plans)
    fired = _same_verdicts(FULL_ITERATION, _contexts("0.6"))
    # the rules asking "is this a full-iteration graph" decided something in these contexts
    assert {"cpu-offloading", "ncclep-cuda-graph", "echo-cuda-graph", "a2a-overlap"} <= fired, fired


def test_a_per_layer_graph_is_not_a_full_iteration_one() -> None:
    """The contexts above can tell the difference: a Transformer Engine graph is refused where a full-iteration one
    is not (FSDP under 0.6, full recompute)."""
    te = {"cuda_graph_impl": "transformer_engine", "cuda_graph_scope": ("attn",), "bridge_version": "0.6",
          "memory_check": "off"}
    assert "megatron-fsdp" in _verdicts(**te, use_megatron_fsdp=True)
    assert "megatron-fsdp" not in _verdicts(**FULL_ITERATION[1], use_megatron_fsdp=True, bridge_version="0.6",
                                            memory_check="off")
    assert "cuda-graph" in _verdicts(**te, recompute="full")
    for spelling in FULL_ITERATION:
        assert "cuda-graph" not in _verdicts(**spelling, recompute="full", bridge_version="0.6", memory_check="off")


def test_hsdp_recipe_written_with_a_local_full_iteration_graph_is_accepted() -> None:
    """Bridge 0.6.0's GB300 HSDP recipe spelled its graph cuda_graph_impl = "local" + scope full_iteration; 0.6.2's
    spells it "full_iteration": megatron-fsdp accepts both (it used to accept only the second)."""
    hsdp = {"use_megatron_fsdp": True, "num_distributed_optimizer_instances": 2, "outer_dp_sharding_strategy": "optim",
            "bridge_version": "0.6", "memory_check": "off"}
    for spelling in FULL_ITERATION:
        assert "megatron-fsdp" not in _verdicts(**hsdp, **spelling)


def test_local_router_graph_spellings_get_one_verdict() -> None:
    fired = _same_verdicts(LOCAL_ROUTER, [{**c, "bridge_version": "0.4"} for c in _contexts("0.4")
                                         if not c["use_megatron_fsdp"] and c["dispatcher"] != "ncclep"])
    assert "a2a-overlap-cuda-graph" in fired and "cpu-offloading" in fired, fired


@pytest.mark.parametrize("bridge_version", ["0.4", "0.6"])
def test_fsdp_optimizer_spellings_get_one_verdict(bridge_version: str) -> None:
    assert all(optimizer_distributed(small_plan(**s)) for s in FSDP_OPTIMIZER)
    contexts = [{"num_distributed_optimizer_instances": n, "bridge_version": bridge_version, "memory_check": check}
                for n in (1, 2, 3) for check in ("reject", "off")]
    fired = _same_verdicts(FSDP_OPTIMIZER, contexts)
    assert "distributed-optimizer-instances" in fired, fired  # 3 instances do not divide dp = 8


def test_moe_recompute_spellings_get_one_verdict() -> None:
    contexts = [{**c, "recompute": "selective"} for c in _contexts("0.6") if c["recompute"] == "selective"]
    offload = [{**c, "offload_modules": ("expert_fc1",)} for c in contexts]
    graphs = [replace_ctx(c, cuda_graph_impl="transformer_engine", cuda_graph_scope=("moe_router",)) for c in contexts]
    fired = _same_verdicts(MOE_RECOMPUTE, [*offload, *graphs])
    assert {"a2a-overlap", "cuda-graph"} <= fired, fired


def replace_ctx(ctx: dict, **changes) -> dict:
    return {**ctx, **changes}


def test_predicates_read_the_plan_not_a_copy() -> None:
    """A plan changed after construction answers for its new values (the predicates keep no state)."""
    p = small_plan(bridge_version="0.6")
    assert not full_iteration_graph(p)
    assert full_iteration_graph(replace(p, cuda_graph_impl="full_iteration"))


@pytest.mark.parametrize("spelling", FULL_ITERATION)
def test_the_payload_asks_the_same_question(spelling: dict) -> None:
    """Bridge 0.6.2's validate() refuses either spelling while the loss is checked for NaN (training/config.py
    L1370-L1374): the payload switches the check off for each, as the rules read them."""
    from cloudai_mbridge.launch.training import training_config
    from cloudai_mbridge.payload.train.config import bridge_overrides, check_config

    job = {"data": "mock", "seed": 1, "log_interval": 1}
    cfg = check_config(training_config(small_plan(bridge_version="0.6", **spelling), **job))
    assert bridge_overrides(cfg)["rerun_state_machine.check_for_nan_in_loss"] is False
    none = check_config(training_config(small_plan(bridge_version="0.6"), **job))
    assert "rerun_state_machine.check_for_nan_in_loss" not in bridge_overrides(none)
