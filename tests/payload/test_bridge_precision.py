"""The bridge engine's precision step keeps what the test set: the preset replaces the recipe's mixed-precision config,
then every ``mixed_precision.*`` field of the test is set again on it (before, FP8 attention and FP8 param gather were
set on the recipe's config and then replaced by the preset's defaults without a word). With Muon and MXFP8, the
preset's param gather and gradient-buffer reuse are switched off, as upstream's Kimi-K2 MXFP8 configs do.

Megatron-Bridge imports Transformer Engine, which cannot load on this CPU machine: its preset module is a stand-in
returning what 0.6.2's training/mixed_precision.py presets set (bf16_with_mxfp8_mixed L255-L266:
fp8_param_gather and reuse_grad_buf_for_mxfp8_param_ag True)."""

from __future__ import annotations

import sys
import types
from types import SimpleNamespace

import pytest

from cloudai_mbridge.catalog import get_gpu, get_model
from cloudai_mbridge.launch.training import training_config
from cloudai_mbridge.payload.train import bridge
from cloudai_mbridge.payload.train import config as tc
from cloudai_mbridge.plan import TrainingPlan


def _preset(name: str) -> SimpleNamespace:
    mx = name == "bf16_with_mxfp8_mixed"
    return SimpleNamespace(preset=name, fp8="e4m3", fp8_recipe="mxfp8" if mx else "tensorwise", fp8_param=False,
                           fp8_param_gather=mx, reuse_grad_buf_for_mxfp8_param_ag=mx,
                           fp8_dot_product_attention=False, grad_reduce_in_fp32=True)


@pytest.fixture
def presets(monkeypatch: pytest.MonkeyPatch) -> None:
    mod = types.ModuleType("megatron.bridge.training.mixed_precision")
    mod.get_mixed_precision_config = _preset
    for name in ("megatron", "megatron.bridge", "megatron.bridge.training"):
        monkeypatch.setitem(sys.modules, name, sys.modules.get(name) or types.ModuleType(name))
    monkeypatch.setitem(sys.modules, mod.__name__, mod)


def _container(cfg: dict) -> SimpleNamespace:
    """The recipe's container with the test's overrides set on it, as build_container does before the precision."""
    recipe_mixed = SimpleNamespace(grad_reduce_in_fp32=False, fp8_param=False, fp8_param_gather=False,
                                   reuse_grad_buf_for_mxfp8_param_ag=False, fp8_dot_product_attention=False)
    container = SimpleNamespace(mixed_precision=recipe_mixed)
    bridge.set_fields(container, {k: v for k, v in tc.bridge_overrides(cfg).items()
                                  if k.startswith("mixed_precision.")})
    return container


def _cfg(**plan) -> dict:
    """The payload config the generator writes for a Kimi-K2 proxy point on 8 B200s (Bridge 0.6)."""
    p = TrainingPlan(model=get_model("kimi_k2_proxy"), gpu=get_gpu("b200"), num_nodes=1, gpus_per_node=8, ep=8,
                     gbs=16, bridge_version="0.6", **plan)
    return tc.check_config(training_config(p, engine="bridge", data="mock", hf_model_id=None, checkpoint_dir=None,
                                           seed=1234, log_interval=1, output_dir="/results/run"))


def test_fp8_fields_the_test_sets_survive_the_preset(presets: None) -> None:
    cfg = _cfg(precision="fp8_tensorwise", fp8_param_gather=True, fp8_dot_product_attention=True)
    container = _container(cfg)
    bridge._apply_precision(cfg, container, report=lambda line: None)
    m = container.mixed_precision
    assert m.preset == "bf16_with_fp8_current_scaling_mixed"
    assert (m.fp8_param_gather, m.fp8_param, m.fp8_dot_product_attention) == (True, True, True)
    assert m.grad_reduce_in_fp32 is False  # the recipe's, not the preset's


@pytest.mark.parametrize(("optimizer", "off"), [("muon", True), ("adam", False)])
def test_muon_with_mxfp8_turns_the_param_gather_off(presets: None, optimizer: str, off: bool) -> None:
    cfg = _cfg(precision="mxfp8", optimizer=optimizer)
    lines: list[str] = []
    container = _container(cfg)
    bridge._apply_precision(cfg, container, report=lines.append)
    m = container.mixed_precision
    assert (m.fp8_param_gather, m.reuse_grad_buf_for_mxfp8_param_ag) == ((False, False) if off else (True, True))
    assert len(lines) == (2 if off else 0)
    assert all(line.startswith("MBRIDGE_PROVIDER mixed_precision.") and "Muon" in line for line in lines)
