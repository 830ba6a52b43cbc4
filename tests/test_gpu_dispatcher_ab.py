"""benchmarks/gpu_dispatcher_ab.py without a GPU: the dry run's grid and rule verdicts, the UCCL environment it gives
the payload, and the adapter that runs reports/ab.py on run folders (real GPU logs, tests/fixtures/logs/gpu)."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
GPU_FIXTURES = ROOT / "tests" / "fixtures" / "logs" / "gpu"

import gpu_dispatcher_ab as ab  # noqa: E402  (benchmarks/ is on pytest's pythonpath)


def dry_run(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    assert ab.main(["--dry-run", *argv]) == 0
    return capsys.readouterr().out


def test_dry_run_one_gpu_marks_deepep_as_needing_two(capsys: pytest.CaptureFixture[str]) -> None:
    out = dry_run(capsys, "--gpus", "1")
    assert "grid: 8 points = 2 arms (alltoall, deepep) x mbs [1, 4] x overlap [off, on]" in out
    assert re.search(r"arm deepep: cannot run with --gpus 1: needs >= 2 GPUs .*DeepEP dispatcher requires TPxEP > 1",
                     out)
    # Each rejected point names the rule that rejects it, with the rule's message.
    assert re.search(r"mbs1_overlap-off +deepep +reject +\[flex-dispatcher-ep\] the deepep dispatcher needs an expert "
                     r"group of at least two ranks", out)
    assert re.search(r"mbs4_overlap-on +alltoall +reject +\[a2a-overlap\] a2a overlap needs expert parallelism", out)
    assert re.search(r"mbs1_overlap-off +alltoall +run", out)
    assert "2 to run" in out
    assert "probe (child process" in out and "deep_ep" in out


def test_dry_run_two_gpus_and_hybridep(capsys: pytest.CaptureFixture[str]) -> None:
    out = dry_run(capsys, "--gpus", "2", "--with-hybridep", "--deepep-impl", "uccl")
    assert "grid: 12 points = 3 arms (alltoall, deepep, hybridep)" in out
    # Overlap on: the rules allow it with ep 2 (Kimi-K2 has no MTP) but the mcore engine has no combined-1F1B schedule.
    assert re.search(r"mbs1_overlap-on +deepep +reject +\[mcore-engine\] moe_a2a_overlap = true needs the "
                     r"combined-1F1B", out)
    assert "arm hybridep: every point rejected by [hybridep-uccl]" in out
    assert re.search(r"mbs4_overlap-off +deepep +(run|blocked)\n.*config: world 2 ep 2 dp 2 mbs 4 gbs 32 .*seed 1234 "
                     r"balanced True a2a_overlap False dispatcher flex/deepep deepep_impl uccl", out)


def test_uccl_env_prepends_deep_ep_and_libraries(tmp_path: Path) -> None:
    uccl = tmp_path / "uccl"
    (uccl / "deep_ep").mkdir(parents=True)
    (uccl / "deep_ep" / "__init__.py").write_text("")
    (uccl / "lib").mkdir()
    site = tmp_path / "site"
    (site / "nvidia" / "cuda_runtime" / "lib").mkdir(parents=True)
    (site / "nvidia" / "cuda_runtime" / "lib" / "libcudart.so.12").write_text("")
    env, notes = ab.uccl_env(uccl, {"PYTHONPATH": f"{site}:/elsewhere", "LD_LIBRARY_PATH": "/usr/lib/x"})
    assert notes == []
    assert env["PYTHONPATH"].split(":") == [str(uccl.resolve()), str(site), "/elsewhere"]
    assert env["LD_LIBRARY_PATH"].split(":") == [str(uccl.resolve() / "lib"),
                                                 str((site / "nvidia" / "cuda_runtime" / "lib").resolve()),
                                                 "/usr/lib/x"]
    _, notes = ab.uccl_env(tmp_path / "missing", {})
    assert any("deep_ep/__init__.py not found" in n for n in notes)


def deepep_copy(src: Path, dst: Path, time_factor: float) -> Path:
    """The alltoall run folder as its deepep twin: same config but the dispatcher, the payload's dispatcher lines
    of a flex/DeepEP build through UCCL, iteration times scaled (the losses stay: equal work)."""
    shutil.copytree(src, dst)
    cfg = json.loads((dst / "mbridge_config.json").read_text())
    cfg["dispatcher"] = "deepep"
    (dst / "mbridge_config.json").write_text(json.dumps(cfg))
    for log in sorted((dst / "logs").glob("rank-*.log")):
        text = log.read_text().replace("requested=alltoall built=alltoall backend=none",
                                       "requested=deepep built=flex backend=deepep")
        text = text.replace("MBRIDGE_DEEP_EP module=none provider=none",
                            "MBRIDGE_DEEP_EP module=/tmp/uccl/deep_ep/__init__.py provider=uccl")
        text = re.sub(r"elapsed time per iteration \(ms\): ([0-9.]+)",
                      lambda m: f"elapsed time per iteration (ms): {float(m.group(1)) * time_factor:.1f}", text)
        log.write_text(text)
    return dst


def test_dry_run_lr_reaches_every_arms_config(capsys: pytest.CaptureFixture[str]) -> None:
    out = dry_run(capsys, "--engine", "bridge", "--gpus", "4", "--model", "deepseek_v3_proxy", "--arms", "alltoall",
                  "ncclep", "--mbs", "1", "--lr", "1e-5")
    configs = [line for line in out.splitlines() if "config: " in line]
    assert len(configs) == 4 and all(line.endswith("engine bridge lr 1e-05") for line in configs)
    assert "lr 1e-05 constant" in out
    args = ab.parse_args(["--dry-run", "--gpus", "4", "--gpu", "h200", "--arms", "alltoall", "ncclep", "--lr", "1e-5"])
    for arm in args.arms:
        cfg = ab.payload_config(ab.make_plan(args, arm, 1, False), args, "-")
        assert cfg["lr"] == 1e-5
    # without --lr: no lr key (the recipe's schedule), configs as before the option
    args = ab.parse_args(["--dry-run", "--gpus", "4", "--gpu", "h200"])
    assert "lr" not in ab.payload_config(ab.make_plan(args, "alltoall", 1, False), args, "-")


@pytest.mark.parametrize("bad", ["0", "-1", "nan", "inf", "2"])
def test_dry_run_refuses_a_bad_lr(capsys: pytest.CaptureFixture[str], bad: str) -> None:
    with pytest.raises(SystemExit) as e:
        ab.parse_args(["--dry-run", "--lr", bad])
    assert e.value.code == 2 and "--lr" in capsys.readouterr().err


H100_ALLTOALL = Path(__file__).resolve().parent.parent / "benchmarks" / "results" / "bridge_ab_4gpu" / "dsv3_mbs1" / \
    "runs" / "w1_alltoall_s0"


@pytest.mark.parametrize(("factor", "verdict", "winner"), [(0.5, "deepep faster", "deepep"),
                                                         (0.8, "within noise", "none")])
def test_ab_adapter_pairs_two_run_folders(tmp_path: Path, factor: float, verdict: str, winner: str) -> None:
    base = shutil.copytree(H100_ALLTOALL, tmp_path / "runs" / "mbs1_overlap-off_alltoall")
    arm = deepep_copy(base, tmp_path / "runs" / "mbs1_overlap-off_deepep", factor)
    # 20 iterations of a real 4 x H100 alltoall run (benchmarks/results/bridge_ab_4gpu), 16 after the warm-up; its
    # manual-GC steps (1.3-1.5 s against 0.6 s) spread the times so widely that a 20 % faster copy is still inside
    # the 95 % interval of one pair.
    rows = ab.ab_report([base, arm], tmp_path, warmup=4)
    (row,) = rows
    assert (row["baseline"], row["arm"]) == ("alltoall", "deepep")
    assert row["delta_pct"] == pytest.approx(100 * (factor - 1), abs=0.05)
    assert row["verdict"] == verdict and ab.winner(row["verdict"]) == winner
    lo, hi = (float(x) for x in row["delta_ci95_pct"].split(".."))
    assert (lo <= 0.0 <= hi) == (verdict == "within noise") and lo < row["delta_pct"] < hi
    assert row["loss_max_rel_diff"] == 0.0 and row["arm_deep_ep_provider"] == "uccl"
    assert (tmp_path / "mbridge_ab.csv").is_file() and (tmp_path / "mbridge_ab.html").is_file()
    named = ab.pair_point([{"run_folder": str(arm), "point": "mbs1_overlap-off"}], rows)
    assert named[0]["point"] == "mbs1_overlap-off"


def test_arms_with_different_lr_are_not_paired(tmp_path: Path) -> None:
    """lr is a cell-defining field: an arm that trained with another learning rate is another cell, never an A/B."""
    base = shutil.copytree(H100_ALLTOALL, tmp_path / "runs" / "mbs1_overlap-off_alltoall")
    arm = deepep_copy(base, tmp_path / "runs" / "mbs1_overlap-off_deepep", 0.5)
    cfg = json.loads((arm / "mbridge_config.json").read_text())
    (arm / "mbridge_config.json").write_text(json.dumps({**cfg, "lr": 1e-5}))
    rows = ab.ab_report([base, arm], tmp_path, warmup=4)
    assert sorted(r["verdict"] for r in rows) == ["unpaired", "unpaired"]
    assert any("lr=1e-05" in r["cell"] for r in rows)


def test_three_steady_iterations_get_no_verdict(tmp_path: Path) -> None:
    """The 2 x H200 fixture holds 4 iterations: after a warm-up of 1, three per arm are too few for any verdict,
    however large the difference."""
    base = shutil.copytree(GPU_FIXTURES / "train_k2_ep2", tmp_path / "runs" / "mbs1_overlap-off_alltoall")
    arm = deepep_copy(base, tmp_path / "runs" / "mbs1_overlap-off_deepep", 0.5)
    (row,) = ab.ab_report([base, arm], tmp_path, warmup=1)
    assert row["verdict"].startswith("invalid") and "3 steady-state iterations" in row["verdict"]
    assert ab.winner(row["verdict"]) == "none"


def test_cells_of_two_models_are_labelled_by_model_name(tmp_path: Path) -> None:
    """The microbenchmark page pools training cells of two models (4 x H100, 2026-11-28): each cell's label names the
    model, not every field of the payload's model table."""
    host4 = Path(__file__).resolve().parent.parent / "benchmarks" / "results" / "bridge_ab_4gpu"
    folders = [shutil.copytree(host4 / cell / "runs" / run, tmp_path / "runs" / f"{cell}_{run}")
               for cell in ("dsv3_mbs2_h4", "k2_mbs2_h4")
               for run in ("mbs2_overlap-off_alltoall", "mbs2_overlap-off_ncclep")]
    rows = ab.ab_report(folders, tmp_path / "report", warmup=4)
    labels = sorted(r["cell"] for r in rows)
    assert [("model=deepseek_v3_proxy" in c, "model=kimi_k2_proxy" in c) for c in labels] == [(True, False),
                                                                                             (False, True)]
    page = (tmp_path / "report" / "mbridge_ab.html").read_text()
    assert "'family'" not in page and "&#x27;family&#x27;" not in page and "model=kimi_k2_proxy" in page


