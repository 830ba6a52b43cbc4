"""The ncclep backend's runtime side (payload/train/nccl_ep.py) and its config: checks, the capacity factor reaching
Megatron only for ncclep, and the num_topk bootstrap shim between megatron-core 0.19.2 and Transformer Engine 2.19+.

The fake modules below copy the real signatures: megatron-core 0.19.2 fused_a2a.py L617-L625
``ensure_nccl_ep_bootstrapped(ep_group, num_experts, max_tokens_per_rank, recv_capacity_per_rank, hidden_dim,
num_sms=0, zero_copy=False)`` and its call at L650-L658; transformer-engine 2.20.2 ep.py L102-L113 (``num_topk``
required) and 2.18.0 ep.py L90-L99 (no ``num_topk``); Megatron-LM main's helper takes ``num_topk``."""

from __future__ import annotations

import json
from types import ModuleType

import pytest
from test_train_config import make_cfg

from cloudai_mbridge.payload.train import config as tc
from cloudai_mbridge.payload.train import nccl_ep
from cloudai_mbridge.payload.train.log import DispatcherError

NCCLEP = {"dispatcher": "ncclep", "moe_expert_rank_capacity_factor": 1.5, "bridge_version": "0.6"}


def _te(with_topk: bool) -> ModuleType:
    mod = ModuleType("transformer_engine.pytorch.ep")
    mod.calls = []
    if with_topk:  # TE 2.19 / 2.20.2
        def ep_bootstrap(ep_group, num_experts, max_tokens_per_rank, hidden_dim, num_topk,
                         recv_capacity_per_rank=None, max_num_sms=0, zero_copy=False, drop_on_overflow=False,
                         max_token_dtype=None):
            mod.calls.append({"num_experts": num_experts, "num_topk": num_topk, "hidden_dim": hidden_dim,
                              "recv": recv_capacity_per_rank})
    else:  # TE 2.17 / 2.18
        def ep_bootstrap(ep_group, num_experts, max_tokens_per_rank, recv_capacity_per_rank, hidden_dim,
                         max_num_sms=0, zero_copy=False, max_token_dtype=None):
            mod.calls.append({"num_experts": num_experts, "hidden_dim": hidden_dim, "recv": recv_capacity_per_rank})
    mod.ep_bootstrap = ep_bootstrap
    return mod


def _fused_a2a(te_ep: ModuleType, passes_topk: bool) -> ModuleType:
    mod = ModuleType("megatron.core.transformer.moe.fused_a2a")
    if passes_topk:  # Megatron-LM main (#6229)
        def ensure_nccl_ep_bootstrapped(ep_group, num_experts, max_tokens_per_rank, recv_capacity_per_rank,
                                        hidden_dim, num_topk, num_sms=0, zero_copy=False):
            te_ep.ep_bootstrap(ep_group, num_experts=num_experts, max_tokens_per_rank=max_tokens_per_rank,
                               recv_capacity_per_rank=recv_capacity_per_rank, hidden_dim=hidden_dim,
                               num_topk=num_topk, max_num_sms=num_sms, zero_copy=zero_copy)
    else:  # megatron-core 0.19.2
        def ensure_nccl_ep_bootstrapped(ep_group, num_experts, max_tokens_per_rank, recv_capacity_per_rank,
                                        hidden_dim, num_sms=0, zero_copy=False):
            te_ep.ep_bootstrap(ep_group, num_experts=num_experts, max_tokens_per_rank=max_tokens_per_rank,
                               recv_capacity_per_rank=recv_capacity_per_rank, hidden_dim=hidden_dim,
                               max_num_sms=num_sms, zero_copy=zero_copy)
    mod.ensure_nccl_ep_bootstrapped = ensure_nccl_ep_bootstrapped
    return mod


def _bootstrap(fused_a2a: ModuleType) -> None:
    fused_a2a.ensure_nccl_ep_bootstrapped(object(), num_experts=64, max_tokens_per_rank=4096,
                                          recv_capacity_per_rank=49152, hidden_dim=2048)


def test_mcore_019_with_te_220_gets_num_topk_filled_in():
    te = _te(with_topk=True)
    a2a = _fused_a2a(te, passes_topk=False)
    with pytest.raises(TypeError, match="num_topk"):  # what a run would die of without the shim
        _bootstrap(a2a)
    assert nccl_ep.needs_topk_shim(te, a2a)
    assert nccl_ep.bootstrap_compat(te, a2a, 8) == "num_topk=8"
    assert nccl_ep.bootstrap_compat(te, a2a, 8) == "num_topk=8"  # idempotent: not wrapped twice
    _bootstrap(a2a)
    assert te.calls == [{"num_experts": 64, "num_topk": 8, "hidden_dim": 2048, "recv": 49152}]
    assert te.ep_bootstrap.__name__ == "ep_bootstrap"


@pytest.mark.parametrize(("te_topk", "mcore_topk"), [(False, False), (True, True)])
def test_matching_pairs_are_left_alone(te_topk, mcore_topk):
    te = _te(with_topk=te_topk)
    original = te.ep_bootstrap
    a2a = _fused_a2a(te, passes_topk=mcore_topk)
    assert not nccl_ep.needs_topk_shim(te, a2a)
    assert nccl_ep.bootstrap_compat(te, a2a, 8) == "native"
    assert te.ep_bootstrap is original


def test_topk_is_the_expert_tp_folded_one():
    cfg = tc.check_config(make_cfg(**NCCLEP, etp=2))
    assert nccl_ep.nccl_ep_topk(cfg) == 2 * cfg["model"]["moe_router_topk"]


