"""Time ``cloudai-mbridge preflight`` on a 1,000-point Kimi-K2 grid next to ``cloudai-mbridge dry-run``.

Method: write a scenario whose test sweeps tp {1,2,4,8} x pp {1,2,4,8,16} x ep {8,16,32,64,128} x mbs {1,2,4,8,16}
x dispatcher {alltoall, deepep} (1,000 points, Kimi-K2 on 32 x 8 B300 / EFA) into a temporary conf folder, then run
each command as a user does: a fresh ``python -m cloudai_mbridge`` process (interpreter start, CloudAI import and
parsing included), wall time by ``time.perf_counter`` around ``subprocess.run``, ``--repeats`` times. The dry-run
side runs a smaller grid (``--dry-run-points``, a prefix of the same axes: tp x mbs x dispatcher... see
``small_axes``) because CloudAI's dry-run waits ``monitor_interval`` = 1 s per DSE point; its seconds per point,
measured on that grid, are scaled to 1,000 points. Reported: the median of the repetitions (the RESULT), min, max and
standard deviation, and the ratio of the two medians per 1,000 points.

Run: ``python3 benchmarks/preflight_grid.py [--repeats R] [--dry-run-repeats R] [--dry-run-points N]``
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SYSTEM = ROOT / "conf" / "system" / "slurm_b300_efa.toml"

AXES = {
    "tp": [1, 2, 4, 8],
    "pp": [1, 2, 4, 8, 16],
    "ep": [8, 16, 32, 64, 128],
    "mbs": [1, 2, 4, 8, 16],
    "dispatcher": ["alltoall", "deepep"],
}
SMALL_AXES = {"tp": [8], "pp": [8], "ep": [16, 32], "mbs": [1, 2, 4, 8], "dispatcher": ["alltoall", "deepep"]}


def _toml_list(values: list) -> str:
    return "[" + ", ".join(f'"{v}"' if isinstance(v, str) else str(v) for v in values) + "]"


def write_conf(root: Path, axes: dict[str, list]) -> Path:
    (root / "test").mkdir(parents=True)
    (root / "test_scenario").mkdir(parents=True)
    sweep = "\n".join(f"{k} = {_toml_list(v)}" for k, v in axes.items())
    (root / "test" / "grid.toml").write_text(
        'name = "kimi_k2_grid"\ndescription = "preflight benchmark grid"\ntest_template_name = "MBridgeTraining"\n'
        '[cmd_args]\nmodel = "kimi_k2"\ngpu = "b300"\ngbs = 512\ntrain_iters = 24\ndeepep_impl = "uccl"\n'
        'container_image = "nvcr.io/nvidia/nemo:26.04.01"\n' + sweep + "\n"
    )
    scenario = root / "test_scenario" / "grid.toml"
    scenario.write_text(
        'name = "kimi_k2_grid"\n[[Tests]]\nid = "grid"\ntest_name = "kimi_k2_grid"\nnum_nodes = 32\n'
        'time_limit = "01:00:00"\n'
    )
    return scenario


def run_cli(verb: str, scenario: Path, out: Path, cwd: Path) -> tuple[float, subprocess.CompletedProcess]:
    argv = [sys.executable, "-m", "cloudai_mbridge", "--log-file", str(cwd / f"{verb}.log"), verb,
            "--system-config", str(SYSTEM), "--test-scenario", str(scenario), "--output-dir", str(out)]
    t0 = time.perf_counter()
    proc = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, check=False)
    return time.perf_counter() - t0, proc


def stats(label: str, values: list[float]) -> str:
    sd = statistics.stdev(values) if len(values) > 1 else 0.0
    return (f"{label}: median {statistics.median(values):.3f}, min {min(values):.3f}, max {max(values):.3f}, "
            f"stdev {sd:.3f} (n={len(values)})")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--dry-run-repeats", type=int, default=3)
    args = ap.parse_args()
    points = len(list(itertools.product(*AXES.values())))
    small = len(list(itertools.product(*SMALL_AXES.values())))

    with tempfile.TemporaryDirectory(prefix="mbridge-preflight-bench-") as tmp:
        tmp_path = Path(tmp)
        big = write_conf(tmp_path / "big", AXES)
        little = write_conf(tmp_path / "small", SMALL_AXES)

        pre_s = []
        for i in range(args.repeats):
            wall, proc = run_cli("preflight", big, tmp_path / f"pre{i}", tmp_path)
            if proc.returncode not in (0, 1) or "Traceback" in proc.stderr:
                raise SystemExit(f"preflight failed (rc {proc.returncode}):\n{proc.stdout[-2000:]}{proc.stderr}")
            pre_s.append(wall)
        verdict = proc.stdout.strip().splitlines()[-4:]

        pre_small, dry_small = [], []
        for i in range(args.dry_run_repeats):
            wall, proc = run_cli("preflight", little, tmp_path / f"pres{i}", tmp_path)
            pre_small.append(wall)
            wall, proc = run_cli("dry-run", little, tmp_path / f"dry{i}", tmp_path)
            if proc.returncode != 0:
                raise SystemExit(f"dry-run failed (rc {proc.returncode}):\n{proc.stdout[-3000:]}{proc.stderr}")
            dry_small.append(wall)

    pre_per_1000 = [s * 1000 / points for s in pre_s]
    dry_per_1000 = [s * 1000 / small for s in dry_small]
    print(f"grid: {points} Kimi-K2 points ({' x '.join(f'{k} {v}' for k, v in AXES.items())}) on 32 x 8 B300 / EFA")
    print(f"dry-run grid: {small} points ({' x '.join(f'{k} {v}' for k, v in SMALL_AXES.items())})")
    print("method: wall time of a fresh `python -m cloudai_mbridge <verb>` process (start, CloudAI import, parse, "
          f"check / generate), {args.repeats} preflight repetitions on the full grid, {args.dry_run_repeats} "
          "repetitions of each verb on the small grid")
    print("preflight said: " + " / ".join(verdict))
    print(stats(f"preflight, {points} points (s)", pre_s))
    print(stats(f"preflight, {small} points (s)", pre_small))
    print(stats(f"dry-run, {small} points (s)", dry_small))
    print(stats("dry-run scaled to 1000 points (s)", dry_per_1000))
    ratio = statistics.median(dry_per_1000) / statistics.median(pre_per_1000)
    print(f"RESULT preflight_s_per_1000_points={statistics.median(pre_per_1000):.2f} s")
    print(f"RESULT dry_run_s_per_1000_points={statistics.median(dry_per_1000):.1f} s")
    print(f"RESULT dry_run_over_preflight_ratio={ratio:.0f} x")


if __name__ == "__main__":
    main()
