"""Published DeepSeek-V3 / Kimi-K2 configurations, expressible as written (issue 45, item 3).

The survey's test files (conf/test/modelzoo_*, nemorl_*, aws_*: NVIDIA's Megatron-MoE-ModelZoo launch configs,
NeMo-RL's DeepSeek-V3 GRPO recipes, AWS's Kimi-K2 dispatcher A/B with NVIDIA DeepEP over NVSHMEM's libfabric
transport) each cite their source (repository, path, commit, line) and sit in one conf/test_scenario/survey_<gpu>.toml.
Each scenario goes through the real CLI's preflight on its GPU's system: every point is accepted, or refused only by
the rule its test file declares (expected_rejections) -- a flag no release has, or the memory of a benchmark default
NVIDIA did not run as is. The surveyed settings reach Megatron as the payload hands them over.
"""

from __future__ import annotations

import csv
import io
import re
from pathlib import Path

import pytest
import tomllib
from cloudai.core import TestRun
from helpers import CONF, run_cli

from cloudai_mbridge.launch.training import network_env, training_config
from cloudai_mbridge.payload.train.config import bridge_overrides, check_config, pipeline_layout
from cloudai_mbridge.rules.training import TRAINING_RULES
from cloudai_mbridge.workloads.training.test_definition import MBridgeTrainingTestDefinition
from tests.rules.rules_support import seed_plan

SURVEY = {"h100": "slurm_h100_ib", "b200": "slurm_b200_ib", "gb200": "slurm_gb200_nvl72",
          "gb300": "slurm_gb300_nvl72", "b300_efa": "slurm_b300_efa"}
PREFIXES = ("modelzoo_", "nemorl_", "aws_")


def _survey_tests() -> list[Path]:
    return sorted(p for p in (CONF / "test").glob("*.toml") if p.name.startswith(PREFIXES))


def _cmd_args(name: str) -> dict:
    return tomllib.loads((CONF / "test" / f"{name}.toml").read_text())["cmd_args"]


def test_every_surveyed_config_names_its_source_and_is_in_a_survey_scenario() -> None:
    files = _survey_tests()
    assert len(files) >= 12
    for path in files:
        header = "\n".join(line for line in path.read_text().splitlines() if line.startswith("#"))
        assert "Source:" in header and re.search(r"[0-9a-f]{40}", header), f"{path.name}: no source commit"
        assert re.search(r"\bL\d+", header), f"{path.name}: no source line"
    used = set()
    for gpu in SURVEY:
        scenario = tomllib.loads((CONF / "test_scenario" / f"survey_{gpu}.toml").read_text())
        used |= {t["test_name"] for t in scenario["Tests"]}
    assert used == {p.stem for p in files}


@pytest.mark.parametrize("gpu", sorted(SURVEY))
def test_the_surveyed_configs_pass_preflight_as_written(tmp_path: Path, gpu: str) -> None:
    out = tmp_path / "out"
    proc = run_cli("preflight", "--system-config", str(CONF / "system" / f"{SURVEY[gpu]}.toml"), "--test-scenario",
                   str(CONF / "test_scenario" / f"survey_{gpu}.toml"), "--output-dir", str(out), cwd=tmp_path)
    output = proc.stdout + proc.stderr
    assert "Traceback" not in output
    rows = list(csv.DictReader(io.StringIO((out / "preflight.csv").read_text())))
    assert rows, output
    scenario = tomllib.loads((CONF / "test_scenario" / f"survey_{gpu}.toml").read_text())
    names = {t["id"]: t["test_name"] for t in scenario["Tests"]}
    for row in rows:
        declared = _cmd_args(names[row["test"]]).get("expected_rejections", "")
        if declared:  # refused, and only by the rule the file declares (named in the output)
            assert row["verdict"] != "ok", row
            assert f"[{declared}]" in output, output
        else:
            assert row["verdict"] == "ok", (row, output)
            assert row["memory_verdict"] in ("fits", "tight"), row


def _plan(name: str, system: str, num_nodes: int):
    from cloudai.parser import Parser

    from cloudai_mbridge.registration import register

    register()
    data = tomllib.loads((CONF / "test" / f"{name}.toml").read_text())
    data["cmd_args"] = {k: v[0] if isinstance(v, list) else v for k, v in data["cmd_args"].items()}
    tdef = MBridgeTrainingTestDefinition.model_validate(data)
    tr = TestRun(name=name, test=tdef, num_nodes=num_nodes, nodes=[], output_path="/nonexistent/out",
                 time_limit="01:00:00")
    return tdef.plan(tr, Parser.parse_system(CONF / "system" / f"{system}.toml"))