def fake_hybridep_site(site: Path) -> Path:
    """A stand-in for gpu_hybridep_build.sh's site: a deep_ep with the symbols the probe asks for, no CUDA."""
    (site / "deep_ep").mkdir(parents=True)
    (site / "deep_ep" / "__init__.py").write_text("class Buffer: ...\n\n\nclass HybridEPBuffer: ...\n")
    (site / "deep_ep" / "utils.py").write_text("class EventHandle: ...\n\n\nclass EventOverlap: ...\n")
    return site


def hep_args(*extra: str) -> object:
    return ab.parse_args(["--dry-run", "--engine", "bridge", "--gpus", "4", "--gpu", "h200", *extra])


def test_hybridep_dir_gives_the_hybridep_arm_its_own_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    uccl, hep = tmp_path / "uccl", tmp_path / "hep"
    (uccl / "deep_ep").mkdir(parents=True)
    (uccl / "deep_ep" / "__init__.py").write_text("")
    monkeypatch.setenv("PYTHONPATH", f"/inherited:{uccl}")
    monkeypatch.delenv("CUDA_HOME", raising=False)
    monkeypatch.delenv("HYBRID_EP_CACHE_DIR", raising=False)
    args = hep_args("--arms", "alltoall", "deepep", "hybridep", "--uccl-dir", str(uccl), "--hybridep-dir", str(hep))
    envs = ab.arm_envs(args)
    hyb = envs["hybridep"][0]
    assert hyb["PYTHONPATH"].split(":") == [str(hep.resolve()), "/inherited"]
    assert str(uccl.resolve()) not in hyb["PYTHONPATH"] and "LD_LIBRARY_PATH" not in hyb
    assert hyb["CUDA_HOME"] == "/usr/local/cuda" and hyb["HYBRID_EP_CACHE_DIR"] == "/tmp/hybridep_jit"
    assert any("deep_ep/__init__.py not found" in n for n in envs["hybridep"][1])
    for arm in ("alltoall", "deepep"):
        env = envs[arm][0]
        assert env["PYTHONPATH"].split(":")[0] == str(uccl.resolve()) and str(hep) not in env["PYTHONPATH"]
        assert "CUDA_HOME" not in env and "HYBRID_EP_CACHE_DIR" not in env
    # the inherited CUDA_HOME / cache folder are kept
    monkeypatch.setenv("CUDA_HOME", "/opt/cuda")
    monkeypatch.setenv("HYBRID_EP_CACHE_DIR", "/tmp/x")
    hyb = ab.child_env(args, "hybridep")[0]
    assert (hyb["CUDA_HOME"], hyb["HYBRID_EP_CACHE_DIR"]) == ("/opt/cuda", "/tmp/x")
    assert [ab.make_plan(args, a, 1, False).deepep_impl for a in args.arms] == ["auto", "auto", "nvidia"]


