"""Refit seconds at scale, on paper: byte plan of each layout pair x measured per-GPU refit bandwidth.

Method (units: GB = 1e9 B, s): cloudai_mbridge/plan/refit_bytes.py plans every destination shard the way
megatron-core's resharding planner does, counts per GPU the bytes received and sent (local copy, remote within a node
of --gpus-per-node, remote between nodes) and the planned slices; a GPU's seconds = intra-node remote / NVLink rate
+ inter-node / NIC rate + local / copy rate; the refit takes the slowest GPU's seconds. No per-op latency term.
Rates: "measured" = the refit's own 57.68 GB/s/GPU (2x H200, megatron-core NCCL service) inside a node and the same
16 % of an ASSUMED 400 Gb/s NIC between nodes; "coalesced" = 70.05 GB/s/GPU likewise; "replay" = 248.70 GB/s/GPU
(4x H200, the replay executor, 69.4 % of its run's ceiling) likewise; "replay-pairwise" = 267.44 GB/s/GPU (4x H200,
the replay executor with the pairwise schedule, 75.0 % of its run's ceiling) likewise; "line-rate" = the measured
359.3 GB/s/GPU NCCL ceiling and the assumed 50 GB/s NIC. Copies at an ASSUMED 1000 GB/s. Models: catalog shapes,
bf16, MTP left out.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cloudai_mbridge.catalog import get_model
from cloudai_mbridge.plan.refit_bytes import (
    MEASURED_CEILING_GBPS,
    MEASURED_COALESCED_GBPS,
    MEASURED_PAIRWISE_CEILING_GBPS,
    MEASURED_PAIRWISE_GBPS,
    MEASURED_REFIT_GBPS,
    MEASURED_REPLAY_CEILING_GBPS,
    MEASURED_REPLAY_GBPS,
    bandwidths,
    build_plan,
    predict_seconds,
    side,
    spec_tensors,
)

RESULTS = Path(__file__).resolve().parent / "results"

# (case, model, src tp, pp, ep, src world, dst tp, ep, etp, dst world, mode)
CASES = [
    ("dsv3_pp16ep16_tp32dp8_256", "deepseek_v3", 1, 16, 16, 256, 32, 32, 1, 256, "collocated"),
    ("kimi_s1_tp8ep8_tp8ep4", "kimi_k2", 8, 1, 8, 64, 8, 4, 8, 32, "non-collocated"),
    ("kimi_s2_tp16ep4_tp8ep4", "kimi_k2", 16, 1, 4, 64, 8, 4, 8, 32, "non-collocated"),
    ("kimi_s3_tp16ep4_tp16ep2", "kimi_k2", 16, 1, 4, 64, 16, 2, 16, 32, "non-collocated"),
    ("kimi_s4_tp16ep4_tp32ep2", "kimi_k2", 16, 1, 4, 64, 32, 2, 32, 64, "non-collocated"),
    ("kimi_s5_tp8ep8_tp16ep4", "kimi_k2", 8, 1, 8, 64, 16, 4, 16, 64, "non-collocated"),
    ("kimi_s6_tp16ep8_tp8ep16", "kimi_k2", 16, 1, 8, 128, 8, 16, 8, 128, "collocated"),
    ("kimi_s7_tp32ep4_tp16ep8", "kimi_k2", 32, 1, 4, 128, 16, 8, 16, 128, "collocated"),
]


def check_measured() -> None:
    """The constants the prediction uses are the numbers in the measured JSON files (fail loudly if not)."""
    refit = json.loads((RESULTS / "gpu_refit_nccl.json").read_text())["refit"][0]
    coal = next(r for r in json.loads((RESULTS / "gpu_refit_coalesce.json").read_text())["refit"]
                if r.get("coalesce_mib") == 1024)
    for name, have, want in (("refit", MEASURED_REFIT_GBPS, refit["remote_gbps_per_gpu"]),
                             ("ceiling", MEASURED_CEILING_GBPS, refit["ceiling"]["gbps_per_gpu"]),
                             ("coalesced", MEASURED_COALESCED_GBPS, coal["remote_gbps_per_gpu"])):
        if abs(have - want) > 0.01:
            raise SystemExit(f"plan/refit_bytes.py {name} rate {have} differs from the measured {want:.2f}")
    replay = json.loads((RESULTS / "refit_4gpu" / "h200" / "w4_gpu_refit_nccl.json").read_text())["refit"]
    row = next(r for r in replay if r.get("executor") == "replay")
    for name, have, want in (("replay", MEASURED_REPLAY_GBPS, row["remote_gbps_per_gpu"]),
                             ("replay ceiling", MEASURED_REPLAY_CEILING_GBPS, row["ceiling"]["gbps_per_gpu"])):
        if abs(have - want) > 0.01:
            raise SystemExit(f"plan/refit_bytes.py {name} rate {have} differs from the measured {want:.2f}")
    pairwise = json.loads((RESULTS / "refit_4gpu" / "h200b" / "c3_pairwise_1024" / "gpu_refit_nccl.json").read_text())
    row = next(r for r in pairwise["refit"] if r.get("coalesce_schedule") == "pairwise")
    for name, have, want in (("pairwise", MEASURED_PAIRWISE_GBPS, row["remote_gbps_per_gpu"]),
                             ("pairwise ceiling", MEASURED_PAIRWISE_CEILING_GBPS, row["ceiling"]["gbps_per_gpu"])):
        if abs(have - want) > 0.01:
            raise SystemExit(f"plan/refit_bytes.py {name} rate {have} differs from the measured {want:.2f}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpus-per-node", type=int, default=8)
    ap.add_argument("--policy", default="megatron", choices=["megatron", "local-first"])
    args = ap.parse_args()
    check_measured()
    print(__doc__)
    bws = bandwidths()
    head = ("case", "GPUs", "model GB", "recv GB/GPU max", "remote GB/GPU max", "inter-node GB/GPU max",
            "send GB/GPU max", "local GB/GPU max", "src peers max", "slices/GPU max", *(f"s {b.name}" for b in bws))
    print("| " + " | ".join(head) + " |\n|" + "---|" * len(head))
    results = []
    for case, name, stp, spp, sep, sw, dtp, dep, detp, dw, mode in CASES:
        model = spec_tensors(get_model(name))
        src = side(stp, spp, sep, sw, name="src")
        dst = side(dtp, 1, dep, dw, etp=detp, first_rank=0 if mode == "collocated" else sw, name="dst")
        plan = build_plan(model, src, dst, args.gpus_per_node, args.policy)
        secs = [predict_seconds(plan, b) for b in bws]
        gpus = sw if mode == "collocated" else sw + dw
        cells = [case, str(gpus), f"{model.bytes / 1e9:.0f}", *(f"{plan.worst(a) / 1e9:.1f}" for a in (
            "recv", "recv_remote", "recv_inter_node", "send_remote", "recv_local")),
            str(max(len(r.peers) for r in plan.ranks.values())), str(plan.messages(0)), *(f"{s:.2f}" for s in secs)]
        print("| " + " | ".join(cells) + " |")
        results.append((case, secs[0], secs[[b.name for b in bws].index("replay")]))
    for case, s, _ in results:
        print(f"RESULT refit_predicted_s_{case}={s:.2f} s")
    for case, _, s in results:
        print(f"RESULT refit_predicted_s_replay_{case}={s:.2f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
