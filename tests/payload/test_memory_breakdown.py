"""MBRIDGE_MEMORY_BREAKDOWN's optimizer walk on a real megatron-core ChainedOptimizer (what Megatron-Bridge builds at
EP > 1: one optimizer for the dense parameters, one for the experts).

Built on the CPU from the installed megatron-core: ``ChainedOptimizer`` itself is constructed normally (its __init__
needs no GPU); its members are real ``FP32Optimizer`` objects initialised through ``MegatronOptimizer.__init__``
only, because ``FP32Optimizer.__init__`` allocates its loss scale on CUDA (optimizer.py L907 in 0.16.1). The
properties the walk touches (``ChainedOptimizer.optimizer`` that asserts one member, ``state``, ``param_groups``)
are megatron-core's own."""

from __future__ import annotations

import warnings

import pytest

torch = pytest.importorskip("torch")
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    optimizer_mod = pytest.importorskip("megatron.core.optimizer.optimizer")
    from megatron.core.optimizer.optimizer_config import OptimizerConfig

from cloudai_mbridge.payload.train.bridge import memory_breakdown, optimizers_in  # noqa: E402


def _member(module: torch.nn.Module, config: OptimizerConfig):
    opt = optimizer_mod.FP32Optimizer.__new__(optimizer_mod.FP32Optimizer)
    optimizer_mod.MegatronOptimizer.__init__(opt, torch.optim.Adam(module.parameters()), config, lambda *_: None)
    opt.is_stub_optimizer = False
    return opt


@pytest.fixture
def chained():
    config = OptimizerConfig(lr=1e-3)
    dense, experts = torch.nn.Linear(8, 8), torch.nn.Linear(8, 4, bias=False)
    members = [_member(dense, config), _member(experts, config)]
    (dense(torch.ones(2, 8)).sum() + experts(torch.ones(2, 8)).sum()).backward()
    for m in members:
        m.optimizer.step()  # Adam's exp_avg / exp_avg_sq now exist
    return optimizer_mod.ChainedOptimizer(members), members, (dense, experts)


def test_the_property_really_asserts(chained):
    opt, _, _ = chained
    with pytest.raises(AssertionError, match="more than one optimizer"):
        getattr(opt, "optimizer", None)  # what memory_breakdown did before: the AssertionError seen at EP > 1


def test_walk_visits_every_member_and_never_the_chained_property(chained):
    opt, members, _ = chained
    found = optimizers_in(opt)
    assert found[0] is opt
    assert [o for o in found if isinstance(o, optimizer_mod.FP32Optimizer)] == members
    assert [o for o in found if isinstance(o, torch.optim.Adam)] == [m.optimizer for m in members]


def test_breakdown_counts_both_members_state(chained):
    opt, _, (dense, experts) = chained
    parts = memory_breakdown([], opt, device_type="cpu")
    n = sum(p.numel() for p in [*dense.parameters(), *experts.parameters()])
    # exp_avg and exp_avg_sq of every parameter of both optimizers, fp32; the params through param_groups
    assert parts["optimizer_state[exp_avg:torch.float32]"] == 4 * n
    assert parts["optimizer_state[exp_avg_sq:torch.float32]"] == 4 * n
    assert parts["optimizer_params[torch.float32]"] == 4 * n
    assert memory_breakdown([], opt) == {}  # CUDA only by default: nothing on this CPU


def test_a_single_member_chain_and_a_plain_optimizer(chained):
    _, members, _ = chained
    single = optimizer_mod.ChainedOptimizer(members[:1])
    assert optimizers_in(single)[1:] == [members[0], members[0].optimizer]
    assert optimizers_in(members[1]) == [members[1], members[1].optimizer]
    assert optimizers_in(members[1].optimizer) == [members[1].optimizer]