def test_without_hybridep_dir_every_arm_has_todays_env(tmp_path: Path) -> None:
    """Without the option: one environment for all arms, the one child_env gave before it, and no arm plans nvidia."""
    uccl = tmp_path / "uccl"
    args = hep_args("--with-hybridep", "--uccl-dir", str(uccl), "--deepep-impl", "uccl")
    envs = ab.arm_envs(args)
    assert args.hybridep_dir is None and set(envs) == {"alltoall", "deepep", "hybridep"}
    assert all(e == ab.child_env(args) for e in envs.values())
    assert envs["hybridep"][0]["PYTHONPATH"].split(":")[0] == str(uccl.resolve())
    assert "CUDA_HOME" not in envs["hybridep"][0] and "HYBRID_EP_CACHE_DIR" not in envs["hybridep"][0]
    assert {ab.make_plan(args, a, 1, False).deepep_impl for a in args.arms} == {"uccl"}


def test_dry_run_hybridep_dir_plans_nvidia_and_probes_per_env(capsys: pytest.CaptureFixture[str],
                                                              tmp_path: Path) -> None:
    site = fake_hybridep_site(tmp_path / "site")
    out = dry_run(capsys, "--engine", "bridge", "--gpus", "4", "--arms", "alltoall", "hybridep", "--hybridep-dir",
                  str(site), "--mbs", "1", "--overlap", "off")
    assert "hybridep-uccl" not in out and "0 rejected by the rules" in out
    # two probes, one per environment; the hybridep arm's imports the site's deep_ep with HybridEPBuffer
    assert out.count("probe (child process") == 2
    assert "environment of arm(s) alltoall)" in out and "environment of arm(s) hybridep)" in out
    assert f"deep_ep {site.resolve()}/deep_ep/__init__.py provider=nvidia Buffer=True HybridEPBuffer=True" in out
    assert re.search(r"mbs1_overlap-off +hybridep +run\n.*dispatcher flex/hybridep deepep_impl nvidia", out)
    assert re.search(r"mbs1_overlap-off +alltoall +run\n.*dispatcher alltoall deepep_impl uccl", out)
    # a folder without the build: the arm is blocked with the probe's one-line reason, not rejected by a rule
    out = dry_run(capsys, "--engine", "bridge", "--gpus", "4", "--arms", "alltoall", "hybridep", "--hybridep-dir",
                  str(tmp_path / "missing"), "--mbs", "1", "--overlap", "off")
    assert "hybridep-uccl" not in out
    assert re.search(r"arm hybridep: blocked by the probe \(this host\): deep_ep ", out)
    assert re.search(r"mbs1_overlap-off +hybridep +blocked\n.*deepep_impl nvidia", out)
    # without the option the same grid keeps today's verdict: the hybridep arm planned with uccl, rejected
    out = dry_run(capsys, "--engine", "bridge", "--gpus", "4", "--arms", "alltoall", "hybridep", "--mbs", "1",
                  "--overlap", "off", "--deepep-impl", "uccl")
    assert "arm hybridep: every point rejected by [hybridep-uccl]" in out
    assert out.count("probe (child process") == 1


