"""How the log parsers that generate-report uses scale with the length of a log (issue 46: a rank log of 10^6
iterations, about 290 MB, took 97 s and 3.2 GB to report).

Writes into a temporary folder (removed at the end):

- a training run: ``mbridge_config.json`` of tests/fixtures/logs/bridge/sft (world size 1, so rank 0 is the last
  rank, the one whose log holds the iteration lines) and ``logs/rank-0.log`` of N iteration lines in that fixture's
  exact Megatron-Bridge format (timestamp, 13 fields, two MoE losses), with a memory report and Bridge's Step Time
  line every 100 iterations;
- a refit run: a two-rank ``mbridge_config.json`` and a rank-0 log of N ``REFIT_ITER iter=<i> time_ms=<x>`` lines (the
  payload's form, metrics/refit.py) with its REFIT_STATS / REFIT_VERIFY / summary lines.

Then each is parsed by the entry point generate-report's reports call (metrics.parse_training_run,
metrics.parse_refit_run), then turned into the per-test table generate-report writes (metrics.iterations_csv for
training, refit_frame for refit), each in a fresh child process, once per size (N = 10^5, 10^6 by default).
The training table is what workloads/reporting.py writes: streamed into mbridge_iterations.csv where the
code has metrics.training.iterations_csv_chunks (issue 46), the whole text (iterations_csv) before.
Bounded memory (issue 46): the RESULT lines give each kind's peak (parse and table) at 10^6 iterations and its growth
from 10^5 to 10^6 (flat when the parse keeps at most metrics.stats.SAMPLE_CAP values of a log, whatever its length),
and the parse time per 10^5 lines at each size (the same at both when the time is linear in the log).
Wall time: perf_counter around the call in the child. Peak memory: the child's peak resident set size (VmHWM of
/proc/self/status; getrusage's ru_maxrss before 2026-11-29 18:00, which on Linux also carries the parent's resident
size at the fork across the exec: a parent holding 100 MB showed as +100 MB in a child that never held them) minus its
RSS just before the call (the interpreter and the imports), so the number is what the parse itself adds. One run
per size (a 10^6 parse takes minutes on a loaded 2-core machine); the growth line compares time and memory per
iteration between the smallest and the largest size (1.0 = linear).

Usage: .venv/bin/python benchmarks/log_parse_scale.py [--sizes 100000,1000000] [--kinds training,refit]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SFT = ROOT / "tests" / "fixtures" / "logs" / "bridge" / "sft"

LINE = ("[2026-11-24 14:52:{s:02d}] iteration {i:8d}/{n:8d} | consumed samples: {c:12d} | elapsed time per iteration "
        "(ms): {ms:.1f} | throughput per GPU (TFLOP/s/GPU): 8.9 | learning rate: 1.538462E-05 | global batch size: "
        "{gbs:5d} | lm loss: {loss:.6E} | seq_load_balancing_loss: 1.223444E+00 | load_balancing_loss: 0.000000E+00 "
        "| loss scale: 1.0 | grad norm: 42.450 | number of skipped iterations:   0 | number of nan iterations:   0 |\n")
MEMORY = ("[Rank 0] (after {i} iterations) memory (GB) | mem-allocated-gigabytes: 31.2 | mem-max-allocated-gigabytes: "
          "60.1 | mem-reserved-gigabytes: 64.0 | mem-max-reserved-gigabytes: 64.0 | mem-alloc-retires: 0\n")
STEP = "Step Time : 0.69s GPU utilization: 8.9MODEL_TFLOP/s/GPU\n"


ROUTING = ("MBRIDGE_ROUTING rank={rank} iteration={i} calls=61 hash={h:016x} dispatch_ms={d}.5 combine_ms=2.25 "
           "dispatcher_calls=122\n")
NOISE = "[rank0]: NCCL INFO comm 0x5 rank 0 nranks 2 - Init COMPLETE\n"


def write_training(run: Path, n: int, job: bool = False, routing: bool = False) -> int:
    """``job``: no rank logs; the lines in stdout.txt as ``srun --label`` writes them, world size 2: rank 1 (the last)
    prints the iteration lines, rank 0 the Step Time lines and an NCCL line an iteration. ``routing``: the payload's
    MBRIDGE_ROUTING line after every iteration line (payload/train/routing.py), as our payload prints them."""
    config = json.loads((SFT / "mbridge_config.json").read_text())
    world = 2 if job else 1
    config.update(train_iters=n, world_size=world, num_nodes=1, gpus_per_node=world)
    run.mkdir(parents=True, exist_ok=True)
    (run / "mbridge_config.json").write_text(json.dumps(config))
    if not job:
        (run / "logs").mkdir()
    path = run / "stdout.txt" if job else run / "logs" / "rank-0.log"
    last, zero = ("1: ", "0: ") if job else ("", "")
    gbs = config["gbs"]
    with open(path, "w", buffering=1 << 20) as fh:
        for i in range(1, n + 1):
            fh.write(last + LINE.format(s=i % 60, i=i, n=n, c=i * gbs, ms=680.0 + (i * 7919) % 97 / 10, gbs=gbs,
                                        loss=10.5 - i / (n * 2)))
            if routing:
                fh.write(last + ROUTING.format(rank=world - 1, i=i, h=i * 2654435761 % (1 << 64), d=i % 7))
            fh.write(zero + STEP)  # as Megatron-Bridge prints: a Step Time line after every iteration's line
            if job:
                fh.write(zero + NOISE)
            if i % 100 == 0:
                fh.write(zero + MEMORY.format(i=i))
    return path.stat().st_size


def write_refit(run: Path, n: int, job: bool = False) -> int:
    """``job``: no rank logs; rank 0's lines in stdout.txt with ``srun --label``'s ``0: ``, each iteration line
    followed by rank 1's copy with another time (never rank 0's), and rank 1's REFIT_ERROR line at the end."""
    run.mkdir(parents=True, exist_ok=True)
    (run / "mbridge_config.json").write_text(json.dumps({"workload": "refit", "world_size": 2, "num_nodes": 1,
                                                         "gpus_per_node": 2, "iterations": n}))
    if not job:
        (run / "logs").mkdir()
        (run / "logs" / "rank-1.log").write_text("ok\n")
    path = run / "stdout.txt" if job else run / "logs" / "rank-0.log"
    zero = "0: " if job else ""
    with open(path, "w", buffering=1 << 20) as fh:
        fh.write(f"{zero}REFIT_CONFIG {{}}\n")
        for i in range(n):
            ms = 45.0 + (i * 7919) % 97 / 100
            fh.write(f"{zero}REFIT_ITER iter={i} time_ms={ms:.2f}\n")
            if job:
                fh.write(f"1: REFIT_ITER iter={i} time_ms=9{ms:.2f}\n")
        fh.write(f"{zero}REFIT_STATS bytes_remote=1073741824 bytes_local=536870912 send_ops=512 recv_ops=384\n"
                 f"{zero}REFIT_VERIFY status=pass params=1234 mismatched=0 detail=bit-exact\n")
        if job:
            fh.write('1: REFIT_ERROR phase=exchange rank=1 message="NCCL error: unhandled system error"\n')
    return path.stat().st_size


