"""CPU refit benchmark: the real refit payload (Megatron-Core resharding over gloo) at a few model sizes.

Method: for each hidden size the payload runs as 4 local ranks (one thread each), builds a 2-layer GPT MoE with 16
experts twice -- source TP2/EP2/ETP1 and destination TP1/EP4, collocated -- and calls swap_model_weights once to
plan, then `--iterations` timed times. Each time is the slowest rank's wall time from a common barrier to the
end of the refit; every run is verified bit-exactly by the payload (a run that fails verification aborts the
benchmark, it never reports a time). Bandwidth = bytes the plan moves per refit (remote + local, GB = 1e9 bytes)
/ median time. Numbers are loopback gloo on this machine's cores: a correctness-and-trend baseline, not a GPU proxy.

With ``--coalesce-mib 0 N ...`` each size also runs with the payload's coalescing transport (payload/refit_coalesce.py:
the same plan, slices packed into messages of at most N MiB per peer); 0 is megatron-core's gloo copy service.

Run: python3 benchmarks/refit_cpu.py [--hidden 128 256 512] [--iterations 5] [--coalesce-mib 0 1]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from cloudai_mbridge.payload.refit.local import launch

WORLD = 4
SRC = {"tp": 2, "pp": 1, "ep": 2, "etp": 1}
DST = {"tp": 1, "pp": 1, "ep": 4, "etp": 1}


def model(hidden: int) -> dict:
    return {
        "name": f"moe-proxy-h{hidden}", "num_layers": 2, "hidden_size": hidden, "ffn_hidden_size": 4 * hidden,
        "moe_ffn_hidden_size": hidden, "num_attention_heads": 8, "num_query_groups": 4, "num_experts": 16,
        "moe_router_topk": 4, "moe_shared_expert_intermediate_size": hidden, "vocab_size": 8192, "seq_length": 256,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hidden", type=int, nargs="+", default=[128, 256, 512])
    parser.add_argument("--iterations", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--coalesce-mib", type=int, nargs="+", default=[0])
    args = parser.parse_args()

    print("method: megatron.core.resharding.swap_model_weights, transport=gloo, device=cpu, dtype=bf16, "
          f"{WORLD} ranks collocated, src {SRC} -> dst {DST}, 2 layers, 16 experts, warmup={args.warmup}, "
          f"iterations={args.iterations}; verified bit-exact")
    print("units: model = bytes of one full model copy; moved = bytes the plan copies per refit (remote+local); "
          "times in ms (slowest rank); bandwidth in GB/s (1e9 bytes) = moved / median")
    print(f"{'size':>6} {'coal':>5} {'model_bytes':>12} {'moved_bytes':>12} {'remote':>11} {'min_ms':>9} "
          f"{'median_ms':>10} {'max_ms':>9} {'GB/s':>7} {'wall_s':>7}")
    results = []
    for hidden in args.hidden:
        for coalesce in args.coalesce_mib:
            cfg = {"model": model(hidden), "src": SRC, "dst": DST, "mode": "collocated", "transport": "gloo",
                   "warmup": args.warmup, "iterations": args.iterations, "seed": 0, "verify": True,
                   "timeout_s": 600, "device": "cpu", "coalesce_mib": coalesce}
            start = time.perf_counter()
            run = launch(cfg, WORLD, timeout=900)
            wall = time.perf_counter() - start
            verdict = run.parsed.get("refit_verify", {})
            if run.failed_ranks() or verdict.get("status") != "pass":
                print(f"h{hidden} coalesce {coalesce}: refit failed or did not verify\n{run.describe()}",
                      file=sys.stderr)
                return 1
            final = run.parsed["refit_result"]
            times = final["refit_time_ms"]
            moved = final["bytes_remote"] + final["bytes_local"]
            results.append((hidden, coalesce, times["median"], final["bandwidth_gbps"]))
            print(f"{'h' + str(hidden):>6} {coalesce:>5} {final['model_bytes']:>12} {moved:>12} "
                  f"{final['bytes_remote']:>11} {times['min']:>9.2f} {times['median']:>10.2f} {times['max']:>9.2f} "
                  f"{final['bandwidth_gbps']:>7.3f} {wall:>7.1f}", flush=True)
    for hidden, coalesce, median, _ in results:
        tag = f"_coalesce{coalesce}mib" if coalesce else ""
        print(f"RESULT refit_cpu_h{hidden}{tag}_median_ms={median:.2f} ms")
    largest = max(r for r in results if r[1] == args.coalesce_mib[0])
    print(f"bandwidth reported below is the largest size's (h{largest[0]}), where fixed per-op costs matter least")
    print(f"RESULT refit_cpu_bandwidth={largest[3]:.3f} GB/s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