def test_probe_blocks_a_hybridep_arm_whose_deep_ep_is_not_the_dir(tmp_path: Path) -> None:
    site = tmp_path / "site"
    p = {"deep_ep_file": "/elsewhere/deep_ep/__init__.py", "provider": "nvidia", "deep_ep_has_hybridep": True}
    assert "not from" in ab.probe_blocks("hybridep", p, "nvidia", site)
    p["deep_ep_file"] = str(site / "deep_ep" / "__init__.py")
    assert ab.probe_blocks("hybridep", p, "nvidia", site) is None
    assert "HAVE_HYBRIDEP=False" in ab.probe_blocks("hybridep", {**p, "megatron_have_hybridep": False}, "nvidia", site)
    assert "no HybridEPBuffer" in ab.probe_blocks("hybridep", {**p, "deep_ep_has_hybridep": False}, "nvidia", site)


def test_hybridep_env_leaves_uccls_pip_site_and_cuda12_runtime_off_the_path(tmp_path: Path) -> None:
    # What 4 x H200 ran on 2026-11-28: /tmp/uccl_site (uccl + nvidia-cuda-runtime-cu12) on PYTHONPATH for every arm,
    # so the hybridep arm loaded libcudart.so.12 beside torch's .so.13.
    hep = tmp_path / "hybridep"
    (hep / "deep_ep").mkdir(parents=True)
    (hep / "deep_ep" / "__init__.py").write_text("")
    uccl_site = tmp_path / "uccl_site"
    (uccl_site / "uccl").mkdir(parents=True)
    (uccl_site / "uccl" / "__init__.py").write_text("")
    cuda12 = tmp_path / "cuda12"
    (cuda12 / "nvidia" / "cuda_runtime" / "lib").mkdir(parents=True)
    (cuda12 / "nvidia" / "cuda_runtime" / "lib" / "libcudart.so.12").write_text("")
    stack = tmp_path / "stack"
    stack.mkdir()
    env, notes = ab.hybridep_env(hep, {"PYTHONPATH": f"{stack}:{uccl_site}:{cuda12}", "CUDA_HOME": str(tmp_path)})
    assert env["PYTHONPATH"].split(":") == [str(hep.resolve()), str(stack)]
    assert sum("left off PYTHONPATH" in n for n in notes) == 2
    # the UCCL arm keeps them: it needs both
    uccl = tmp_path / "uccl"
    (uccl / "deep_ep").mkdir(parents=True)
    (uccl / "deep_ep" / "__init__.py").write_text("")
    env, _ = ab.uccl_env(uccl, {"PYTHONPATH": f"{stack}:{uccl_site}:{cuda12}"})
    assert str(uccl_site) in env["PYTHONPATH"].split(":") and str(cuda12) in env["PYTHONPATH"].split(":")


