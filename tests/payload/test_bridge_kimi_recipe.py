"""The bridge engine's Kimi-K2 recipe handling across Megatron-Bridge releases. Megatron-Bridge imports Transformer
Engine, which cannot load on this CPU machine, so the Kimi recipe module is a stand-in shaped like the real ones
(0.4.2 recipes/kimi/kimi_k2.py: kimi_k2_pretrain_config(optimizer_type); 0.6.2 the alias module: a builder without
arguments that configures Muon, plus _apply_kimi_k2_optimizer and _get_kimi_k2_pipeline_layout)."""

from __future__ import annotations

import sys
import types
from typing import Any

import pytest

from cloudai_mbridge.payload.train import bridge
from cloudai_mbridge.payload.train.config import ConfigError


def fake_kimi(monkeypatch: pytest.MonkeyPatch, release: str) -> list[Any]:
    calls: list[Any] = []
    mod = types.ModuleType(bridge.KIMI_RECIPE)
    if release == "0.4":
        def build(optimizer_type: str = "muon"):
            calls.append(("build", optimizer_type))
            return types.SimpleNamespace(optimizer=optimizer_type)
    else:
        def build():
            calls.append(("build", None))
            return types.SimpleNamespace(optimizer="muon")

        def apply(cfg, optimizer_type):
            calls.append(("apply", optimizer_type))
            cfg.optimizer = optimizer_type

        mod._apply_kimi_k2_optimizer = apply

    def layout(pp, vp):
        if (pp, vp) != (2, 8):
            raise ValueError(f"Invalid PP and VP size: {pp} and {vp}")
        return [["embedding", "decoder"], ["decoder", "loss"]]

    mod.kimi_k2_pretrain_config = build
    mod._get_kimi_k2_pipeline_layout = layout
    monkeypatch.setitem(sys.modules, bridge.KIMI_RECIPE, mod)
    monkeypatch.setattr(bridge, "_kimi_recipe_available", lambda: True)
    return calls


@pytest.mark.parametrize("release", ["0.4", "0.6"])
@pytest.mark.parametrize("optimizer", ["adam", "muon"])
def test_kimi_trains_the_optimizer_the_test_names(monkeypatch: pytest.MonkeyPatch, release: str,
                                                  optimizer: str) -> None:
    fake_kimi(monkeypatch, release)
    recipe, container = bridge._recipe_container({"model": {"name": "kimi_k2"}, "optimizer": optimizer})
    assert recipe == "kimi_k2" and container.optimizer == optimizer


def test_a_kimi_recipe_that_cannot_switch_refuses_adam(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_kimi(monkeypatch, "0.6")
    del sys.modules[bridge.KIMI_RECIPE]._apply_kimi_k2_optimizer
    with pytest.raises(ConfigError, match="trains Muon"):
        bridge._recipe_container({"model": {"name": "kimi_k2"}, "optimizer": "adam"})


def test_kimi_layout_comes_from_kimis_own_table(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_kimi(monkeypatch, "0.6")
    cfg = {"model": {"name": "kimi_k2", "is_proxy": False, "num_layers": 61}, "pipeline_layout": None, "pp": 2,
           "vp": 8, "mtp_num_layers": None}
    model_cfg = types.SimpleNamespace(pipeline_model_parallel_layout="stale")
    bridge._apply_layout(cfg, model_cfg, "kimi_k2")
    assert model_cfg.pipeline_model_parallel_layout == [["embedding", "decoder"], ["decoder", "loss"]]
    with pytest.raises(ConfigError, match=r"Kimi-K2 recipe has no pipeline layout for \(pp, vp\) = \(4, 8\)"):
        bridge._apply_layout({**cfg, "pp": 4}, model_cfg, "kimi_k2")