WRITERS = {
    "training": write_training,
    "refit": write_refit,
    # issue 46: the other places a long log's lines were held (a run whose only log is the job's; routing lines)
    "training_job": lambda run, n: write_training(run, n, job=True),
    "refit_job": lambda run, n: write_refit(run, n, job=True),
    "training_routing": lambda run, n: write_training(run, n, routing=True),
}


CHILD = r"""
import json, resource, sys, time
from pathlib import Path
from cloudai_mbridge.metrics import iterations_csv, parse_refit_run, parse_training_run, refit_frame
def status_kib(field):
    for line in open("/proc/self/status"):
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
def rss_kib():
    return status_kib("VmRSS")
def peak_kib():  # this process's own peak: ru_maxrss also carries the parent's RSS at the fork across the exec
    return status_kib("VmHWM")
kind, run = sys.argv[1], Path(sys.argv[2])
before = rss_kib()
start = time.perf_counter()
kind = "refit" if kind.startswith("refit") else "training"
m = (parse_training_run if kind == "training" else parse_refit_run)(run)
wall = time.perf_counter() - start
peak = peak_kib()
start = time.perf_counter()
try:  # since issue 46: the per-test report streams its CSV into the file (workloads/reporting.py)
    from cloudai_mbridge.metrics.training import iterations_csv_chunks
except ImportError:  # before: the CSV's whole text
    iterations_csv_chunks = None
if kind == "training" and iterations_csv_chunks is not None:
    with open(run / "mbridge_iterations.csv", "w", encoding="utf-8", newline="") as fh:
        for chunk in iterations_csv_chunks(m):
            fh.write(chunk)
    table = (run / "mbridge_iterations.csv").stat().st_size
else:
    table = len(iterations_csv(m)) if kind == "training" else len(refit_frame(m))  # what the per-test report writes
table_s = time.perf_counter() - start
table_peak = peak_kib()
stats = m.iteration_time_ms if kind == "training" else m.time_ms
kept = len(m.iterations)  # the rows held after the parse: every iteration, or a sample past SAMPLE_CAP
n = kept if getattr(stats, "sample_stride", 1) == 1 else stats.n + stats.n_warmup
print(json.dumps({"wall_s": wall, "peak_mib": (peak - before) / 1024, "base_mib": before / 1024, "status": m.status,
                  "iterations": n, "kept": kept, "stride": getattr(stats, "sample_stride", 1), "table_s": table_s,
                  "table_peak_mib": (table_peak - before) / 1024}))
"""


