"""What NVIDIA ships is accepted; the system decides the GPU; memory_check is the user's way past a refusal.

Every DeepSeek-V3 and Kimi-K2 configuration of Megatron-Bridge 0.4.2's performance scripts (conf/test/nvidia_dsv3_*.toml
and conf/test/nvidia_kimi_k2_*.toml, one scenario per GPU) goes through the real CLI's preflight on its system file:
each point must be accepted with a memory verdict of fits or tight, and the table carries the estimate's band and
Megatron-Bridge's own estimate."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest
import tomllib
from helpers import CONF, dry_run, run_cli, write_case

NVIDIA = [("h100", "slurm_h100_ib"), ("b200", "slurm_b200_ib"), ("b300", "slurm_b300_ib"),
          ("gb200", "slurm_gb200_nvl72"), ("gb300", "slurm_gb300_nvl72")]


def preflight(tmp: Path, system: Path, scenario: Path) -> tuple[int, str, list[dict[str, str]]]:
    proc = run_cli("preflight", "--system-config", str(system), "--test-scenario", str(scenario), "--output-dir",
                   str(tmp / "out"), cwd=tmp)
    csv_path = tmp / "out" / "preflight.csv"
    rows = list(csv.DictReader(io.StringIO(csv_path.read_text()))) if csv_path.exists() else []
    return proc.returncode, proc.stdout + proc.stderr, rows


# Megatron-Bridge 0.4.2 has Kimi-K2 perf configurations for these GPUs only (kimi_workload_base_configs.py: no B300)
KIMI = [(gpu, system) for gpu, system in NVIDIA if gpu != "b300"]
# Bridge config names per GPU (KIMI_K2_PRETRAIN_CONFIG_<GPU>_<PRECISION>), one scenario entry each
KIMI_NAMES = {"h100": 3, "b200": 3, "gb200": 3, "gb300": 4}


def assert_accepted(tmp: Path, gpu: str, system: str, scenario: str) -> list[dict[str, str]]:
    code, out, rows = preflight(tmp, CONF / "system" / f"{system}.toml", CONF / "test_scenario" / f"{scenario}.toml")
    assert code == 0, out
    assert rows and all(r["verdict"] == "ok" for r in rows), out
    assert all(r["memory_verdict"] in ("fits", "tight") for r in rows), out
    assert all(r["memory_band_pct"] and float(r["bridge_estimate_gib"]) > 0 for r in rows)
    capacity = {"h100": "80", "b200": "178", "b300": "268", "gb200": "184", "gb300": "268"}[gpu]
    assert all(r["memory_gib_per_gpu"].endswith(f"/{capacity}") for r in rows)
    return rows


@pytest.mark.parametrize(("gpu", "system"), NVIDIA)
def test_nvidias_configurations_are_accepted(tmp_path: Path, gpu: str, system: str) -> None:
    assert_accepted(tmp_path, gpu, system, f"nvidia_dsv3_{gpu}")


@pytest.mark.parametrize(("gpu", "system"), KIMI)
def test_nvidias_kimi_k2_configurations_are_accepted(tmp_path: Path, gpu: str, system: str) -> None:
    rows = assert_accepted(tmp_path, gpu, system, f"nvidia_kimi_k2_{gpu}")
    assert len(rows) == KIMI_NAMES[gpu]


def test_every_kimi_k2_test_file_is_in_its_gpus_scenario() -> None:
    """So the preflight above covers every conf/test/nvidia_kimi_k2_*.toml, each on its own GPU's system."""
    files = {p.stem for p in (CONF / "test").glob("nvidia_kimi_k2_*.toml")}
    used: set[str] = set()
    for gpu, _ in KIMI:
        scenario = tomllib.loads((CONF / "test_scenario" / f"nvidia_kimi_k2_{gpu}.toml").read_text())
        names = {t["test_name"] for t in scenario["Tests"]}
        assert all(n.startswith(f"nvidia_kimi_k2_{gpu}_") for n in names), names
        used |= names
    assert files and used == files


def test_a_test_for_another_gpu_is_refused_on_this_system(tmp_path: Path) -> None:
    """dsv3_dispatcher_ab says gpu = "b300"; on the 8 x H100 system it used to answer 'ok 137.7/268'."""
    result = dry_run(CONF / "system" / "slurm_h100_ib.toml", CONF / "test_scenario" / "dsv3_dispatcher_ab.toml",
                     tmp_path)
    assert result.returncode == 1
    assert "[system-gpu] the test says gpu = 'b300' but system 'slurm-h100-ib' is h100" in result.output
    assert "Traceback" not in result.output and not result.output_dir.exists()


NO_GPU_TEST = ('name = "case"\ndescription = "d"\ntest_template_name = "MBridgeTraining"\n[cmd_args]\n'
               'model = "kimi_k2"\ntp = 8\npp = 8\nvp = 2\nep = 32\ngbs = 256\ntrain_iters = 24\n')
SCENARIO = 'name = "case"\n[[Tests]]\nid = "case"\ntest_name = "case"\nnum_nodes = 32\ntime_limit = "02:00:00"\n'


def test_a_test_without_gpu_takes_the_systems(tmp_path: Path) -> None:
    _, scenario = write_case(tmp_path / "conf", NO_GPU_TEST, SCENARIO)
    code, out, rows = preflight(tmp_path, CONF / "system" / "slurm_b300_efa.toml", scenario)
    assert code == 0 and rows[0]["memory_gib_per_gpu"].endswith("/268"), out


def test_no_gpu_anywhere_says_where_to_name_it(tmp_path: Path) -> None:
    system = tmp_path / "system.toml"
    text = (CONF / "system" / "slurm_b300_efa.toml").read_text()
    system.write_text("\n".join(ln for ln in text.splitlines() if not ln.startswith("CLOUDAI_MBRIDGE_GPU")) + "\n")
    _, scenario = write_case(tmp_path / "conf", NO_GPU_TEST, SCENARIO)
    code, out, _ = preflight(tmp_path, system, scenario)
    assert code == 1 and "[system-gpu] no GPU model" in out and "CLOUDAI_MBRIDGE_GPU" in out, out


OVER = NO_GPU_TEST.replace("gbs = 256", "gbs = 1024\nmbs = 32")  # about 460 of 268 GiB


@pytest.mark.parametrize("check", ["reject", "warn", "off"])
def test_memory_check_decides_and_is_recorded(tmp_path: Path, check: str) -> None:
    test = OVER + ("" if check == "reject" else f'memory_check = "{check}"\n')
    _, scenario = write_case(tmp_path / "conf", test, SCENARIO)
    result = dry_run(CONF / "system" / "slurm_b300_efa.toml", scenario, tmp_path)
    if check == "reject":
        assert result.returncode == 1 and "[memory] estimated peak memory does not fit" in result.output
        assert 'memory_check = \\"warn\\"' in result.output or 'memory_check = "warn"' in result.output
        return
    assert result.returncode == 0, result.output
    assert ("memory does not fit (memory_check" in result.output) == (check == "warn")
    (config,) = result.output_dir.rglob("mbridge_config.json")
    memory = json.loads(config.read_text())["memory"]
    assert memory["check"] == check and memory["verdict"] == "does not fit"
    assert memory["estimate"].endswith(": does not fit") and " of 268.0 GiB (estimate +/- " in memory["estimate"]
