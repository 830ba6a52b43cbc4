#!/usr/bin/env bash
# The 4-GPU dispatcher A/B as a CloudAI scenario through the plugin's own report, as one device command.
# usage (repository root, GPU host, after benchmarks/gpu_setup.sh bridge-0.6.2 and nccl-2.32.3; .whl/cloudai/p0 and
# .whl/cloudai/p1 carried by two calls, made by benchmarks/gpu_cloudai_prepare.sh):
#   bash benchmarks/gpu_cloudai_ab_run.sh [scenario TOML, default conf/test_scenario/bridge_ab_4gpu.toml]
# Results in $OUT: cloudai_ab.log, the scenario's report files (mbridge_ab.html/.csv/.png, mbridge_runs.csv) and
# runs.tgz (every run folder: config, scripts, rank logs; no checkpoints).
set -u -o pipefail
SCENARIO=${1:-conf/test_scenario/bridge_ab_4gpu.toml}
OUT=${OUT:-/tmp/gpu_out}
SITE=/tmp/cloudai_site
RESULTS=/tmp/gpu_work/cloudai_ab
mkdir -p "$OUT" "$RESULTS"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
# shellcheck disable=SC1091
source /tmp/mbridge_stack/bridge-0.6.2/env.sh || { echo "error: run benchmarks/gpu_setup.sh bridge-0.6.2 first"; exit 2; }
python3 -c "import numpy, pandas" || { echo "error: numpy/pandas are not on this host (gpu_cloudai_prepare.sh leaves them out)"; exit 2; }
if [ ! -d "$SITE/cloudai" ]; then
  [ -d .whl/cloudai/p0 ] && [ -d .whl/cloudai/p1 ] \
    || { echo "error: carry .whl/cloudai/p0 and .whl/cloudai/p1 (two calls; benchmarks/gpu_cloudai_prepare.sh)"; exit 2; }
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$SITE" .whl/cloudai/p*/*.whl \
    || { echo "error: the CloudAI wheels did not install"; exit 2; }
fi
export PYTHONPATH=$PWD:$SITE:$PYTHONPATH
NCCL_LIB=/tmp/mbridge_stack/nccl-2.32.3/site/nvidia/nccl/lib/libnccl.so.2
[ -f "$NCCL_LIB" ] || { echo "error: $NCCL_LIB missing: run benchmarks/gpu_setup.sh nccl-2.32.3 (ncclep needs it)"; exit 2; }
mkdir -p /tmp/nccl_ep_jit_cache
# The system file with this host's environment (as data: the plugin quotes every value into the job's script).
SYSTEM=$RESULTS/standalone_4gpu.toml
python3 - "$SYSTEM" "$NCCL_LIB" <<'PY'
import sys, os, toml
data = toml.load("conf/system/standalone_4gpu.toml")
data["output_path"] = os.path.dirname(sys.argv[1])
data["install_path"] = "/tmp/gpu_work/cloudai_install"
env = data.setdefault("global_env_vars", {})
env["CLOUDAI_MBRIDGE_GPUS_PER_NODE"] = str(int(os.popen("nvidia-smi -L | wc -l").read().strip() or 4))
# The system decides the GPU: this host's, from the device name (the shipped file says h100; an H200 host must not
# be planned and recorded as an H100).
from cloudai_mbridge.catalog.gpus import gpu_for_device_name
names = os.popen("nvidia-smi --query-gpu=name --format=csv,noheader").read().splitlines()
gpu = gpu_for_device_name(names[0]) if names else None
if gpu:
    env["CLOUDAI_MBRIDGE_GPU"] = gpu
for k in ("PYTHONPATH", "NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST", "NVSHMEM_DISABLE_NVLS", "CUDA_HOME",
          "HF_HOME", "HF_HUB_OFFLINE"):
    if os.environ.get(k):
        env[k] = os.environ[k]
env.update(LD_PRELOAD=sys.argv[2], NCCL_EP_JIT_CACHE_DIR="/tmp/nccl_ep_jit_cache",
           CUDA_HOME=os.environ.get("CUDA_HOME", "/usr/local/cuda"))
toml.dump(data, open(sys.argv[1], "w"))
PY
date -u +"date_utc %Y-%m-%dT%H:%M:%SZ"; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
python3 -m cloudai_mbridge run --system-config "$SYSTEM" --tests-dir conf/test --test-scenario "$SCENARIO" \
  --output-dir "$RESULTS/runs" 2>&1 | tee "$OUT/cloudai_ab.log"
echo "=== run: exit ${PIPESTATUS[0]} at t+${SECONDS}s"
ROOT=$(ls -dt "$RESULTS"/runs/*/ | head -1)
python3 -m cloudai_mbridge generate-report --system-config "$SYSTEM" --tests-dir conf/test --test-scenario "$SCENARIO" \
  --result-dir "$ROOT" 2>&1 | tee -a "$OUT/cloudai_ab.log"
echo "=== generate-report: exit ${PIPESTATUS[0]} at t+${SECONDS}s"
cp "$ROOT"/mbridge_* "$OUT/" 2>/dev/null
tar czf "$OUT/runs.tgz" -C "$ROOT" --exclude='*.pt' --exclude='hf_cache' --exclude='mbridge_payload' . && ls -la "$OUT"
