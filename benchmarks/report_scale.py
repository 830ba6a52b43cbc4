"""How ``cloudai-mbridge generate-report`` scales with the number of runs of an A/B scenario.

Method: for each size N (default 10, 100, 1000 runs) write a results tree as a dry-run leaves it plus the logs a
finished run leaves: one scenario with one test sweeping ``gbs`` (N/2 values) x ``dispatcher`` (alltoall, deepep),
so N runs in N/2 A/B cells; per run CloudAI's ``<test>/0/<step>/`` folder with the ``mbridge_config.json`` the
generator writes for that point (one real dry-run of the first two points is the template), and two rank logs with
30 iterations in Megatron's format (tests/test_reports.py's iteration_line). The trees are built outside the timing.
Then ``generate-report`` runs as a user runs it: a fresh ``python -m cloudai_mbridge`` process, wall time by
``time.perf_counter`` around ``subprocess.run`` (interpreter start, CloudAI import, every scenario report: per-test
CSV/PNG, the A/B page, the status table), ``--repeats`` times per size. Reported per size: median, min, max wall
seconds and seconds per run; the growth from the smallest to the largest size per run (1.0 = linear); the RESULT is
the median at 1,000 runs (scaled linearly from the largest size when that is not 1,000).

Run: ``python3 benchmarks/report_scale.py [--sizes 10 100 1000] [--repeats 3]``
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
SYSTEM = ROOT / "conf" / "system" / "slurm_h100_ib.toml"
ITERS = 30
TEST = """name = "case"
description = "report scale"
test_template_name = "MBridgeTraining"
[cmd_args]
model = "kimi_k2_proxy"
gpu = "h100"
tp = 1
ep = 8
gbs = {gbs}
mbs = 1
train_iters = {iters}
dispatcher = ["alltoall", "deepep"]
"""
SCENARIO = 'name = "case"\n[[Tests]]\nid = "case"\ntest_name = "case"\nnum_nodes = 1\n'


def build(tmp: Path, n: int) -> tuple[Path, Path]:
    """A results tree of ``n`` finished runs (n/2 seeds x 2 dispatchers); returns (scenario TOML, results root)."""
    from helpers import dry_run
    from test_reports import iteration_line

    sizes = [16 * k for k in range(1, n // 2 + 1)]
    (tmp / "test").mkdir(parents=True)
    (tmp / "test_scenario").mkdir()
    (tmp / "test" / "case.toml").write_text(TEST.format(iters=ITERS, gbs=sizes))
    scenario = tmp / "test_scenario" / "case.toml"
    scenario.write_text(SCENARIO)
    # the template: a real dry-run of the first two points (CloudAI waits 1 s per DSE point, so not all N)
    small = tmp / "template"
    (small / "test").mkdir(parents=True)
    (small / "test_scenario").mkdir()
    (small / "test" / "case.toml").write_text(TEST.format(iters=ITERS, gbs=16))
    (small / "test_scenario" / "case.toml").write_text(SCENARIO)
    res = dry_run(SYSTEM, small / "test_scenario" / "case.toml", small)
    if res.returncode != 0:
        raise SystemExit(res.output)
    template_root = next(res.output_dir.iterdir())
    configs = {json.loads(c.read_text())["dispatcher"]: json.loads(c.read_text())
               for c in template_root.rglob("mbridge_config.json")}
    root = tmp / "results" / "case_bench"
    step = 0
    for seed, gbs in enumerate(sizes, start=1):
        for dispatcher in ("alltoall", "deepep"):  # CloudAI's order: the last field varies fastest
            step += 1
            run = root / "case" / "0" / str(step)
            (run / "logs").mkdir(parents=True)
            config = {**configs[dispatcher], "gbs": gbs}
            (run / "mbridge_config.json").write_text(json.dumps(config, indent=2, sort_keys=True))
            base = 5000.0 if dispatcher == "alltoall" else 4000.0
            lines = [iteration_line(i + 1, ITERS, base + (i * 37 + seed * 11) % 200, 11.0 - 0.1 * i)
                     for i in range(ITERS)]
            built = "flex" if dispatcher == "deepep" else "alltoall"
            backend = "deepep" if built == "flex" else "none"
            world = config["world_size"]
            for rank in range(world):
                text = [f"rank {rank} up"]
                if rank == 0:
                    text += [f"MBRIDGE_DISPATCHER requested={dispatcher} built={built} backend={backend}",
                             "MBRIDGE_DEEP_EP module=none provider=none"]
                if rank == world - 1:
                    text += lines
                (run / "logs" / f"rank-{rank}.log").write_text("\n".join(text) + "\n")
    shutil.rmtree(small)
    return scenario, root


def time_report(scenario: Path, root: Path, cwd: Path) -> float:
    for old in root.glob("mbridge_*"):
        old.unlink()
    argv = [sys.executable, "-m", "cloudai_mbridge", "--log-file", str(cwd / "report.log"), "generate-report",
            "--system-config", str(SYSTEM), "--test-scenario", str(scenario), "--result-dir", str(root)]
    t0 = time.perf_counter()
    proc = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - t0
    if proc.returncode != 0 or not (root / "mbridge_ab.csv").is_file():
        raise SystemExit(f"generate-report failed (rc {proc.returncode}):\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}")
    return wall


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[10, 100, 1000])
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    print("method: wall time of a fresh `python -m cloudai_mbridge generate-report` on an A/B results tree of N "
          f"finished runs (N/2 cells, {ITERS} iterations each), {args.repeats} repetitions per size, trees built "
          "outside the timing")
    per_run = {}
    medians = {}
    with tempfile.TemporaryDirectory(prefix="mbridge-report-bench-") as tmp:
        for n in args.sizes:
            case = Path(tmp) / f"n{n}"
            case.mkdir()
            scenario, root = build(case, n)
            walls = [time_report(scenario, root, case) for _ in range(args.repeats)]
            med = statistics.median(walls)
            medians[n], per_run[n] = med, med / n
            sd = statistics.stdev(walls) if len(walls) > 1 else 0.0
            print(f"{n} runs: median {med:.2f} s, min {min(walls):.2f}, max {max(walls):.2f}, stdev {sd:.2f} "
                  f"(n={len(walls)}); {med / n * 1000:.1f} ms per run")
            shutil.rmtree(case)
    small, large = min(args.sizes), max(args.sizes)
    growth = (medians[large] - medians[small]) / (large - small) / per_run[large] if large > small else 1.0
    print(f"growth: per-run time at {large} runs is {per_run[large] / per_run[small]:.2f} x that at {small} runs; "
          f"marginal cost per run {(medians[large] - medians[small]) / max(large - small, 1) * 1000:.1f} ms "
          f"({growth:.2f} of the average: <= 1 means no worse than linear)")
    print(f"RESULT report_s_per_1000_runs={medians[large] * 1000 / large:.1f} s")


if __name__ == "__main__":
    main()
