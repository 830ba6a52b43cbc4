#!/usr/bin/env bash
# The GPU experiments of issue 8 in one command, for whatever GPUs the host has: refit over NCCL next to the P2P
# ceiling (>= 2 GPUs), the memory estimate against measured peaks (1-GPU configs always, EP2 configs with >= 2 GPUs)
# and the dispatcher A/B (its deep_ep probe always; the A/B points need >= 2 GPUs), engine mcore. Runs from the
# repository root with the megatron-core 0.17.1 wheel in .whl/ (pip download --no-deps megatron-core==0.17.1 -d .whl,
# where PyPI is) and UCCL-EP's files in .whl/uccl (benchmarks/gpu_uccl_prepare.sh).
#
# usage: bash benchmarks/gpu_run.sh [budget_s=540]
# Exit status 3, with one line and before anything is written, without a GPU or without the megatron-core wheel
# (benchmarks/gpu_common.sh); -h / --help prints this header.
# Steps, each under `timeout` and skipped when the budget left is too small (the rest still runs):
#   1. benchmarks/gpu_refit_nccl.py --layers 2            p2p ceiling + tp2->ep2 and tp1ep2->tp2ep1 refits, megatron-core's
#                                                         NCCL service and 1 GiB coalesced messages (>= 2 GPUs)
#   1b. the same with --world 4, tp2->ep2 only            (>= 4 GPUs)
#   2. benchmarks/gpu_memory.py <configs>                 1 GPU: k2_1gpu k2_1gpu_s2048 k2_1gpu_s1024 dsv3_1gpu
#                                                         dsv3_1gpu_s2048; >= 2 GPUs: + k2_ep2 dsv3_ep2
#   3. benchmarks/gpu_dispatcher_ab.py                    deep_ep / uccl probe; alltoall vs deepep points (>= 2 GPUs)
#   4. benchmarks/gpu_refit_nccl.py --layers 1 tp2-ep2    size scaling point (ceiling taken from step 1; >= 2 GPUs)
# Results in the folder OUT (environment, default /tmp/gpu_out): *.json (one per step), runs.tgz (run folders: config +
# rank logs); everything printed goes to the terminal.
set -u -o pipefail
# shellcheck source=benchmarks/gpu_common.sh
source "$(dirname "$0")/gpu_common.sh"
gpu_usage_if_asked "$0" "$@"
BUDGET=${1:-540}
cd "$(dirname "$0")/.." || exit 2
gpu_need 1
WHEEL=$(ls .whl/megatron_core-0.17.1-*.whl 2>/dev/null | sed -n 1p)
[ -n "$WHEEL" ] || gpu_stop ".whl/megatron_core-0.17.1-*.whl not found: download it where PyPI is (pip download" \
  "--no-deps megatron-core==0.17.1 -d .whl) and copy .whl/ into this checkout"
OUT=${OUT:-/tmp/gpu_out}
WORK=/tmp/gpu_work
mkdir -p "$OUT" && rm -rf "$WORK" && mkdir -p "$WORK"
# NVLink multicast stays off, as in every recorded run (NCCL would use NVLS on NVSwitch systems otherwise).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1

rm -rf /tmp/site
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site "$WHEEL" \
  $(ls .whl/uccl/*.whl 2>/dev/null) || exit 2
export PYTHONPATH=/tmp/site:$PWD
date -u +"date_utc %Y-%m-%dT%H:%M:%SZ"
python3 -c "import torch, einops, megatron.core as m; print('torch', torch.__version__, 'cuda', torch.version.cuda, \
'nccl', torch.cuda.nccl.version(), 'gpus', torch.cuda.device_count(), [torch.cuda.get_device_name(i) for i in \
range(torch.cuda.device_count())], 'megatron-core', m.__version__, 'einops', einops.__version__)" 2>&1 | grep -v Warn
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
nvidia-smi topo -m 2>&1 | sed -n '1,8p'
NGPU=$(nvidia-smi --query-gpu=index --format=csv,noheader | wc -l)

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
needs2() { echo "=== $1: SKIPPED (needs >= 2 GPUs, this host has $NGPU)"; }

if [ "$NGPU" -ge 2 ]; then
  step refit 240 python3 benchmarks/gpu_refit_nccl.py --out "$WORK/refit" --layers 2 --refit-timeout-s 150 \
    --coalesce-mib 0 1024
  cp "$WORK/refit/gpu_refit_nccl.json" "$OUT/" 2>/dev/null
else needs2 refit; fi
if [ "$NGPU" -ge 4 ]; then
  step refit_4gpu 200 python3 benchmarks/gpu_refit_nccl.py --out "$WORK/refit4" --world 4 --layers 2 --pairs tp2-ep2 \
    --refit-timeout-s 150 --coalesce-mib 0 1024
  cp "$WORK/refit4/gpu_refit_nccl.json" "$OUT/gpu_refit_nccl_4gpu.json" 2>/dev/null
else echo "=== refit_4gpu: SKIPPED (needs >= 4 GPUs, this host has $NGPU)"; fi
CONFIGS="k2_1gpu k2_1gpu_s2048 k2_1gpu_s1024 dsv3_1gpu dsv3_1gpu_s2048"
[ "$NGPU" -ge 2 ] && CONFIGS="$CONFIGS k2_ep2 dsv3_ep2"
step memory 300 python3 benchmarks/gpu_memory.py --out "$WORK/memory" --configs $CONFIGS --timeout-s 90
cp "$WORK/memory/gpu_memory.json" "$OUT/" 2>/dev/null
if [ -f benchmarks/gpu_dispatcher_ab.py ]; then
  step dispatcher 150 python3 benchmarks/gpu_dispatcher_ab.py --out "$WORK/dispatcher" --uccl-dir .whl/uccl
  cp "$WORK/dispatcher/gpu_dispatcher_ab.json" "$OUT/" 2>/dev/null
fi
if [ "$NGPU" -ge 2 ]; then
  step refit_1layer 70 python3 benchmarks/gpu_refit_nccl.py --out "$WORK/refit_1l" --layers 1 --pairs tp2-ep2 \
    --refit-timeout-s 90 --skip-p2p --ceiling-json "$WORK/refit/gpu_refit_nccl.json"
  cp "$WORK/refit_1l/gpu_refit_nccl.json" "$OUT/gpu_refit_nccl_1layer.json" 2>/dev/null
else needs2 refit_1layer; fi
tar czf "$OUT/runs.tgz" -C "$WORK" --exclude='*.pt' . && ls -la "$OUT"
echo "done at t+${SECONDS}s"
