#!/usr/bin/env bash
# The dispatcher A/B (benchmarks/gpu_dispatcher_ab.py) in one command: alltoall vs flex/DeepEP through UCCL-EP's
# drop-in deep_ep (and HybridEP with --with-hybridep) on the GPUs of one node, engine mcore. Runs from the repository
# root on a GPU host with the megatron-core 0.17.1 wheel in .whl/ (pip download --no-deps megatron-core==0.17.1 -d .whl,
# where PyPI is) and UCCL-EP's files in .whl/uccl/ (benchmarks/gpu_uccl_prepare.sh).
#
# usage: bash benchmarks/gpu_dispatcher_run.sh [budget_s=540] [more options for gpu_dispatcher_ab.py...]
# Installs nothing outside /tmp/site: megatron-core, uccl and nvidia-cuda-runtime-cu12 (libcudart.so.12 for
# uccl/ep.abi3.so) wheels with pip --target, no index. The script gets --uccl-dir .whl/uccl, which puts UCCL's deep_ep/
# on PYTHONPATH and .whl/uccl/lib (libibverbs, libnl) + the wheel's cuda_runtime/lib on LD_LIBRARY_PATH of the probe
# and payload processes. Without .whl/uccl the A/B still runs; the probe then says why deepep cannot.
# Results in the folder OUT (environment, default /tmp/gpu_out): gpu_dispatcher_ab.log (everything printed),
# gpu_dispatcher_ab.json, mbridge_ab.csv/.html when the A/B report could run (it needs CloudAI), ab_runs.tgz (the whole
# output folder without *.pt: run folders with configs and rank logs, JSON, report files; `python3
# benchmarks/gpu_dispatcher_ab.py --report <unpacked>` redoes metrics + A/B).
# Exit status 3, with one line and before anything is written, without a GPU or without the megatron-core wheel
# (benchmarks/gpu_common.sh); -h / --help prints this header.
set -u -o pipefail
# shellcheck source=benchmarks/gpu_common.sh
source "$(dirname "$0")/gpu_common.sh"
gpu_usage_if_asked "$0" "$@"
BUDGET=${1:-540}
shift || true
cd "$(dirname "$0")/.." || exit 2
gpu_need 1
WHEEL=$(ls .whl/megatron_core-0.17.1-*.whl 2>/dev/null | sed -n 1p)
[ -n "$WHEEL" ] || gpu_stop ".whl/megatron_core-0.17.1-*.whl not found: download it where PyPI is (pip download" \
  "--no-deps megatron-core==0.17.1 -d .whl) and copy .whl/ into this checkout"
OUT=${OUT:-/tmp/gpu_out}
WORK=/tmp/gpu_work/dispatcher_ab
UCCL_DIR=.whl/uccl
mkdir -p "$OUT" && rm -rf "$WORK" && mkdir -p "$WORK"
# NVLink multicast stays off, as in every recorded run (NCCL would use NVLS on NVSwitch systems otherwise).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1

rm -rf /tmp/site
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site "$WHEEL" || exit 2
UCCL_ARGS=()
UCCL_WHEEL=$(ls $UCCL_DIR/uccl-*.whl 2>/dev/null | sed -n 1p)
CUDART_WHEEL=$(ls $UCCL_DIR/nvidia_cuda_runtime_cu12-*.whl 2>/dev/null | sed -n 1p)
if [ -n "$UCCL_WHEEL" ] && [ -n "$CUDART_WHEEL" ]; then
  # A refusal (e.g. the wheel's manylinux_2_35 tag on an older glibc) is printed and the run goes on: the probe
  # then reports the import error.
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site \
    "$UCCL_WHEEL" "$CUDART_WHEEL" || echo "warning: pip could not install $UCCL_WHEEL $CUDART_WHEEL"
  UCCL_ARGS=(--uccl-dir "$UCCL_DIR")
else
  echo "warning: $UCCL_DIR/uccl-*.whl or nvidia_cuda_runtime_cu12-*.whl missing: running without --uccl-dir"
fi
export PYTHONPATH=/tmp/site:$PWD
date -u +"date_utc %Y-%m-%dT%H:%M:%SZ"
python3 -c "import torch, einops, megatron.core as m; print('torch', torch.__version__, 'cuda', torch.version.cuda, \
'nccl', torch.cuda.nccl.version(), 'gpus', torch.cuda.device_count(), [torch.cuda.get_device_name(i) for i in \
range(torch.cuda.device_count())], 'megatron-core', m.__version__, 'einops', einops.__version__)" 2>&1 | grep -v Warn
python3 -m pip list --path /tmp/site 2>/dev/null | grep -i -E "uccl|cuda-runtime|megatron"
python3 -c "import sys; print('python', sys.version.split()[0]); import cloudai; print('cloudai importable')" 2>&1 \
  | grep -v Warn | tail -2
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
nvidia-smi topo -m 2>&1 | sed -n '1,8p'
ls /sys/class/infiniband 2>/dev/null | sed -n '1,4p' | sed 's/^/ib device: /'

T=$((BUDGET - SECONDS - 20))
echo "=== gpu_dispatcher_ab (timeout ${T}s, t+${SECONDS}s)"
# The script stops starting runs 30 s before its own budget, so it reaches its A/B and JSON before `timeout` fires.
timeout -k 10 "$T" python3 benchmarks/gpu_dispatcher_ab.py --out "$WORK" --budget-s $((T - 30)) ${UCCL_ARGS[@]+"${UCCL_ARGS[@]}"} "$@" \
  2>&1 | grep -v -E "UserWarning|warnings.warn|^  return func|^\s*$" | tee "$OUT/gpu_dispatcher_ab.log"
echo "=== gpu_dispatcher_ab: exit ${PIPESTATUS[0]} at t+${SECONDS}s"
cp "$WORK"/gpu_dispatcher_ab.json "$WORK"/mbridge_ab.csv "$WORK"/mbridge_ab.html "$OUT/" 2>/dev/null
tar czf "$OUT/ab_runs.tgz" -C "$WORK" --exclude='*.pt' . && ls -la "$OUT"
echo "done at t+${SECONDS}s"
