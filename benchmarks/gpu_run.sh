#!/usr/bin/env bash
# The GPU experiments of issue 8 in one command: refit over NCCL next to the P2P ceiling, and the memory estimate
# against measured peaks. Run from the repository root on a host with >= 2 GPUs, megatron-core 0.17.1 carried as a
# wheel in .whl/ (the device tool: carry [".whl"]; there $OUT comes back). Elsewhere OUT defaults to /tmp/gpu_out.
#
# usage: bash benchmarks/gpu_run.sh [budget_s=390]
# Steps, each under `timeout` and skipped when the budget left is too small (the rest still runs):
#   1. benchmarks/gpu_refit_nccl.py --layers 2            p2p ceiling + tp2->ep2 and tp1ep2->tp2ep1 refits
#   2. benchmarks/gpu_memory.py k2_1gpu k2_ep2            the two required memory configs
#   3. benchmarks/gpu_memory.py k2_1gpu_s2048 dsv3_ep2    diagnostics (s^2 term, a second model)
#   4. benchmarks/gpu_refit_nccl.py --layers 1 tp2-ep2    size scaling point (ceiling taken from step 1)
# Results: $OUT/log (everything printed), $OUT/*.json (one per step), $OUT/runs.tgz (run folders: config + rank logs).
set -u -o pipefail
BUDGET=${1:-390}
OUT=${OUT:-/tmp/gpu_out}
WORK=/tmp/gpu_work
mkdir -p "$OUT" && rm -rf "$WORK" && mkdir -p "$WORK"
# NVLink multicast stays off (the device's rule; NCCL would use NVLS on NVSwitch systems otherwise).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1

WHEEL=$(ls .whl/megatron_core-0.17.1-*.whl 2>/dev/null | head -1)
if [ -z "$WHEEL" ]; then echo "error: .whl/megatron_core-0.17.1-*.whl not found (carry .whl)"; exit 2; fi
rm -rf /tmp/site
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site "$WHEEL" || exit 2
export PYTHONPATH=/tmp/site:$PWD
date -u +"date_utc %Y-%m-%dT%H:%M:%SZ"
python3 -c "import torch, einops, megatron.core as m; print('torch', torch.__version__, 'cuda', torch.version.cuda, \
'nccl', torch.cuda.nccl.version(), 'gpus', torch.cuda.device_count(), [torch.cuda.get_device_name(i) for i in \
range(torch.cuda.device_count())], 'megatron-core', m.__version__, 'einops', einops.__version__)" 2>&1 | grep -v Warn
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
nvidia-smi topo -m 2>&1 | head -8

# step <name> <seconds wanted> <command...>: run with timeout min(wanted, left - 15), skip if under 45 s left
step() {
  local name=$1 want=$2; shift 2
  local left=$((BUDGET - SECONDS - 15))
  local t=$((want < left ? want : left))
  if [ "$t" -lt 45 ]; then echo "=== $name: SKIPPED ($left s left of the budget)"; return; fi
  echo "=== $name (timeout ${t}s, t+${SECONDS}s): $*"
  timeout -k 10 "$t" "$@" 2>&1 | grep -v -E "UserWarning|warnings.warn|^  return func|^\s*$"
  echo "=== $name: exit ${PIPESTATUS[0]} at t+${SECONDS}s"
}

step refit 200 python3 benchmarks/gpu_refit_nccl.py --out "$WORK/refit" --layers 2 --refit-timeout-s 150
cp "$WORK/refit/gpu_refit_nccl.json" "$OUT/" 2>/dev/null
step memory 150 python3 benchmarks/gpu_memory.py --out "$WORK/memory" --configs k2_1gpu k2_ep2 --timeout-s 90
cp "$WORK/memory/gpu_memory.json" "$OUT/" 2>/dev/null
step memory_extra 110 python3 benchmarks/gpu_memory.py --out "$WORK/memory_extra" --configs k2_1gpu_s2048 dsv3_ep2 --timeout-s 90
cp "$WORK/memory_extra/gpu_memory.json" "$OUT/gpu_memory_extra.json" 2>/dev/null
step refit_1layer 70 python3 benchmarks/gpu_refit_nccl.py --out "$WORK/refit_1l" --layers 1 --pairs tp2-ep2 --refit-timeout-s 90 \
  --skip-p2p --ceiling-json "$WORK/refit/gpu_refit_nccl.json"
cp "$WORK/refit_1l/gpu_refit_nccl.json" "$OUT/gpu_refit_nccl_1layer.json" 2>/dev/null
tar czf "$OUT/runs.tgz" -C "$WORK" --exclude='*.pt' . && ls -la "$OUT"
echo "done at t+${SECONDS}s"
