"""The dispatch/combine microbenchmark (issue 29 item 4) on the CPU side: the CloudAI test through the real CloudAI,
the Slurm job it generates, the payload's refusals and its output check, the parser that gives numbers only for whole
logs, and the A/B page that shows them beside the recorded training delta.

The timing loop itself needs a GPU: no Megatron-Core dispatcher runs on a CPU-only torch (see
payload/dispatch_bench/__main__.py); benchmarks/gpu_dispatch_bench_run.sh runs it in the next GPU window."""

from __future__ import annotations

import json
import math
import os
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest
from helpers import CONF, ROOT, dry_run, sbatch_scripts, slurm_strategy, write_case

from cloudai_mbridge.metrics.dispatch_bench import parse_dispatch_log, parse_dispatch_run
from cloudai_mbridge.payload.dispatch_bench import lines

H100 = CONF / "system" / "slurm_h100_ib.toml"
TEST = CONF / "test" / "proxy_dispatch_bench.toml"
TRAINING_CELL = ROOT / "benchmarks" / "results" / "bridge_ab_4gpu" / "k2_mbs1_w5" / "runs"


# --- the CloudAI test ------------------------------------------------------------------------------------------


def test_the_scenario_dry_runs_every_backend_at_the_proxies_shapes(tmp_path):
    res = dry_run(H100, CONF / "test_scenario" / "proxy_dispatch_bench.toml", tmp_path)
    assert res.returncode == 0, res.output
    scripts = sbatch_scripts(res.output_dir)
    assert len(scripts) == 12  # 2 models x 3 dispatchers x mbs {1, 2}
    configs = [json.loads((s.parent / "mbridge_config.json").read_text()) for s in scripts]
    shapes = {(c["model"], c["hidden_size"], c["topk"], c["num_experts"]) for c in configs}
    assert shapes == {("deepseek_v3_proxy", 2048, 4, 16), ("kimi_k2_proxy", 2048, 8, 32)}
    assert {(c["dispatcher"], c["mbs"]) for c in configs} == {(d, m) for d in ("alltoall", "deepep", "ncclep")
                                                              for m in (1, 2)}
    assert all(c["world_size"] == 8 for c in configs)  # every GPU of the 8-GPU node
    assert all((c["moe_expert_rank_capacity_factor"] == 1.5) == (c["dispatcher"] == "ncclep") for c in configs)
    assert all((c["deepep_impl"] == "uccl") == (c["dispatcher"] == "deepep") for c in configs)
    for s in scripts:  # the payload is staged beside the config, as for training
        assert (s.parent / "mbridge_payload" / "dispatch_bench" / "__main__.py").is_file()


def test_ncclep_past_its_token_limit_is_skipped_with_the_rule(tmp_path):
    test = TEST.read_text().replace("mbs = [1, 2]", "mbs = [2, 4]")
    scenario = ('name = "case"\n[[Tests]]\nid = "t"\ntest_name = "proxy_dispatch_bench"\nnum_nodes = 1\n'
                'time_limit = "00:10:00"\n')
    _, scenario_path = write_case(tmp_path / "conf", test, scenario)
    res = dry_run(H100, scenario_path, tmp_path)
    assert "dispatch-bench-ncclep" in res.output and "16384 tokens" in res.output
    configs = [json.loads((s.parent / "mbridge_config.json").read_text()) for s in sbatch_scripts(res.output_dir)]
    written = {(c["dispatcher"], c["mbs"]) for c in configs}
    assert ("ncclep", 4) not in written and len(written) == 5  # the other five points are written


def test_the_generated_command_runs_the_payload_with_every_value_quoted(tmp_path):
    out = tmp_path / "it's a dir" / "$(touch pwned)"
    strategy = slurm_strategy(H100, TEST, 1, out, {"dispatcher": "ncclep", "mbs": 2})
    strategy.gen_exec_command()
    script = out / "cloudai_sbatch_script.sh"
    text = script.read_text()
    srun = next(line for line in text.splitlines() if line.startswith("srun "))
    argv = shlex.split(srun)
    config = Path(argv[argv.index("--config") + 1])
    assert config == out.absolute() / "mbridge_config.json"
    assert argv[argv.index("--config") - 1] == "mbridge_payload.dispatch_bench"
    assert "--ntasks-per-node=8" in argv
    export = next(line for line in text.splitlines() if line.startswith("export PYTHONPATH="))
    shown = subprocess.run(["bash", "-c", f'{export}\nprintf %s "$PYTHONPATH"'], cwd=tmp_path, capture_output=True,
                           text=True, env={"PATH": os.environ["PATH"]}, check=True).stdout
    assert shown == str(out.absolute())  # the staged payload's folder, taken literally by the shell
    assert not (tmp_path / "pwned").exists()
    cfg = json.loads(config.read_text())
    assert (cfg["dispatcher"], cfg["mbs"], cfg["seq_length"], cfg["world_size"]) == ("ncclep", 2, 4096, 8)