def _megatron(plan) -> dict:
    return bridge_overrides(check_config(training_config(plan, data="mock", seed=1, log_interval=1)))


def test_uneven_stages_reach_megatron_with_no_layout_and_shape_the_memory_plan() -> None:
    """NeMo-RL's DeepSeek-V3 GRPO: first 7, last 6 layers at pp 8 (8 on each middle rank)."""
    plan = _plan("nemorl_dsv3_h100_256gpu_grpo", "slurm_h100_ib", 32)
    cfg = check_config(training_config(plan, data="mock", seed=1, log_interval=1))
    seen = bridge_overrides(cfg)
    assert seen["model.num_layers_in_first_pipeline_stage"] == 7
    assert seen["model.num_layers_in_last_pipeline_stage"] == 6
    assert pipeline_layout(cfg) == ("uneven", None)  # the recipe's (pp, vp) table is not applied beside them
    decoders = [sum(stage.count("decoder") for stage in row) for row in plan.pipeline.layout.by_rank]
    assert decoders == [7, 8, 8, 8, 8, 8, 8, 6]


def test_the_libfabric_deepep_build_reaches_the_job() -> None:
    plan = _plan("aws_kimi_k2_b300_efa_nvidia_deepep_ab", "slurm_b300_efa", 32)
    plan = type(plan)(**{**plan.__dict__, "dispatcher": "deepep"}) if plan.dispatcher != "deepep" else plan
    env = network_env(plan)
    assert env["NVSHMEM_REMOTE_TRANSPORT"] == "libfabric" and env["FI_PROVIDER"] == "efa"
    assert "deepep-network" not in {v.rule for v in TRAINING_RULES.check(plan)}


def test_optimizer_offload_and_graph_settings_reach_megatron() -> None:
    offload = _megatron(_plan("modelzoo_dsv3_h100_256gpu_32k_optimizer_offload", "slurm_h100_ib", 32))
    assert offload["optimizer.optimizer_cpu_offload"] is True and offload["optimizer.use_precision_aware_optimizer"]
    assert offload["optimizer.overlap_cpu_optimizer_d2h_h2d"] is True
    graphs = _megatron(_plan("modelzoo_dsv3_gb300_128gpu_hybridep", "slurm_gb300_nvl72", 32))
    assert graphs["model.cuda_graph_warmup_steps"] == 0
    assert graphs["model.cuda_graph_scope"] == ["attn", "moe_router", "moe_preprocess"]


def test_a_long_context_kimi_k2_point_fits_with_the_optimizer_offload() -> None:
    """The ModelZoo long-context shape (32k tokens, TP8 PP8 VP4 EP32, 256 H100, optimizer CPU offload) on Kimi-K2:
    without the offload the memory verdict refuses it (100.7 of 79.6 GiB); with it, which Megatron-LM allows only with
    the precision-aware optimizer (Kimi-K2's recipe switches that off, use_precision_aware_optimizer turns it on),
    the estimate counts the optimizer state on the host and accepts it."""
    shape = {"model": "kimi_k2", "gpu": "h100", "num_nodes": 32, "network": "ib", "tp": 8, "pp": 8, "vp": 4,
             "ep": 32, "mbs": 1, "gbs": 1920, "seq_length": 32768, "pipeline_layout": "Et*2|(tt|)*22t|(tt|)*7L",
             "dispatcher": "deepep", "deepep_impl": "nvidia", "precision": "fp8_blockwise", "recompute": "selective",
             "recompute_modules": ("mla_up_proj", "moe", "mlp", "layernorm"), "bridge_version": "0.6"}
    offload = {"optimizer_cpu_offload": True, "overlap_cpu_optimizer_d2h_h2d": True}

    def refused(**kw) -> set[str]:
        return {v.rule for v in TRAINING_RULES.check(seed_plan(**shape, **kw))}

    assert refused() == {"memory"}
    assert refused(**offload) == {"optimizer-cpu-offload"}  # the recipe's optimizer is not precision-aware
    assert refused(**offload, precision_aware_optimizer=True, use_precision_aware_optimizer=True) == set()
