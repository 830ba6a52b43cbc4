"""Megatron-Bridge 0.6.2's DeepSeek-V3 and Kimi-K2 perf recipes ship as conf/test/nvidia062_*.toml: each file holds
the values the released wheel's source gives (read with ast, tests/bridge062.py), and preflight accepts each on its
GPU's system file, except where upstream's own recipe cannot run (listed here with the reason)."""

from __future__ import annotations

import bridge062
import pytest
import tomllib
from helpers import CONF
from test_production_configs import preflight

# Recipes upstream itself cannot run, with the rule that refuses them here (why, with Megatron-Core's source line:
# bridge062.UPSTREAM_CANNOT_RUN, which also writes it into each file's header).
UPSTREAM_CANNOT_RUN = {name: rule for name, (rule, _why) in bridge062.UPSTREAM_CANNOT_RUN.items()}


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
        drift += bridge062.drift(r, tomllib.loads(path.read_text()), path.name)
    assert not drift, "\n".join(drift)


def test_drift_names_file_field_both_values_and_the_recipe_line(recipes: dict[str, bridge062.Recipe]) -> None:
    """The comparison the drift test uses catches a changed value (here ep, and one env var) and says where."""
    r = recipes["deepseek_v3_pretrain_256gpu_gb300_fp8mx_config"]
    path = CONF / "test" / f"{bridge062.toml_name(r)}.toml"
    doc = tomllib.loads(path.read_text())
    assert bridge062.drift(r, doc, path.name) == []
    doc["cmd_args"]["ep"] = doc["cmd_args"]["ep"] * 2
    doc["extra_env_vars"] = {**doc["extra_env_vars"], "CUDA_DEVICE_MAX_CONNECTIONS": "7"}
    lines = bridge062.drift(r, doc, path.name)
    assert len(lines) == 2, lines
    want = r.values["model.expert_model_parallel_size"]
    assert lines[0].startswith(f"{path.name}: ep = {want * 2}, the wheel says {want} (perf_recipes/deepseek/gb300/"
                               "deepseek_v3.py L"), lines[0]
    assert lines[1].startswith(f"{path.name}: [extra_env_vars] = "), lines[1]


def test_each_refused_recipe_says_why_upstream_cannot_run_it() -> None:
    for name, (rule, why) in bridge062.UPSTREAM_CANNOT_RUN.items():
        head = (CONF / "test" / f"nvidia062_{name}.toml").read_text().split("\nname = ")[0]
        assert f"UPSTREAM CANNOT RUN THIS RECIPE as published; preflight refuses it (rule {rule})" in head, name
        assert "megatron/core/" in head and " ".join(head.split()).count(" ".join(why.split()[:6])) == 1, name


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
