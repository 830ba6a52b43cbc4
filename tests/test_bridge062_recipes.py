"""Megatron-Bridge 0.6.2's DeepSeek-V3 and Kimi-K2 perf recipes ship as conf/test/nvidia062_*.toml: each file holds
the values the released wheel's source gives (read with ast, tests/bridge062.py), and preflight accepts each on its
GPU's system file, except where upstream's own recipe cannot run (listed here with the reason)."""

from __future__ import annotations

import bridge062
import pytest
import tomllib
from helpers import CONF
from test_production_configs import preflight

# Recipes upstream itself cannot run, and the rule that says so.
UPSTREAM_CANNOT_RUN = {
    # perf_recipes/deepseek/h100/deepseek_v3.py: 64 GPUs with the 1024-GPU layout (ep 64 x pp 8 = 512 ranks)
    "dsv3_h100_bf16_64gpu": "world-size-expert-parallel",
    "dsv3_h100_fp8cs_64gpu": "world-size-expert-parallel",
    # perf_recipes/deepseek/gb300/deepseek_v3.py L425-L426: pp 4 x vp 2 = 8 stages against a 16-stage layout
    "dsv3_gb300_fp8mx_partial_cg_dev": "pipeline-layout",
    # perf_recipes/deepseek/gb200/deepseek_v3.py L254: the same pp 4 x vp 2 against the 16-stage layout
    "dsv3_gb200_fp8mx_partial_cg_dev": "pipeline-layout",
    # perf_recipes/deepseek/vr200/deepseek_v3.py L34-L240: 128 GPUs with ep 64 x pp 4 = 256 ranks
    **{f"dsv3_vr200_{v}_128gpu": "world-size-expert-parallel" for v in ("bf16", "fp8cs", "fp8mx", "nvfp4")},
}


@pytest.fixture(scope="session")
def recipes() -> dict[str, bridge062.Recipe]:
    try:
        return bridge062.recipes()
    except RuntimeError as e:  # no wheel and no PyPI: a failure that says how to fix it, never a skip
        pytest.fail(str(e))


def test_every_recipe_ships_and_matches_the_wheel(recipes: dict[str, bridge062.Recipe]) -> None:
    assert len(recipes) >= 50
    drift = []
    for r in recipes.values():
        path = CONF / "test" / f"{bridge062.toml_name(r)}.toml"
        assert path.is_file(), f"{r.name} has no {path.name}; run python tests/bridge062.py"
        doc = tomllib.loads(path.read_text())
        want, src = bridge062.cmd_args(r)
        for arg, value in want.items():
            if doc["cmd_args"].get(arg) != value:
                drift.append(f"{path.name}: {arg} = {doc['cmd_args'].get(arg)!r}, the wheel says {value!r} "
                             f"({r.where(src[arg])})")
        if doc.get("extra_env_vars", {}) != bridge062.env(r):
            drift.append(f"{path.name}: [extra_env_vars] differs from the recipe's env_vars")
    assert not drift, "\n".join(drift)


@pytest.mark.parametrize("gpu", bridge062.GPUS)
def test_preflight_accepts_each_062_recipe(tmp_path, gpu: str) -> None:
    _code, out, rows = preflight(tmp_path, CONF / "system" / f"{bridge062.SYSTEMS[gpu]}.toml",
                                CONF / "test_scenario" / f"nvidia062_{gpu}.toml")
    assert rows, out
    for r in rows:
        if r["test"] in UPSTREAM_CANNOT_RUN:
            assert r["verdict"] == "rejected" and r["rule"] == UPSTREAM_CANNOT_RUN[r["test"]], r
            continue
        assert r["verdict"] == "ok", (r["test"], r["reason_and_fix"])
        assert r["memory_verdict"] in ("fits", "tight"), (r["test"], r["memory_gib_per_gpu"])
        assert float(r["bridge_estimate_gib"]) > 0