# --- the payload's CPU side --------------------------------------------------------------------------------------


def _config(**kw):
    base = {"model": "kimi_k2_proxy", "hidden_size": 64, "num_experts": 8, "topk": 2, "seq_length": 16, "mbs": 1,
            "dispatcher": "alltoall", "warmup": 1, "iterations": 3, "seed": 1}
    return {**base, **kw}


def test_the_payload_refuses_a_machine_without_gpus_in_one_line(tmp_path):
    pytest.importorskip("megatron.core")
    from cloudai_mbridge.payload.refit.local import launch

    run = launch(_config(), 2, timeout=240, module="cloudai_mbridge.payload.dispatch_bench", cwd=ROOT)
    assert run.returncodes == [2, 2]
    assert "MBRIDGE_CONFIG_ERROR the dispatch microbenchmark needs a GPU per rank" in run.stderr[0]
    assert "MBRIDGE_DISPATCH_RESULT" not in run.stdout[0]
    assert run.stdout[0].startswith(lines.TAG_CONFIG)  # what it was asked to run, and with which software
    assert "MBRIDGE_VERSIONS" in run.stdout[0]


@pytest.mark.parametrize(("change", "words"), [
    ({"dispatcher": "ncclep"}, "needs moe_expert_rank_capacity_factor"),
    ({"topk": 9}, "exceeds num_experts"),
    ({"dispatcher": "hybridep"}, "is not one of"),
    ({"mbs": 0}, "must be >= 1"),
    ({"hidden_size": "2048"}, "must be int"),
    ({"moe_expert_rank_capacity_factor": float("nan")}, "finite number"),
    ({"typo_key": 1}, "unknown config keys: typo_key"),
])
def test_a_bad_config_is_refused_before_anything_starts(change, words):
    from cloudai_mbridge.payload.dispatch_bench.__main__ import ConfigError, load_config

    with pytest.raises(ConfigError, match=words):
        load_config(json.dumps(_config(**change)))


