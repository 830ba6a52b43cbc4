"""NVIDIA DeepEP over NVSHMEM's libfabric transport on EFA (deepep_impl = "nvidia_efa"; issue 45): AWS built and
measured it (aws-samples/awsome-distributed-training micro-benchmarks/expert-parallelism/deepep-benchmark/README.md at
fd3d76d), so a multi-node deepep point on EFA with it is accepted, runs with NVSHMEM's libfabric transport, and the
payload stops a run whose deep_ep or transport is not that build's."""

from __future__ import annotations

import types

import pytest
from rules_support import seed_plan

from cloudai_mbridge.launch.training import network_env
from cloudai_mbridge.payload.train.log import DispatcherError, check_deep_ep
from cloudai_mbridge.rules.training import TRAINING_RULES


def _rules(p) -> set[str]:
    return {v.rule for v in TRAINING_RULES.check(p)}


def test_nvidia_deepep_over_libfabric_crosses_nodes_on_efa() -> None:
    efa = {"dispatcher": "deepep", "network": "efa", "memory_check": "off"}  # seed 000: 32 x 8 B300 on EFA
    assert "deepep-network" in _rules(seed_plan(**efa, deepep_impl="nvidia"))
    assert "deepep-network" not in _rules(seed_plan(**efa, deepep_impl="nvidia_efa"))
    assert "deepep-network" not in _rules(seed_plan(**efa, deepep_impl="uccl"))
    ib = {**efa, "network": "ib"}
    assert "deepep-network" in _rules(seed_plan(**ib, deepep_impl="nvidia_efa"))
    message = next(v for v in TRAINING_RULES.check(seed_plan(**efa, deepep_impl="nvidia"))
                   if v.rule == "deepep-network")
    assert "nvidia_efa" in message.fix and "uccl" in message.fix


def test_the_job_selects_nvshmems_libfabric_transport() -> None:
    env = network_env(seed_plan(dispatcher="deepep", network="efa", deepep_impl="nvidia_efa"))
    assert env["NVSHMEM_REMOTE_TRANSPORT"] == "libfabric" and env["NVSHMEM_LIBFABRIC_PROVIDER"] == "efa"
    assert env["FI_PROVIDER"] == "efa"
    for impl, dispatcher in (("uccl", "deepep"), ("nvidia_efa", "alltoall")):
        assert "NVSHMEM_REMOTE_TRANSPORT" not in network_env(seed_plan(dispatcher=dispatcher, network="efa",
                                                                       deepep_impl=impl))


def _module(provider: str) -> types.ModuleType:
    m = types.ModuleType("deep_ep")
    m.__file__ = f"/site-packages/{provider}/deep_ep/__init__.py"
    if provider == "uccl":
        m.initialize_uccl = lambda: None
    else:
        m.Buffer = object
    return m


def test_the_payload_checks_the_build_and_its_transport() -> None:
    libfabric = {"NVSHMEM_REMOTE_TRANSPORT": "libfabric"}
    check_deep_ep("deepep", "nvidia_efa", _module("nvidia"), None, libfabric)
    with pytest.raises(DispatcherError, match="NVSHMEM_REMOTE_TRANSPORT = 'ibrc'"):
        check_deep_ep("deepep", "nvidia_efa", _module("nvidia"), None, {"NVSHMEM_REMOTE_TRANSPORT": "ibrc"})
    with pytest.raises(DispatcherError, match="gives the uccl one"):
        check_deep_ep("deepep", "nvidia_efa", _module("uccl"), None, libfabric)
    check_deep_ep("deepep", "nvidia", _module("nvidia"), None, {})
