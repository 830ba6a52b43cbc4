#!/usr/bin/env bash
# The bridge-engine experiments on one GPU, with the stack <stack> installed (e.g. bridge-0.6.2):
#   usage: bash benchmarks/gpu_bridge_run.sh <stack> <part>
#   part "smoke":    gpu_memory.py te_dsv3_s2048 (8 iterations: the whole path once)
#   part "train":    gpu_memory.py te_dsv3_bf16 te_k2_bf16 te_dsv3_fp8 te_k2_fp8 (40 iterations each: time + memory)
#   part "heldout":  gpu_memory.py te_dsv3_s2048 te_k2_s1024 (memory, held out)
#   part "sft":      gpu_sft.py (build, convert, finetune 40 iterations)
#   part "breakdown": gpu_memory.py te_dsv3_bf16 te_k2_bf16 (the memory by owner/dtype and per-iteration peaks)
#   part "overhead": payload_overhead.py (the payload against Bridge's own pretrain(), 1 GPU, 3 alternating starts)
# The stack: benchmarks/gpu_setup.sh's /tmp/mbridge_stack/<stack>/env.sh, or the active Python when it has
# Megatron-Bridge at the stack's version (docs/gpu.md).
# Results in the folder OUT (environment, default /tmp/gpu_out): <part>.json, <part>.log, <part>_runs.tgz (run folders:
# config + rank logs; model weights and checkpoints left out).
# Exit status: the part's; 2 for an unknown part; 3, with one line and before anything is written, without a GPU or
# without the stack (benchmarks/gpu_common.sh). -h / --help prints this header.
set -u -o pipefail
# shellcheck source=benchmarks/gpu_common.sh
source "$(dirname "$0")/gpu_common.sh"
gpu_usage_if_asked "$0" "$@"
STACK=${1:?usage: gpu_bridge_run.sh <stack> <part>}
PART=${2:?usage: gpu_bridge_run.sh <stack> <part>}
cd "$(dirname "$0")/.." || exit 2
case "$PART" in
  smoke|train|heldout|sft|breakdown|overhead) ;;
  *) echo "error: part $PART is not smoke, train, heldout, sft, breakdown or overhead" >&2; exit 2 ;;
esac
gpu_need 1
gpu_use_stack "$STACK"
OUT=${OUT:-/tmp/gpu_out}
WORK=/tmp/bridge_work/$PART
mkdir -p "$OUT" && rm -rf "$WORK" && mkdir -p "$WORK"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
case "$PART" in
  smoke) set -- python3 benchmarks/gpu_memory.py --out "$WORK" --configs te_dsv3_s2048 --timeout-s 240 ;;
  train) set -- python3 benchmarks/gpu_memory.py --out "$WORK" --configs te_dsv3_bf16 te_k2_bf16 te_dsv3_fp8 \
           te_k2_fp8 --timeout-s 150 ;;
  heldout) set -- python3 benchmarks/gpu_memory.py --out "$WORK" --configs te_dsv3_s2048 te_k2_s1024 --timeout-s 150 ;;
  sft) set -- python3 benchmarks/gpu_sft.py --out "$WORK" --timeout-s 240 ;;
  breakdown) set -- python3 benchmarks/gpu_memory.py --out "$WORK" --configs te_dsv3_bf16 te_k2_bf16 --timeout-s 150 ;;
  overhead) set -- env CUDA_VISIBLE_DEVICES=0 python3 benchmarks/payload_overhead.py --out "$WORK" --starts 3 \
              --budget-s 540 ;;
esac
echo "MBRIDGE_STACK $STACK; $*"
"$@" 2>&1 | grep -v -E "UserWarning|warnings.warn|^\s*$" | tee "$OUT/$PART.log"
rc=${PIPESTATUS[0]}
cp "$WORK"/*.json "$OUT/" 2>/dev/null
for j in "$OUT"/gpu_memory.json "$OUT"/gpu_sft.json "$OUT"/payload_overhead.json; do [ -f "$j" ] && mv "$j" "$OUT/${PART}.json"; done
tar czf "$OUT/${PART}_runs.tgz" -C "$WORK" --exclude='*.safetensors' --exclude='*.distcp' --exclude='*.pt' \
  --exclude='hf_model/*.bin' . 2>/dev/null
echo "part $PART exit $rc"
exit "$rc"