def test_balanced_routing_loads_every_expert_equally_and_counts_cross_rank_bytes():
    tokens, topk, experts, ep = 4096, 8, 32, 4
    for rank in range(ep):
        load = [0] * experts
        for t in range(tokens):
            chosen = lines.balanced_experts(t, rank, topk, experts)
            assert len(set(chosen)) == topk
            for e in chosen:
                load[e] += 1
        assert set(load) == {tokens * topk // experts}
        logical, cross = lines.byte_counts(tokens, 2048, topk, experts, ep, rank, 2)
        assert logical == tokens * topk * 2048 * 2
        assert cross == logical * (ep - 1) // ep


def test_the_output_check_catches_a_combine_that_lost_tokens():
    torch = pytest.importorskip("torch")
    from cloudai_mbridge.payload.dispatch_bench.__main__ import check_output

    x = torch.randn(64, 32)
    assert check_output(x * 4, x, 4, "fp32")[3]  # unpermute summed the 4 copies
    assert check_output(x.clone(), x, 4, "fp32")[3]  # copies weighed by probs 1/4
    lost = x * 4
    lost[7] = 0.0
    _scale, expected, err, ok = check_output(lost, x, 4, "fp32")
    assert not ok and expected == 4 and err >= 0.99


# --- the parser -----------------------------------------------------------------------------------------------


def realistic_log(backend="ncclep", dispatch=(410.0, 12.0), combine=(520.0, 20.0), calls=200) -> str:
    """rank 0's log as the payload prints it (its own line formatters), with NCCL's and torch's noise around."""
    logical, cross = lines.byte_counts(4096, 2048, 8, 32, 4, 0, 2)
    out = [lines.config_line(_config(dispatcher=backend, model="kimi_k2_proxy")),
           'MBRIDGE_VERSIONS {"megatron_core": "0.19.2", "nccl": "2.32.3", "torch": "2.11.0+cu130"}',
           "host:123:123 [0] NCCL INFO Bootstrap: Using eth0:10.0.0.2<0>",
           f"MBRIDGE_DISPATCHER requested={backend} built=flex backend={backend}",
           lines.bytes_line(tokens=4096, hidden=2048, topk=8, experts=32, ep=4, elem_bytes=2, logical_bytes=logical,
                            cross_rank_bytes=cross),
           lines.check_line(8.0, 8.0, 0.004, True)]
    for phase, (mid, spread) in (("dispatch", dispatch), ("combine", combine)):
        times = [mid + spread * math.sin(i) for i in range(calls)]
        out.append(lines.result_line(phase=phase, backend=backend, times_us=times, warmup=10, logical_bytes=logical,
                                     cross_rank_bytes=cross, timer="cuda_events", ranks=4))
    out.append(f"{lines.TAG_DONE} backend={backend} phases=2")
    return "\n".join(out) + "\n"


def test_a_whole_log_gives_latency_spread_and_bandwidth():
    m = parse_dispatch_log(realistic_log(), "ncclep")
    assert m.status == "ok", m.error
    d = m.phases["dispatch"]
    assert d.p10_us < d.median_us < d.p90_us
    assert d.median_us == pytest.approx(410.0, abs=1.0)
    assert d.calls == 200 and d.timer == "cuda_events" and d.ranks == 4
    assert d.algbw_gbps == pytest.approx(4096 * 8 * 2048 * 2 / (d.median_us * 1e-6) / 1e9, rel=1e-3)
    assert m.bytes_rule == "tokens*topk*hidden*elem"


def _replace(text: str, tag_phase: str, key: str, value: str) -> str:
    out = []
    for line in text.splitlines():
        if line.startswith(tag_phase):
            line = " ".join(f"{key}={value}" if tok.startswith(f"{key}=") else tok for tok in line.split())
        out.append(line)
    return "\n".join(out)


DISPATCH = "MBRIDGE_DISPATCH_RESULT phase=dispatch"


@pytest.mark.parametrize(("damage", "status"), [
    (lambda t: t[: t.index("MBRIDGE_DISPATCH_RESULT phase=combine")], "incomplete"),  # cut before combine
    (lambda t: t.replace("MBRIDGE_DISPATCH_DONE backend=ncclep phases=2\n", ""), "incomplete"),
    (lambda t: t[: len(t) // 2], "check_failed"),  # cut before the output check
    (lambda t: t.replace("ok=true", "ok=false"), "check_failed"),
    (lambda t: _replace(t, DISPATCH, "median_us", "nan"), "damaged"),
    (lambda t: _replace(t, DISPATCH, "median_us", "-3.0"), "damaged"),
    (lambda t: _replace(t, DISPATCH, "p10_us", "9999.0"), "damaged"),  # percentiles out of order
    (lambda t: _replace(t, DISPATCH, "algbw_gbps", "999.000"), "damaged"),  # not what bytes / median give
    (lambda t: _replace(t, DISPATCH, "backend", "alltoall"), "damaged"),
    (lambda t: t.replace("median_us=", "median_us =", 1), "damaged"),
    (lambda t: t + next(x for x in t.splitlines() if x.startswith(DISPATCH)) + "\n", "damaged"),  # phase twice
    (lambda t: t.replace("logical_bytes=", "logical_bytes=x", 1), "damaged"),
    (lambda t: t + "MBRIDGE_DISPATCHER_ERROR dispatcher = 'ncclep' cannot bootstrap NCCL EP here: nvcc missing\n",
     "error"),
    (lambda t: "\x00\xff garbage " * 100, "check_failed"),
])
def test_a_damaged_or_partial_log_never_yields_a_number(damage, status):
    m = parse_dispatch_log(damage(realistic_log()), "ncclep")
    assert m.status == status
    assert m.phases == {}
    if status == "error":
        assert "nvcc missing" in m.error


def test_a_run_folder_without_its_log_says_so(tmp_path):
    m = parse_dispatch_run(tmp_path, "alltoall")
    assert m.status == "missing_log" and m.phases == {}


# --- the A/B page -----------------------------------------------------------------------------------------------


def _bench_run(root: Path, backend: str, log: str | None) -> Path:
    folder = root / f"bench_{backend}"
    (folder / "logs").mkdir(parents=True)
    cfg = {**_config(dispatcher=backend, hidden_size=2048, num_experts=32, topk=8, seq_length=4096, mbs=1,
                     warmup=10, iterations=200),
           "world_size": 4, "workload": "dispatch_bench", "dtype": "bf16",
           "moe_expert_rank_capacity_factor": 1.5 if backend == "ncclep" else None}
    (folder / "mbridge_config.json").write_text(json.dumps(cfg))
    if log is not None:
        (folder / "logs" / "rank-0.log").write_text(log)
    return folder


def test_the_ab_page_shows_each_backend_beside_the_training_delta(tmp_path):
    pytest.importorskip("cloudai")
    from cloudai_mbridge.reports.folders import ab_report

    runs = tmp_path / "runs"
    shutil.copytree(TRAINING_CELL, runs)
    bench = [_bench_run(tmp_path / "bench", "alltoall", realistic_log("alltoall", (800.0, 30.0), (700.0, 30.0))),
             _bench_run(tmp_path / "bench", "ncclep", realistic_log("ncclep", (410.0, 12.0), (520.0, 20.0))),
             _bench_run(tmp_path / "bench", "deepep", realistic_log("deepep")[:400])]  # cut short
    out = tmp_path / "out"
    rows = ab_report(sorted(runs.iterdir()) + bench, out, warmup=4)
    ncclep = next(r for r in rows if r.get("arm") == "ncclep")
    page = (out / "mbridge_ab.html").read_text()
    assert "Dispatch / combine microbenchmark" in page
    import pandas as pd

    micro = pd.read_csv(out / "mbridge_dispatch_bench.csv").set_index("backend")
    assert micro.loc["ncclep", "dispatch_median_us"] == pytest.approx(410.0, abs=1.0)
    assert micro.loc["ncclep", "vs_alltoall_pct"] == pytest.approx((930.0 / 1500.0 - 1) * 100, abs=0.5)
    assert micro.loc["ncclep", "training_delta_pct"] == pytest.approx(ncclep["delta_pct"])
    assert micro.loc["ncclep", "training_verdict"] == ncclep["verdict"]
    assert math.isnan(micro.loc["alltoall", "training_delta_pct"])  # the baseline has no delta of its own
    assert micro.loc["deepep", "status"] == "check_failed"
    assert math.isnan(micro.loc["deepep", "dispatch_median_us"])  # a cut log gives no number on the page either
    assert f"{micro.loc['ncclep', 'dispatch_median_us']:.1f}" in page or "410" in page


# --- the GPU window's driver, on what it does without a GPU -------------------------------------------------------


# The GPU hosts have no CloudAI (nor pydantic): the driver must plan and run without them.
WITHOUT_CLOUDAI = """
import runpy, sys
class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("cloudai", "pydantic"):
            raise ImportError("not on the GPU host: " + name)
sys.meta_path.insert(0, Block())
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def _driver(*args: str, cwd: Path, cloudai: bool = True) -> subprocess.CompletedProcess:
    import sys

    script = str(ROOT / "benchmarks" / "gpu_dispatch_bench.py")
    head = [sys.executable, script] if cloudai else [sys.executable, "-c", WITHOUT_CLOUDAI, script]
    return subprocess.run([*head, *args], cwd=cwd, capture_output=True, text=True, timeout=600)


def test_the_gpu_window_driver_plans_every_arm_and_skips_what_the_rules_refuse(tmp_path):
    proc = _driver("--out", str(tmp_path / "o"), "--gpus", "4", "--dry-run", cwd=tmp_path, cloudai=False)
    assert proc.returncode == 0, proc.stderr
    assert "grid: 18 points" in proc.stdout
    assert "deepseek_v3_proxy_mbs4_ncclep reject [dispatch-bench-ncclep]" in proc.stdout
    assert "kimi_k2_proxy_mbs4_deepep run" in proc.stdout  # the DeepEP arms need mbs 4 (issue 29)
    assert not (tmp_path / "o").exists()  # a dry run starts and writes nothing


def test_the_gpu_window_driver_reports_results_lines_and_the_page_from_run_folders(tmp_path):
    pytest.importorskip("cloudai")
    out = tmp_path / "o"
    _bench_run(out / "runs", "alltoall", realistic_log("alltoall", (800.0, 30.0), (700.0, 30.0)))
    cut = realistic_log("ncclep").replace("MBRIDGE_DISPATCH_DONE", "killed")  # no DONE line
    _bench_run(out / "runs", "ncclep", cut)
    proc = _driver("--out", str(out), "--report", "--training-runs", *map(str, sorted(TRAINING_CELL.iterdir())),
                   cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    results = [line for line in proc.stdout.splitlines() if line.startswith("RESULT")]
    assert any("backend=alltoall phase=dispatch median_us=800." in r and "us/call" in r for r in results)
    assert any("backend=ncclep status=incomplete" in r for r in results)
    assert not any("backend=ncclep phase=" in r for r in results)
    assert results[-1].startswith("RESULT dispatch_bench_points=1 count")
    assert "Dispatch / combine microbenchmark" in (out / "report" / "mbridge_ab.html").read_text()