def measure(kind: str, run: Path) -> dict:
    proc = subprocess.run([sys.executable, "-c", CHILD, kind, str(run)], capture_output=True, text=True,
                          cwd=ROOT, timeout=3600)
    if proc.returncode:
        raise SystemExit(f"{kind} parse of {run} failed: {proc.stderr[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="100000,1000000")
    ap.add_argument("--kinds", default="training,refit", help=f"which logs, of {', '.join(WRITERS)}")
    args = ap.parse_args()
    kinds = args.kinds.split(",")
    sizes = [int(s) for s in args.sizes.split(",")]
    print(f"method: each log written to a temp folder, parsed once per size in a fresh child process by "
          f"metrics.parse_training_run / parse_refit_run (generate-report's entry points); wall by perf_counter, peak "
          f"memory = VmHWM (the child's own peak) minus VmRSS before the call (the table's: the child's "
          f"whole peak, parse included); n=1 per size (no spread); "
          f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}")
    results: dict[str, dict[int, dict]] = {kind: {} for kind in kinds}
    tmp = Path(tempfile.mkdtemp(prefix="log_parse_scale."))
    try:
        for n in sizes:
            for kind in kinds:
                write = WRITERS[kind]
                run = tmp / f"{kind}-{n}"
                t0 = time.perf_counter()
                size = write(run, n)
                r = measure(kind, run)
                results[kind][n] = r
                sampled = f" (a 1-in-{r['stride']} sample)" if r["stride"] > 1 else ""
                print(f"{kind} {n:,} iterations ({size / 1e6:,.1f} MB log, written in {time.perf_counter() - t0:.1f} "
                      f"s): parse {r['wall_s']:.2f} s, peak +{r['peak_mib']:.0f} MiB over the {r['base_mib']:.0f} MiB "
                      f"of the interpreter; status {r['status']}, {r['iterations']:,} iterations read, "
                      f"{r['kept']:,} rows kept{sampled}; then its "
                      f"per-test table ({'refit_frame' if kind.startswith('refit') else 'mbridge_iterations.csv'}) "
                      f"{r['table_s']:.2f} s, peak +{r['table_peak_mib']:.0f} MiB", flush=True)
                if r["iterations"] != n:
                    raise SystemExit(f"{kind}: {r['iterations']} of {n} iterations read: no number")
                shutil.rmtree(run)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    small, large = min(sizes), max(sizes)
    for kind, by in results.items():
        t = (by[large]["wall_s"] / large) / (by[small]["wall_s"] / small)
        print(f"growth ({kind}): time per iteration at {large:,} is {t:.2f} x that at {small:,}; memory "
              f"{by[large]['peak_mib']:.0f} MiB at {large:,} vs {by[small]['peak_mib']:.0f} MiB at {small:,}")
    for kind, by in results.items():
        print(f"RESULT {kind}_parse_s_{large}_iterations={by[large]['wall_s']:.2f} s")
        print(f"RESULT {kind}_parse_peak_mib_{large}_iterations={by[large]['peak_mib']:.0f} MiB")
        print(f"RESULT {kind}_parse_and_table_peak_mib_{large}_iterations={by[large]['table_peak_mib']:.0f} MiB")
        for n in sizes:
            print(f"RESULT {kind}_parse_s_per_1e5_lines_at_{n}={by[n]['wall_s'] / n * 1e5:.2f} s")
    # bounded memory: the peak (parse and its per-test table) at 10^6 and what it grew by from 10^5, per kind, and the
    # worst kind unprefixed
    if 100_000 in sizes and 1_000_000 in sizes:
        peak = {kind: by[1_000_000]["table_peak_mib"] for kind, by in results.items()}
        growth = {kind: by[1_000_000]["table_peak_mib"] - by[100_000]["table_peak_mib"] for kind, by in results.items()}
        for kind in results:
            print(f"RESULT {kind}_log_parse_peak_mib_1e6={peak[kind]:.0f} MiB")
            print(f"RESULT {kind}_log_parse_peak_growth_1e5_to_1e6={growth[kind]:.0f} MiB")
        print(f"RESULT log_parse_peak_mib_1e6={max(peak.values()):.0f} MiB")
        print(f"RESULT log_parse_peak_growth_1e5_to_1e6={max(growth.values()):.0f} MiB")


if __name__ == "__main__":
    main()