def test_missing_te_ep_stops_the_run_before_building():
    nccl_ep.check_te_ep(ModuleType("ep"), None)
    with pytest.raises(DispatcherError, match=r"transformer_engine.pytorch.ep.*ModuleNotFoundError"):
        nccl_ep.check_te_ep(None, "ModuleNotFoundError: No module named 'transformer_engine'")


def test_nccl_ep_line():
    te = ModuleType("ep")
    te.__file__ = "/usr/lib/python3/site-packages/transformer_engine/pytorch/ep.py"
    assert nccl_ep.nccl_ep_line(te, "2.20.2", "num_topk=8") == (
        "MBRIDGE_NCCL_EP module=/usr/lib/python3/site-packages/transformer_engine/pytorch/ep.py te=2.20.2 "
        "bootstrap=num_topk=8")
    assert nccl_ep.nccl_ep_line(None, "", "native") == "MBRIDGE_NCCL_EP module=none te=unknown bootstrap=native"


# --- config ----------------------------------------------------------------------------------------------------------


def test_capacity_factor_reaches_megatron_only_for_ncclep():
    cfg = tc.check_config(make_cfg(**NCCLEP))
    assert cfg["moe_expert_rank_capacity_factor"] == 1.5
    assert tc.bridge_overrides(cfg)["model.moe_expert_rank_capacity_factor"] == 1.5
    # the same factor in the alltoall / deepep / hybridep arms of an A/B: recorded, never handed to Megatron (0.19
    # refuses it outside hybridep/ncclep; with hybridep it would drop tokens)
    for other in ("alltoall", "deepep", "hybridep"):
        cfg = tc.check_config(make_cfg(**{**NCCLEP, "dispatcher": other}))
        assert cfg["moe_expert_rank_capacity_factor"] == 1.5
        assert "model.moe_expert_rank_capacity_factor" not in tc.bridge_overrides(cfg)
    # unset: the key is not written at all (a config for Bridge 0.4 has no such field)
    raw = make_cfg()
    assert "moe_expert_rank_capacity_factor" not in raw
    assert "model.moe_expert_rank_capacity_factor" not in tc.bridge_overrides(tc.check_config(raw))


def test_ncclep_config_needs_a_finite_positive_capacity_factor():
    raw = make_cfg(**NCCLEP)
    for bad in (None, 0, -1.0, "1.5", True, float("inf")):
        broken = json.loads(json.dumps({**raw, "moe_expert_rank_capacity_factor": bad}))
        with pytest.raises(tc.ConfigError, match="moe_expert_rank_capacity_factor"):
            tc.check_config(broken)
    tc.check_config({**raw, "moe_expert_rank_capacity_factor": 2})  # an int is a number


def test_mcore_engine_refuses_ncclep():
    (problem,) = tc.mcore_unsupported(tc.check_config(make_cfg(**NCCLEP)))
    assert "dispatcher = 'ncclep'" in problem and "engine = 'bridge'" in problem


def test_dispatcher_enumeration_has_ncclep():
    from cloudai_mbridge.plan import DISPATCHERS, FLEX_DISPATCHERS
    from cloudai_mbridge.workloads.training.test_definition import Dispatcher

    assert "ncclep" in tc.DISPATCHERS and "ncclep" in FLEX_DISPATCHERS and DISPATCHERS == tc.DISPATCHERS
    assert set(Dispatcher.__args__) == set(DISPATCHERS)


# --- torch's custom-op dispatch of mutated arguments left at their defaults -------------------------------------------


def test_mutated_default_ops_are_routed_to_their_python_body():
    """TE 2.20.2's ep.py defines ops like ``prepare_and_dispatch`` whose mutated ``recv_scale_inv`` defaults to None;
    on torch 2.11 the dispatcher's ADInplaceOrView kernel dies on them (module docstring). The bypass is exercised
    here on real custom ops: only the op with a mutated default is rerouted, and it then runs with the default."""
    torch = pytest.importorskip("torch")
    calls = []

    def prep(h, out=None):
        calls.append(("prep", out))

    def comb(h, res):
        calls.append(("comb", None))

    te = ModuleType("fake_te_ep")
    te._prep = torch.library.custom_op("mbridge_test_ep::prep", prep, mutates_args=("out",),
                                       schema="(Tensor h, Tensor(a!)? out=None) -> ()")
    te._comb = torch.library.custom_op("mbridge_test_ep::comb", comb, mutates_args=("res",),
                                       schema="(Tensor h, Tensor(a!) res) -> ()")
    assert nccl_ep.bypass_mutated_default_ops(torch, te) == ["prep"]
    assert torch.ops.mbridge_test_ep.prep is prep
    assert torch.ops.mbridge_test_ep.comb is not comb  # still the dispatcher's
    torch.ops.mbridge_test_ep.prep(torch.zeros(1))
    torch.ops.mbridge_test_ep.comb(torch.zeros(1), torch.zeros(1))
    assert calls == [("prep", None), ("comb", None)]


def test_a_torch_that_fills_defaults_gets_no_shim():
    torch = pytest.importorskip("torch")
    fills = hasattr(getattr(torch._library, "utils", None), "fill_defaults")
    assert nccl_ep.torch_drops_mutated_defaults(torch) is (not fills)
    if fills:
        assert nccl_ep.torch_op_shim(torch, ModuleType("no_ops")) == "none"
