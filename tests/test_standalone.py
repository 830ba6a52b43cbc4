"""MBridgeTraining on CloudAI's standalone system (one machine, torchrun, no scheduler): dry-run of the 4-GPU A/B
scenario, its refusals, quoting, and a real `cloudai-mbridge run` + `generate-report` on this machine."""

from __future__ import annotations

import csv
import json
import subprocess
from pathlib import Path

import pytest
from helpers import CONF, dry_run, run_cli, write_case

SYSTEM = CONF / "system" / "standalone_4gpu.toml"
SCENARIO = CONF / "test_scenario" / "bridge_ab_4gpu.toml"

HOSTILE = "$(touch pwned) `touch pwned2` ; touch pwned3 'x\" \\"

TINY_TEST = """
name = "tiny"
description = "tiny A/B on this machine"
test_template_name = "MBridgeTraining"
[cmd_args]
model = "kimi_k2_proxy"
engine = "mcore"
ep = 2
mbs = 1
gbs = 4
seq_length = 128
train_iters = 2
dispatcher = ["alltoall", "deepep"]
force_balanced_routing = true
[extra_env_vars]
NCCL_EP_JIT_CACHE_DIR = "/tmp/jit cache's dir"
"""


def tiny_scenario(num_nodes: int = 1, starts: int = 2) -> str:
    entries = "".join(f'[[Tests]]\nid = "start{k}"\ntest_name = "tiny"\nnum_nodes = {num_nodes}\n'
                      'time_limit = "00:05:00"\n' for k in range(1, starts + 1))
    return f'name = "tiny_ab"\n{entries}[reports.mbridge_ab]\nenable = true\n'


def tiny_system(tmp: Path, gpus: str = "2") -> Path:
    path = tmp / "system.toml"
    path.write_text('name = "standalone-cpu"\nscheduler = "standalone"\ninstall_path = "./install"\n'
                    'output_path = "./results"\nmonitor_interval = 1\n[global_env_vars]\n'
                    f'CLOUDAI_MBRIDGE_GPU = "h100"\nCLOUDAI_MBRIDGE_GPUS_PER_NODE = {json.dumps(gpus)}\n'
                    f"PROBE = {json.dumps(HOSTILE)}\n")
    return path


def test_ab_scenario_dry_runs_to_three_starts_of_six_torchrun_jobs(tmp_path: Path) -> None:
    res = dry_run(SYSTEM, SCENARIO, tmp_path)
    assert res.returncode == 0, res.output
    scripts = sorted(res.output_dir.rglob("mbridge_standalone.sh"))
    assert len(scripts) == 18, res.output
    by_start: dict[str, dict[str, dict]] = {}
    for script in scripts:
        run = script.parent
        text = script.read_text()
        assert "--nproc-per-node 4 --log-dir" in text and f"{run}/torchrun --no-python bash" in text
        assert "logs\"/rank-$RANK.log\"" in text
        cfg = json.loads((run / "mbridge_config.json").read_text())
        assert (cfg["gpus_per_node"], cfg["world_size"], cfg["ep"], cfg["tp"], cfg["pp"]) == (4, 4, 4, 1, 1)
        assert (cfg["mbs"], cfg["seq_length"], cfg["train_iters"], cfg["engine"]) == (1, 4096, 20, "bridge")
        assert cfg["force_balanced_routing"] is True and cfg["precision"] == "bf16"
        assert "CLOUDAI_MBRIDGE_GPUS_PER_NODE" not in text  # the plugin's knob is no job variable
        start = run.relative_to(next(res.output_dir.iterdir())).parts[0]
        cfg = {k: v for k, v in cfg.items() if k not in ("output_dir",)}
        by_start.setdefault(start, {})[f"{cfg['model']['name']}/{cfg['dispatcher']}"] = cfg
    assert sorted(by_start) == ["start1", "start2", "start3"]
    arms = {f"{m}/{d}" for m in ("deepseek_v3_proxy", "kimi_k2_proxy") for d in ("alltoall", "ncclep", "deepep")}
    assert set(by_start["start1"]) == arms
    assert by_start["start1"] == by_start["start2"] == by_start["start3"]  # the same points, started again


