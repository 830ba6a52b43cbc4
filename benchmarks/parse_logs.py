"""How fast is the log parser next to `grep -c iteration` over the same bytes?

Method: generate one realistic training run folder (mbridge_config.json + logs/rank-<R>.log for every rank) in a
temporary directory: mostly NCCL INFO / warning noise in the formats NCCL, aws-ofi-nccl, UCCL-EP and PyTorch print,
the per-iteration line on the last rank only, Bridge's Step Time line on rank 0, memory reports on the data-parallel
rank-0 ranks, a few ranks with warnings that mention "error" (so the failure search takes its slower path there).
Both tools run once untimed (page cache warm), then alternately ``--repeat`` times each:

- grep: ``LC_ALL=C grep -c iteration <every rank log>`` (one process over all files);
- ours: ``parse_training_run(run_dir)``: every file scanned for failures and validity signals, the last rank's
  iterations parsed, steady-state statistics computed.

Reported: wall seconds (min, median, spread = (max - min) / median) and throughput in MB/s (10^6 bytes / s, from
the median); then the CPU seconds each tool used (user + system: grep's from the kernel's account of the finished
child, ours from the process clock, all threads), which a busy shared machine disturbs less than the wall time. The
last line is ``RESULT parse_vs_grep=<ours MB/s / grep MB/s> x`` (wall). The data is deleted at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from cloudai_mbridge.metrics import parse_training_run, training

TP, PP, EP, CP = 8, 8, 32, 1
GPUS_PER_NODE = 8
GBS, SEQ = 256, 4096
ITER_MS = 5793.1
N_ITERS = 1000


def _noise_pool(rank: int, host: str, rng: random.Random) -> list[str]:
    """Lines in the shapes a NCCL_DEBUG=INFO Megatron run prints on every rank."""
    pid, dev = 4000 + rank, rank % GPUS_PER_NODE
    tag = f"{host}:{pid}:{pid + rng.randint(20, 90)} [{dev}]"
    lines = []
    for _ in range(600):
        peer = rng.randrange(256)
        channel = rng.randrange(32)
        lines.append(
            rng.choice(
                (
                    f"{tag} NCCL INFO Channel {channel:02d}/0 : {rank}[{dev}] -> {peer}[{peer % 8}] [send] via "
                    f"NET/Libfabric/{dev}/GDRDMA",
                    f"{tag} NCCL INFO Channel {channel:02d}/0 : {peer}[{peer % 8}] -> {rank}[{dev}] [receive] via "
                    f"NET/Libfabric/{dev}/GDRDMA",
                    f"{tag} NCCL INFO Channel {channel:02d}/32 :    0   7   6   5   4   3   2   1   8  15  14  13  12",
                    f"{tag} NCCL INFO Trees [0] {peer}/-1/-1->{rank}->{peer - 1} [1] {peer}/-1/-1->{rank}->-1",
                    f"{tag} NCCL INFO Setting affinity for GPU {dev} to ffffff00,0000ffff,ff000000",
                    f"{tag} NCCL INFO comm 0x{rng.getrandbits(40):x} rank {rank} nRanks 256 nNodes 32 localRanks 8 "
                    f"localRank {dev} MNNVL 0",
                    f"{tag} NCCL INFO Connected all rings, use ring PXN 0 GDR 1",
                    f"{tag} NCCL INFO NCCL_PROTO set by environment to Simple",
                    f"{tag} NCCL INFO P2P Chunksize set to 131072",
                    f"{tag} NCCL INFO ncclCommInitRankConfig comm 0x{rng.getrandbits(40):x} rank {rank} nranks 256 "
                    f"cudaDev {dev} nvmlDev {dev} busId {dev}a000 commId 0x{rng.getrandbits(60):x} - Init COMPLETE",
                    "/usr/local/lib/python3.12/dist-packages/transformer_engine/pytorch/module/base.py:812: "
                    "UserWarning: To guarantee overlapping TP and SP collectives with the backward GEMMs, set "
                    "environment variable CUDA_DEVICE_MAX_CONNECTIONS = 1",
                    f"[WARNING  | megatron.core.transformer.moe.moe_utils]: expert bias update skipped for layer "
                    f"{rng.randrange(61)}",
                )
            )
        )
    return lines


def _rank_text(rank: int, world: int, size: int, dp0: bool, noisy_error: bool, rng: random.Random) -> str:
    host = f"ip-10-1-{rank // GPUS_PER_NODE}-{rank % 250}"
    pid, dev = 4000 + rank, rank % GPUS_PER_NODE
    head = [
        f"{host}:{pid}:{pid} [{dev}] NCCL INFO Bootstrap: Using eth0:10.1.{rank // 8}.{rank % 250}<0>",
        f"{host}:{pid}:{pid} [{dev}] NCCL INFO NET/OFI Initializing aws-ofi-nccl 1.16.0",
        f"{host}:{pid}:{pid} [{dev}] NCCL INFO NET/OFI Selected provider is efa, fabric is efa-direct (found 16 nics)",
        f"{host}:{pid}:{pid} [{dev}] NCCL INFO Using network Libfabric",
        f"Registered proxies for device {dev} (high-throughput mode)",
        f"[RDMA] Selected NIC rdmap{16 + dev * 16}s0 (index {dev * 2}) for GPU {dev}, NUMA node {dev // 4}",
    ]
    if rank == 0:
        head += [
            "MBRIDGE_DISPATCHER requested=deepep built=flex backend=deepep",
            "MBRIDGE_DEEP_EP module=/opt/uccl/ep/deep_ep_wrapper/deep_ep/__init__.py provider=uccl",
        ]
    if noisy_error:
        head.append(
            "/usr/local/lib/python3.12/dist-packages/torch/distributed/c10d_logger.py:83: UserWarning: "
            "barrier(): using the device under current context; on error, check NCCL_DEBUG output"
        )
    pool = _noise_pool(rank, host, rng)
    block = "\n".join(rng.choice(pool) for _ in range(2000)) + "\n"
    out = ["\n".join(head) + "\n"]
    written = len(out[0])
    per_iter = max(1, (size - written) // N_ITERS)
    for iteration in range(1, N_ITERS + 1):
        # Noise since the previous iteration: a slice of the block, cut at a line end.
        begin = (iteration * 7919) % len(block)
        begin = block.rfind("\n", 0, begin) + 1
        stop = block.find("\n", begin + per_iter)
        chunk = block[begin : stop + 1] if stop != -1 else block[begin:]
        out.append(chunk)
        written += len(chunk)
        extra = []
        if rank == world - 1:
            ms = ITER_MS * (1.0 + rng.uniform(-0.01, 0.01)) * (6.0 if iteration == 1 else 1.0)
            extra.append(
                f" [2026-06-04 08:41:07] iteration {iteration:8d}/{N_ITERS:8d} | consumed samples: "
                f"{iteration * GBS:12d} | elapsed time per iteration (ms): {ms:.1f} | throughput per GPU "
                f"(TFLOP/s/GPU): 178.6 | learning rate: 1.000000E-05 | global batch size: {GBS:5d} | "
                f"lm loss: {11.9 - iteration * 1e-4:.6E} | load_balancing_loss: 1.020033E+00 | loss scale: 1.0 | "
                f"grad norm: 3.214 | number of skipped iterations:   0 | number of nan iterations:   0 |"
            )
        if rank == 0:
            extra.append(f"Step Time : {ITER_MS / 1000:.2f}s GPU utilization: 178.6MODEL_TFLOP/s/GPU")
        if dp0 and iteration in (1, 2):
            extra.append(
                f"[Rank {rank}] (after {iteration} iterations) memory (MB) | allocated: 54250.98 | max allocated: "
                f"61234.50 | reserved: 63480.00 | max reserved: 63480.00"
            )
        if extra:
            text = "\n".join(extra) + "\n"
            out.append(text)
            written += len(text)
    return "".join(out)


def generate(run_dir: Path, size_mb: float, world: int, seed: int) -> int:
    rng = random.Random(seed)
    logs = run_dir / "logs"
    logs.mkdir(parents=True)
    config = {
        "workload": "training",
        "tp": TP,
        "pp": PP,
        "ep": EP,
        "etp": 1,
        "cp": CP,
        "vp": 1,
        "mbs": 4,
        "gbs": GBS,
        "seq_length": SEQ,
        "dispatcher": "deepep",
        "world_size": world,
        "num_nodes": world // GPUS_PER_NODE,
        "gpus_per_node": GPUS_PER_NODE,
    }
    (run_dir / "mbridge_config.json").write_text(json.dumps(config, indent=2))
    per_rank = max(1, int(size_mb * 1e6) // world)
    dp_stride = TP * CP
    dp = world // (TP * CP * PP)
    total = 0
    for rank in range(world):
        dp0 = (rank // dp_stride) % dp == 0
        text = _rank_text(rank, world, per_rank, dp0, noisy_error=rank % 20 == 7, rng=rng)
        data = text.encode()
        (logs / f"rank-{rank}.log").write_bytes(data)
        total += len(data)
    return total


def _child_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _time(fn, repeat: int, cpu: list[float], clock=time.process_time) -> list[float]:
    """Wall seconds of each call; the CPU seconds ``clock`` counted go to ``cpu``."""
    times = []
    for _ in range(repeat):
        start, start_cpu = time.perf_counter(), clock()
        fn()
        times.append(time.perf_counter() - start)
        cpu.append(clock() - start_cpu)
    return times


def _describe(name: str, times: list[float], size: int) -> float:
    med = statistics.median(times)
    spread = (max(times) - min(times)) / med if med else 0.0
    rate = size / 1e6 / med
    print(f"{name:>6}: min {min(times):.3f} s  median {med:.3f} s  spread {spread * 100:.1f} %  {rate:,.0f} MB/s")
    return rate


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", type=float, default=1024.0, help="total size of the rank logs, 10^6 bytes")
    parser.add_argument("--ranks", type=int, default=256, help="world size (number of rank logs)")
    parser.add_argument("--repeat", type=int, default=5, help="timed repetitions of each tool")
    parser.add_argument("--workers", type=int, default=1, help="processes for our parser (1: single process)")
    parser.add_argument("--seed", type=int, default=1116)
    args = parser.parse_args(argv)
    if args.ranks % (TP * PP * CP):
        parser.error(f"--ranks must be a multiple of tp*pp*cp = {TP * PP * CP}")

    tmp = Path(tempfile.mkdtemp(prefix="mbridge-parse-bench-"))
    try:
        run_dir = tmp / "run"
        start = time.perf_counter()
        size = generate(run_dir, args.size_mb, args.ranks, args.seed)
        print(
            f"data: {args.ranks} rank logs, {size / 1e6:,.1f} MB in {run_dir} (generated in "
            f"{time.perf_counter() - start:.1f} s)"
        )
        files = [str(p) for p in sorted((run_dir / "logs").iterdir())]
        env = {**os.environ, "LC_ALL": "C"}

        def grep() -> None:
            # Capture the output: GNU grep stops at the first match when its stdout is /dev/null.
            subprocess.run(["grep", "-c", "iteration", *files], env=env, capture_output=True, check=False)

        def ours() -> None:
            training._PARSED.clear()  # parse_training_run remembers an unchanged run: every repetition parses
            parse_training_run(run_dir, workers=args.workers)

        grep()
        metrics = parse_training_run(run_dir, workers=args.workers)
        print(
            f"check: status={metrics.status} iterations={len(metrics.iterations)} steady={metrics.iteration_time_ms.n} "
            f"iter_ms_mean={metrics.iteration_time_ms.mean:.1f} efa_ranks={len(metrics.validity.efa_ranks)} "
            f"uccl_ranks={len(metrics.validity.uccl_proxy_ranks)} failure={metrics.failure.status}"
        )
        grep_times, our_times, grep_cpu, our_cpu = [], [], [], []
        for _ in range(args.repeat):
            grep_times += _time(grep, 1, grep_cpu, _child_cpu)
            our_times += _time(ours, 1, our_cpu)
        print(
            f"method: wall time of each tool over the same {len(files)} files, page cache warm, "
            f"{args.repeat} alternating repetitions, workers={args.workers} (grep -c is one process), "
            f"{os.cpu_count()} CPUs"
        )
        grep_rate = _describe("grep", grep_times, size)
        our_rate = _describe("ours", our_times, size)
        grep_med, our_med = statistics.median(grep_cpu), statistics.median(our_cpu)
        print(
            f"cpu: grep min {min(grep_cpu):.3f} s median {grep_med:.3f} s; ours min {min(our_cpu):.3f} s median "
            f"{our_med:.3f} s; grep/ours {grep_med / our_med if our_med else float('inf'):.2f} x"
        )
        print(f"RESULT parse_vs_grep={our_rate / grep_rate:.2f} x")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