# --- issue 43 item 4: the host-side verdict finds the CloudAI the set-up installed into its own folder ---
def _host_without_cloudai(tmp_path: Path) -> tuple[Path, Path]:
    """(a site-packages of this venv without CloudAI, a CloudAI site holding only CloudAI): the GPU host's layout,
    where the bridge stack's interpreter has no CloudAI and gpu_cloudai_ab_run.sh installed it into its own site."""
    import cloudai

    real = Path(cloudai.__file__).parent.parent
    stack, site = tmp_path / "stack", tmp_path / "cloudai_site"
    stack.mkdir()
    site.mkdir()
    for entry in real.iterdir():
        if not entry.name.startswith("cloudai") or entry.name.startswith("cloudai_mbridge"):
            (stack / entry.name).symlink_to(entry)
    (site / "cloudai").symlink_to(real / "cloudai")
    return stack, site


@pytest.mark.parametrize("given", [True, False])
def test_the_ab_verdict_finds_cloudai_in_the_site_it_was_given(tmp_path: Path, given: bool) -> None:
    import subprocess
    import sys

    stack, site = _host_without_cloudai(tmp_path)
    code = ("import sys, importlib.util; import gpu_dispatcher_ab as g\n"
            "assert importlib.util.find_spec('cloudai') is None, 'cloudai leaked into the stack'\n"
            "where = g.find_cloudai()\n"
            "print('WHERE', where)\n"
            "import cloudai.core; print('CLOUDAI', cloudai.__file__)\n")
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": f"{ROOT}:{ROOT / 'benchmarks'}:{stack}", "HOME": str(tmp_path),
           "PYTHONDONTWRITEBYTECODE": "1", "CLOUDAI_MBRIDGE_AUTOLOAD": "0"}
    if given:
        env["MBRIDGE_CLOUDAI_SITE"] = str(site)
    proc = subprocess.run([sys.executable, "-S", "-c", code], env=env, cwd=tmp_path, capture_output=True, text=True,
                          timeout=120)
    if given:
        assert proc.returncode == 0, proc.stderr[-2000:]
        assert f"WHERE {site}/cloudai (MBRIDGE_CLOUDAI_SITE)" in proc.stdout
        assert f"CLOUDAI {site}/cloudai/__init__.py" in proc.stdout
    else:  # /tmp/cloudai_site is not this test's to make: without the variable and that folder, nothing is found
        if Path(ab.CLOUDAI_SITE_DEFAULT, "cloudai").exists():
            pytest.skip(f"{ab.CLOUDAI_SITE_DEFAULT} exists on this machine")
        assert "WHERE None" in proc.stdout and "ModuleNotFoundError: No module named 'cloudai'" in proc.stderr