TWO_GPU = CONF / "system" / "standalone_2gpu.toml"
TWO_GPU_CELLS = sorted((CONF / "test_scenario").glob("bridge_ab_2gpu_*.toml"))


def test_every_flex_backend_ships_a_2gpu_cell_for_both_proxies() -> None:
    assert [p.stem for p in TWO_GPU_CELLS] == [f"bridge_ab_2gpu_{m}_{b}" for m in ("dsv3", "k2")
                                               for b in ("deepep", "hybridep", "ncclep")]


@pytest.mark.parametrize("scenario", TWO_GPU_CELLS, ids=[p.stem for p in TWO_GPU_CELLS])
def test_a_2gpu_cell_dry_runs_to_three_starts_of_alltoall_and_its_backend_on_two_ranks(scenario: Path,
                                                                                       tmp_path: Path) -> None:
    """Issue 43: the cell that ran by hand on 2 x H200 (DSV3 proxy, mbs 1, ep 2, gbs 8, 14 iterations, 3 + 3 starts)
    ships for every flex backend; nothing it sets goes unused (the dry-run warns of none)."""
    model = {"dsv3": "deepseek_v3_proxy", "k2": "kimi_k2_proxy"}[scenario.stem.split("_")[3]]
    backend = scenario.stem.split("_")[4]
    res = dry_run(TWO_GPU, scenario, tmp_path)
    assert res.returncode == 0, res.output
    assert "[WARNING]" not in res.output, res.output
    arms: dict[str, list[dict]] = {}
    for script in sorted(res.output_dir.rglob("mbridge_standalone.sh")):
        assert "--nproc-per-node 2 --log-dir" in script.read_text()
        cfg = json.loads((script.parent / "mbridge_config.json").read_text())
        arms.setdefault(cfg["dispatcher"], []).append(cfg)
    assert sorted(arms) == sorted(["alltoall", backend])
    for cfgs in arms.values():
        assert len(cfgs) == 3  # three starts per arm
        for cfg in cfgs:
            assert cfg["model"]["name"] == model
            assert (cfg["world_size"], cfg["ep"], cfg["tp"], cfg["pp"], cfg["mbs"], cfg["gbs"],
                    cfg["train_iters"]) == (2, 2, 1, 1, 1, 8, 14)
            assert cfg["deepep_impl"] == ("uccl" if backend == "deepep" else "nvidia")
            assert cfg.get("moe_expert_rank_capacity_factor") == (1.5 if backend == "ncclep" else None)


def test_the_4gpu_cell_is_refused_on_the_2gpu_system_naming_the_rule(tmp_path: Path) -> None:
    """What a user met on 2 x H200 with the 4-GPU scenario, and why the 2-GPU ones ship."""
    refused = dry_run(TWO_GPU, CONF / "test_scenario" / "bridge_ab_4gpu_dsv3_ncclep.toml", tmp_path)
    assert refused.returncode != 0
    assert "[world-size-expert-parallel] world size 2 is not divisible by etp*ep*pp = 4" in refused.output


def test_more_than_one_node_is_refused_at_dry_run_naming_the_field(tmp_path: Path) -> None:
    _, scenario = write_case(tmp_path, TINY_TEST, tiny_scenario(num_nodes=2, starts=1))
    res = dry_run(tiny_system(tmp_path), scenario, tmp_path)
    assert res.returncode != 0
    assert "num_nodes = 2" in res.output and "set num_nodes = 1" in res.output, res.output
    assert "Traceback" not in res.output
    assert not list(res.output_dir.rglob("mbridge_standalone.sh"))


