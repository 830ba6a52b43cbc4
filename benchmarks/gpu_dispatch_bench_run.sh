#!/usr/bin/env bash
# The dispatch/combine microbenchmark on the real stack, as one command: Megatron-Core's token dispatcher for
# alltoall, deepep (UCCL-EP's drop-in deep_ep) and ncclep (Transformer Engine's NCCL EP) on every GPU of the host, at
# the training A/B's shapes (DeepSeek-V3 and Kimi-K2 proxies, seq 4096, mbs 1 / 2 / 4), by
# benchmarks/gpu_dispatch_bench.py; the A/B page with the microbenchmark beside the recorded training delta.
#
# usage (GPU host; runs from the repository root): bash benchmarks/gpu_dispatch_bench_run.sh <budget_s> [gpu_dispatch_bench.py options]
# Needs what benchmarks/gpu_ab_bridge_run.sh needs: the stack bridge-0.6.2 (Megatron-Core 0.19.2, Transformer Engine
# 2.20.2; benchmarks/gpu_setup.sh bridge-0.6.2 or the active Python, docs/gpu.md) and NCCL 2.32.3 (gpu_setup.sh
# nccl-2.32.3, or MBRIDGE_NCCL_LIB); optional .whl/uccl (benchmarks/gpu_uccl_prepare.sh) for the deepep arm. Every arm
# runs with NCCL 2.32.3 by LD_PRELOAD (NCCL EP needs >= the NCCL its library was built with); NVLink multicast stays
# off, as in every recorded run.
# Prints `RESULT dispatch_bench ...` per phase and point and `RESULT dispatch_bench_points=<n> count`.
# Results in the folder OUT (environment, default /tmp/gpu_out): dispatch_bench.log (everything printed),
# gpu_dispatch_bench.json, report/mbridge_ab.html (+ csv), dispatch_runs.tgz (run folders: config + rank logs; `python3
# benchmarks/gpu_dispatch_bench.py --report --out <unpacked>` redoes every number).
# Exit status 3, with one line and before anything is written, without a GPU or without the bridge-0.6.2 stack
# (benchmarks/gpu_common.sh); -h / --help prints this header.
set -u -o pipefail
# shellcheck source=benchmarks/gpu_common.sh
source "$(dirname "$0")/gpu_common.sh"
gpu_usage_if_asked "$0" "$@"
BUDGET=${1:?usage: gpu_dispatch_bench_run.sh <budget_s> [options]}
shift
cd "$(dirname "$0")/.." || exit 2
WORK=/tmp/gpu_work/dispatch_bench
# shellcheck source=benchmarks/gpu_bridge_env.sh
source benchmarks/gpu_bridge_env.sh
# The recorded training A/B whose delta the page shows beside: host 2's cells of benchmarks/results/bridge_ab_4gpu
# (alltoall vs ncclep, 4 x H100); host 1's cells repeat the same configs on another host and are never mixed in.
TRAINING=()
for d in benchmarks/results/bridge_ab_4gpu/{dsv3_mbs1_w4,dsv3_mbs2_w6,k2_mbs1_w5}/runs/*/; do
  [ -f "$d/mbridge_config.json" ] && TRAINING+=("$d")
done
date -u +"date_utc %Y-%m-%dT%H:%M:%SZ"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
nvidia-smi topo -m 2>&1 | sed -n '1,6p'
T=$((BUDGET - SECONDS - 25))
echo "=== gpu_dispatch_bench (timeout ${T}s, t+${SECONDS}s) LD_PRELOAD=$PRELOAD"
LD_PRELOAD=$PRELOAD timeout -k 10 "$T" python3 benchmarks/gpu_dispatch_bench.py --out "$WORK" \
  --budget-s $((T - 30)) ${UCCL[@]+"${UCCL[@]}"} ${TRAINING[@]+--training-runs "${TRAINING[@]}"} "$@" 2>&1 \
  | grep -v -E "UserWarning|warnings.warn|^  return func|^\s*$" | tee "$OUT/dispatch_bench.log"
echo "=== gpu_dispatch_bench: exit ${PIPESTATUS[0]} at t+${SECONDS}s"
cp "$WORK"/gpu_dispatch_bench.json "$OUT/" 2>/dev/null
cp -r "$WORK"/report "$OUT/" 2>/dev/null
tar czf "$OUT/dispatch_runs.tgz" -C "$WORK" --exclude='*.pt' --exclude='report' . && ls -la "$OUT"
