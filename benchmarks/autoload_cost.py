"""What the plugin's ``.pth`` hook costs an interpreter that never imports CloudAI (issue 42: under 1 ms).

Method. Two fresh venvs of the same Python (``venv``, no packages): ``without`` has nothing else, ``with`` has this
checkout's wheel installed (``pip wheel --no-deps``; the .pth lands at the root of site-packages as from PyPI). Three
arms, each ``python -c pass`` started as a fresh process: ``without``, ``with`` and ``with`` under
``CLOUDAI_MBRIDGE_AUTOLOAD=0``. ``--pairs`` rounds, each running the three arms once in a rotated order; the wall time
of each start is measured around ``subprocess.run`` (perf_counter). The cost of an arm is the median of its per-round
differences to ``without`` in the same round, with a 95 % bootstrap interval of that median (2,000 resamples of the
rounds). Beside it, ``-X importtime``'s own accounting of the plugin's modules (median over ``--importtime-runs``
starts; importtime's bookkeeping inflates it), and, where valgrind is installed, the instructions each arm executes
(callgrind: the same count at every start, whatever else the machine does).

Run (any machine, no GPU):
    python3 benchmarks/autoload_cost.py [--pairs 300] [--keep /tmp/autoload_venvs]
Prints ``RESULT autoload_hook_cost_ms=<x> ms`` and ``RESULT autoload_off_cost_ms=<x> ms`` (each with its interval)
and ``RESULT autoload_importtime_ms=<x> ms``.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def make_venvs(base: Path) -> tuple[Path, Path]:
    wheels = base / "wheel"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w",
                    str(wheels), str(ROOT)], check=True)
    pythons = []
    for name in ("without", "with"):
        venv = base / name
        if not (venv / "bin" / "python").exists():
            subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
        pythons.append(venv / "bin" / "python")
    wheel = next(wheels.glob("cloudai_mbridge-*.whl"))
    subprocess.run([sys.executable, "-m", "pip", "--python", str(pythons[1]), "install", "-q", "--no-deps",
                    "--force-reinstall", str(wheel)], check=True)
    return pythons[0], pythons[1]


def start_s(python: Path, env: dict[str, str]) -> float:
    t0 = time.perf_counter()
    subprocess.run([str(python), "-c", "pass"], env=env, check=True)
    return time.perf_counter() - t0


def median_interval(diffs: list[float], rng: random.Random) -> tuple[float, float, float]:
    meds = sorted(statistics.median(rng.choices(diffs, k=len(diffs))) for _ in range(2000))
    return statistics.median(diffs), meds[50], meds[1949]


def importtime_ms(python: Path, env: dict[str, str], runs: int) -> float:
    totals = []
    for _ in range(runs):
        err = subprocess.run([str(python), "-X", "importtime", "-c", "pass"], env=env, capture_output=True,
                             text=True, check=True).stderr
        # "import time: self [us] | cumulative | name": the plugin's own modules, self time
        totals.append(sum(int(line.split("|")[0].split(":")[1]) for line in err.splitlines()
                          if "cloudai_mbridge" in line) / 1000)
    return statistics.median(totals)


def instructions(python: Path, env: dict[str, str], out: Path) -> int | None:
    if shutil.which("valgrind") is None:
        return None
    err = subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", str(python), "-c", "pass"],
                         env=env, capture_output=True, text=True).stderr
    found = [line.split(":")[-1].strip() for line in err.splitlines() if "Collected :" in line]
    return int(found[0]) if found else None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pairs", type=int, default=300, help="rounds of the three arms (default 300)")
    ap.add_argument("--importtime-runs", type=int, default=30)
    ap.add_argument("--keep", type=Path, help="build the venvs here and keep them (default: a temporary folder)")
    args = ap.parse_args()
    base = args.keep or Path(tempfile.mkdtemp(prefix="autoload_cost."))
    base.mkdir(parents=True, exist_ok=True)
    try:
        without, with_ = make_venvs(base)
        env = {k: v for k, v in os.environ.items() if k != "CLOUDAI_MBRIDGE_AUTOLOAD"}
        off = {**env, "CLOUDAI_MBRIDGE_AUTOLOAD": "0"}
        arms = [("without", without, env), ("with", with_, env), ("with_off", with_, off)]
        for _, py, e in arms:  # warm the page cache and the .pyc files
            for _ in range(5):
                start_s(py, e)
        times: dict[str, list[float]] = {name: [] for name, _, _ in arms}
        for r in range(args.pairs):
            k = r % len(arms)
            for name, py, e in arms[k:] + arms[:k]:
                times[name].append(start_s(py, e))
            if (r + 1) % 50 == 0:
                print(f"  {r + 1}/{args.pairs} rounds", file=sys.stderr, flush=True)
        rng = random.Random(1234)
        print(f"method: {args.pairs} rounds x 3 arms of `python -c pass`, order rotated per round; Python "
              f"{sys.version.split()[0]} on {os.uname().machine}, {os.cpu_count()} CPUs; cost = median per-round "
              "difference to the venv without the plugin, 95 % bootstrap interval of that median")
        for name, _, _ in arms:
            print(f"  {name:9s} median {statistics.median(times[name]) * 1e3:6.2f} ms  "
                  f"(min {min(times[name]) * 1e3:.2f}, max {max(times[name]) * 1e3:.2f})")
        results = {}
        for name in ("with", "with_off"):
            diffs = [(a - b) * 1e3 for a, b in zip(times[name], times["without"], strict=True)]
            results[name] = median_interval(diffs, rng)
        it = importtime_ms(with_, env, args.importtime_runs)
        counts = {name: instructions(py, e, base / f"callgrind.{name}") for name, py, e in arms}
        if None not in counts.values():
            print("instructions (callgrind): " + ", ".join(f"{n} {c:,}" for n, c in counts.items()))
        med, lo, hi = results["with"]
        print(f"RESULT autoload_hook_cost_ms={med:.3f} ms [{lo:.3f} .. {hi:.3f}]")
        med, lo, hi = results["with_off"]
        print(f"RESULT autoload_off_cost_ms={med:.3f} ms [{lo:.3f} .. {hi:.3f}]")
        print(f"RESULT autoload_importtime_ms={it:.3f} ms (-X importtime, self time of cloudai_mbridge modules, "
              f"median of {args.importtime_runs})")
        if None not in counts.values():
            print(f"RESULT autoload_hook_instructions={counts['with'] - counts['without']} instructions "
                  f"(off: {counts['with_off'] - counts['without']})")
        return 0
    finally:
        if args.keep is None:
            shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