def test_a_gpu_count_that_is_no_number_is_refused_naming_it(tmp_path: Path) -> None:
    _, scenario = write_case(tmp_path, TINY_TEST, tiny_scenario(starts=1))
    res = dry_run(tiny_system(tmp_path, gpus="four"), scenario, tmp_path)
    assert res.returncode != 0
    assert "CLOUDAI_MBRIDGE_GPUS_PER_NODE = 'four' is not a GPU count" in res.output, res.output
    assert "Traceback" not in res.output


def test_environment_values_reach_the_job_as_data(tmp_path: Path) -> None:
    _, scenario = write_case(tmp_path, TINY_TEST, tiny_scenario(starts=1))
    res = dry_run(tiny_system(tmp_path), scenario, tmp_path)
    assert res.returncode == 0, res.output
    script = sorted(res.output_dir.rglob("mbridge_standalone.sh"))[0]
    exports = "\n".join(line for line in script.read_text().splitlines() if line.startswith("export "))
    shown = subprocess.run(["bash", "-c", exports + '\nprintf "%s\\n%s\\n%s" "$PROBE" "$NCCL_EP_JIT_CACHE_DIR" '
                            '"$PYTHONPATH"'], cwd=tmp_path, capture_output=True, text=True, check=True,
                           env={"PATH": "/usr/bin:/bin", "PYTHONPATH": "/site"}).stdout.split("\n")
    assert shown == [HOSTILE, "/tmp/jit cache's dir", f"{script.parent}:/site"]
    assert not list(tmp_path.glob("pwned*"))


@pytest.mark.payload
def test_run_on_this_machine_writes_rank_logs_and_the_ab_page_has_both_arms_over_starts(tmp_path: Path) -> None:
    """A real run: CloudAI's standalone runner starts the script, torchrun starts 2 ranks of the real payload (which
    stops where it needs CUDA on this CPU machine), CloudAI waits for the process; then generate-report."""
    pytest.importorskip("torch")
    import tempfile

    _, scenario = write_case(tmp_path, TINY_TEST, tiny_scenario(starts=2))
    system = tiny_system(tmp_path)
    elastic_before = set(Path(tempfile.gettempdir()).glob("torchelastic_*"))
    proc = run_cli("run", "--system-config", str(system), "--test-scenario", str(scenario), "--output-dir",
                   str(tmp_path / "results"), cwd=tmp_path, timeout=900)
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "4 job(s) ran" in output, output  # every job failed: no GPU here
    (root,) = [p for p in (tmp_path / "results").iterdir() if p.is_dir()]
    for start in ("start1", "start2"):
        for step in ("1", "2"):
            run = root / start / "0" / step
            logs = sorted(p.name for p in (run / "logs").iterdir())
            assert logs == ["rank-0.log", "rank-1.log"], run
            assert "torch.distributed.run" in (run / "test-run.toml").read_text()
            assert (run / "torchrun").is_dir()  # torchrun's own folders stay in the run's folder
    assert set(Path(tempfile.gettempdir()).glob("torchelastic_*")) == elastic_before  # nothing left in /tmp
    first = (root / "start1" / "0" / "1" / "logs" / "rank-0.log").read_text()
    assert "cuda" in first.lower()  # the payload itself ran and stopped at its first CUDA call
    assert "on rank 0" in output
    assert not list(tmp_path.glob("**/pwned*"))
    for report in ("mbridge_ab.html", "mbridge_ab.csv"):
        (root / report).unlink()
    proc = run_cli("generate-report", "--system-config", str(system), "--test-scenario", str(scenario),
                   "--result-dir", str(root), cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    page = (root / "mbridge_ab.html").read_text()
    assert "alltoall" in page and "deepep" in page
    with (root / "mbridge_ab.csv").open(newline="") as f:
        (got,) = list(csv.DictReader(f))
    assert (got["baseline"], got["arm"], got["base_starts"], got["arm_starts"]) == ("alltoall", "deepep", "2", "2")
    assert got["verdict"].startswith("invalid")  # failed runs never give a winner
