"""How ``cloudai-mbridge preflight`` scales with the size of a DSE grid: fields of seven values each.

Method: a scenario whose Kimi-K2 test on 32 x 8 B300 / EFA sweeps the first k of tp, pp, ep, mbs (1..64 in powers of
two), gbs (256..16384) and seq_length (1024..65536), seven values each: k = 4, 5, 6 gives 2,401, 16,807 and 117,649
points (the last is the issue's "100k points: six fields of seven values"). Each size runs as a user runs it: a
fresh ``python -m cloudai_mbridge preflight ... --output-dir`` process (interpreter start, CloudAI import and parsing,
every point checked, by forked worker processes from 4,000 points on, one per CPU; the terminal table,
preflight.csv and preflight.html written), wall time by ``time.perf_counter`` around the child, CPU time (user +
system, the workers' included) and peak resident memory (of the largest single process: the parent or a worker) from
the child's ``wait4`` rusage, ``--repeats`` times per size. CPU time is printed because a shared machine's load moves
wall time. A run counts only when its preflight.csv holds a row for every point.
Reported per size: median/min/max wall seconds, CPU seconds, ms per point, peak MiB; the growth of the per-point time
from the smallest to the largest size (1.0 = linear); the RESULT is the largest size's median wall time scaled to
100,000 points.

Run: ``python3 benchmarks/preflight_scale.py [--fields 4 5 6] [--repeats 1]``
"""

from __future__ import annotations

import argparse
import csv
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SYSTEM = ROOT / "conf" / "system" / "slurm_b300_efa.toml"
SEVEN = {
    "tp": [1, 2, 4, 8, 16, 32, 64],
    "pp": [1, 2, 4, 8, 16, 32, 64],
    "ep": [1, 2, 4, 8, 16, 32, 64],
    "mbs": [1, 2, 4, 8, 16, 32, 64],
    "gbs": [256, 512, 1024, 2048, 4096, 8192, 16384],
    "seq_length": [1024, 2048, 4096, 8192, 16384, 32768, 65536],
}


def write_conf(root: Path, fields: int) -> Path:
    (root / "test").mkdir(parents=True)
    (root / "test_scenario").mkdir(parents=True)
    sweep = "\n".join(f"{k} = {v}" for k, v in list(SEVEN.items())[:fields])
    (root / "test" / "grid.toml").write_text(
        'name = "grid"\ndescription = "preflight scale"\ntest_template_name = "MBridgeTraining"\n'
        '[cmd_args]\nmodel = "kimi_k2"\ngpu = "b300"\ntrain_iters = 24\ndeepep_impl = "uccl"\n'
        'dispatcher = "deepep"\ncontainer_image = "nvcr.io/nvidia/nemo:26.04.01"\n' + sweep + "\n"
    )
    scenario = root / "test_scenario" / "grid.toml"
    scenario.write_text('name = "grid"\n[[Tests]]\nid = "grid"\ntest_name = "grid"\nnum_nodes = 32\n'
                        'time_limit = "01:00:00"\n')
    return scenario


def run_once(scenario: Path, out: Path, cwd: Path) -> tuple[float, float, float, str, int]:
    """(wall s, CPU s, peak MiB, the summary line, rows in preflight.csv) of one preflight process."""
    argv = [sys.executable, "-m", "cloudai_mbridge", "--log-file", str(cwd / "preflight.log"), "preflight",
            "--system-config", str(SYSTEM), "--test-scenario", str(scenario), "--output-dir", str(out)]
    with open(cwd / "stdout.txt", "wb") as so, open(cwd / "stderr.txt", "wb") as se:
        t0 = time.perf_counter()
        proc = subprocess.Popen(argv, cwd=cwd, stdout=so, stderr=se)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    text = (cwd / "stdout.txt").read_text(errors="replace")
    if proc.returncode not in (0, 1) or "Traceback" in (cwd / "stderr.txt").read_text(errors="replace"):
        raise SystemExit(f"preflight failed (rc {proc.returncode}):\n{text[-2000:]}")
    summary = next((ln for ln in text.splitlines() if ln.startswith("preflight ")), "")
    with open(out / "preflight.csv", newline="") as f:
        rows = sum(1 for _ in csv.reader(f)) - 1
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024, summary, rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fields", type=int, nargs="+", default=[4, 5, 6])
    ap.add_argument("--repeats", type=int, default=1)
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT))
    from cloudai_mbridge.rules.sweep import workers_for

    print(f"method: fresh `python -m cloudai_mbridge preflight --output-dir` per size, {args.repeats} repetition(s); "
          f"wall by perf_counter, CPU (workers included) and peak RSS (largest process) by wait4; {os.cpu_count()} "
          f"CPUs, {workers_for(10**6)} worker process(es) from 4,000 points, load average {os.getloadavg()[0]:.1f} at "
          "start")
    per_point = {}
    walls = {}
    with tempfile.TemporaryDirectory(prefix="mbridge-preflight-scale-") as tmp:
        for k in args.fields:
            points = 7**k
            case = Path(tmp) / f"k{k}"
            scenario = write_conf(case, k)
            runs = [run_once(scenario, case / f"out{i}", case) for i in range(args.repeats)]
            short = [r[4] for r in runs if r[4] != points]
            if short:
                raise SystemExit(f"preflight.csv of the {points}-point grid holds {short[0]} rows: no number")
            wall = [r[0] for r in runs]
            med = statistics.median(wall)
            walls[points], per_point[points] = med, med / points
            print(f"{points} points ({k} fields x 7 values): wall median {med:.2f} s (min {min(wall):.2f}, max "
                  f"{max(wall):.2f}), CPU {statistics.median(r[1] for r in runs):.2f} s, "
                  f"{med / points * 1000:.3f} ms per point, peak {max(r[2] for r in runs):.0f} MiB; {runs[-1][3]}")
    small, large = min(walls), max(walls)
    print(f"growth: time per point at {large} points is {per_point[large] / per_point[small]:.2f} x that at {small} "
          "(<= 1: no worse than linear)")
    print(f"RESULT preflight_s_per_100k_points={walls[large] * 100_000 / large:.1f} s")


if __name__ == "__main__":
    main()
