#!/usr/bin/env bash
# The dispatcher A/B as a CloudAI scenario through the plugin's own report, as one command, on every GPU of the host
# (the scenario's ep must equal that count: bridge_ab_2gpu_*.toml on 2 GPUs, bridge_ab_4gpu*.toml on 4; docs/gpu.md).
# usage (GPU host; runs from the repository root):
#   bash benchmarks/gpu_cloudai_ab_run.sh [scenario TOML, default conf/test_scenario/bridge_ab_4gpu.toml]
# Needs the stack bridge-0.6.2 (benchmarks/gpu_setup.sh bridge-0.6.2, or the active Python, docs/gpu.md), NCCL 2.32.3
# (gpu_setup.sh nccl-2.32.3, or MBRIDGE_NCCL_LIB=<its libnccl.so.2>), numpy and pandas, and CloudAI: importable
# already, or its wheels in .whl/cloudai/p0 and .whl/cloudai/p1 (benchmarks/gpu_cloudai_prepare.sh, where PyPI is),
# installed into /tmp/cloudai_site.
# Results in the folder OUT (environment, default /tmp/gpu_out): cloudai_ab.log, the scenario's report files
# (mbridge_ab.html/.csv/.png, mbridge_runs.csv) and runs.tgz (every run folder: config, scripts, rank logs; no
# checkpoints).
# Exit status 3, with one line and before anything is written, without a GPU or without one of the above
# (benchmarks/gpu_common.sh); -h / --help prints this header.
set -u -o pipefail
# shellcheck source=benchmarks/gpu_common.sh
source "$(dirname "$0")/gpu_common.sh"
gpu_usage_if_asked "$0" "$@"
SCENARIO=${1:-conf/test_scenario/bridge_ab_4gpu.toml}
cd "$(dirname "$0")/.." || exit 2
SITE=/tmp/cloudai_site
# Everything this run needs, checked before anything is written.
gpu_need 1
[ -f "$SCENARIO" ] || { echo "error: gpu_cloudai_ab_run.sh: no scenario $SCENARIO" >&2; exit 2; }
gpu_use_stack bridge-0.6.2
python3 -c "import numpy, pandas" 2>/dev/null \
  || gpu_stop "numpy and pandas do not import: install them (the GPU image has them; gpu_cloudai_prepare.sh leaves them out)"
NCCL_LIB=${MBRIDGE_NCCL_LIB:-$MBRIDGE_STACK_ROOT/nccl-2.32.3/site/nvidia/nccl/lib/libnccl.so.2}
[ -f "$NCCL_LIB" ] || gpu_stop "NCCL 2.32.3 missing ($NCCL_LIB; ncclep needs it): run benchmarks/gpu_setup.sh" \
  "nccl-2.32.3 or set MBRIDGE_NCCL_LIB to its libnccl.so.2"
if [ ! -d "$SITE/cloudai" ] && ! python3 -c "import cloudai" 2>/dev/null; then
  [ -d .whl/cloudai/p0 ] && [ -d .whl/cloudai/p1 ] \
    || gpu_stop "CloudAI is not importable and .whl/cloudai/p0, p1 are missing: make them with" \
      "benchmarks/gpu_cloudai_prepare.sh where PyPI is and copy .whl/cloudai/ into this checkout"
  # The wheels gpu_cloudai_prepare.sh left out because the image has them: one missing stops here; one at a version
  # outside CloudAI's stated range is said (pip would call it a conflict) and the import below decides.
  if [ -f .whl/cloudai/FROM_IMAGE.txt ]; then
    check=$(python3 - .whl/cloudai/FROM_IMAGE.txt <<'PY'
import sys
from importlib.metadata import PackageNotFoundError, version
missing, off = [], []
for line in open(sys.argv[1], encoding="utf-8"):
    name, _, spec = line.strip().partition(" ")
    if not name:
        continue
    try:
        have = version(name)
    except PackageNotFoundError:
        missing.append(name)
        continue
    try:
        from packaging.specifiers import SpecifierSet
        if spec and have not in SpecifierSet(spec):
            off.append(f"{name} {have} (CloudAI states {spec})")
    except ImportError:
        pass  # no packaging here: presence is all that is checked
print(", ".join(missing))
print(", ".join(off))
PY
)
    missing=$(printf '%s\n' "$check" | sed -n 1p); off=$(printf '%s\n' "$check" | sed -n 2p)
    [ -z "$missing" ] || gpu_stop "this image lacks what the CloudAI bundle left out for it: $missing; make the" \
      "bundle again with MBRIDGE_IMAGE_PACKAGES=/dev/null (carries every wheel) or a list of this image's packages"
    [ -z "$off" ] || echo "warning: CloudAI's bundle relies on the image's $off"
  fi
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$SITE" .whl/cloudai/p*/*.whl \
    || { echo "error: the CloudAI wheels did not install"; exit 2; }
  PYTHONPATH=$SITE${PYTHONPATH:+:$PYTHONPATH} python3 -c "import cloudai.core" 2>/dev/null \
    || { echo "error: CloudAI installed into $SITE does not import with this image's packages: make its bundle" \
      "again with MBRIDGE_IMAGE_PACKAGES=/dev/null (gpu_cloudai_prepare.sh) and remove $SITE"; exit 2; }
fi
OUT=${OUT:-/tmp/gpu_out}
RESULTS=/tmp/gpu_work/cloudai_ab
mkdir -p "$OUT" "$RESULTS"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
export PYTHONPATH=$PWD:$SITE${PYTHONPATH:+:$PYTHONPATH}
mkdir -p /tmp/nccl_ep_jit_cache
# The system file with this host's environment (as data: the plugin quotes every value into the job's script).
# The shipped standalone system of this host's GPU count (standalone_2gpu.toml on 2 GPUs), else the 4-GPU one: the
# run folder and the pages name the system that matches the host.
NGPU=$(nvidia-smi -L | wc -l)
TEMPLATE=conf/system/standalone_${NGPU}gpu.toml
[ -f "$TEMPLATE" ] || TEMPLATE=conf/system/standalone_4gpu.toml
SYSTEM=$RESULTS/$(basename "$TEMPLATE")
python3 - "$SYSTEM" "$NCCL_LIB" "$TEMPLATE" <<'PY'
import sys, os, toml
data = toml.load(sys.argv[3])
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
ROOT=$(ls -dt "$RESULTS"/runs/*/ | sed -n 1p)
python3 -m cloudai_mbridge generate-report --system-config "$SYSTEM" --tests-dir conf/test --test-scenario "$SCENARIO" \
  --result-dir "$ROOT" 2>&1 | tee -a "$OUT/cloudai_ab.log"
echo "=== generate-report: exit ${PIPESTATUS[0]} at t+${SECONDS}s"
cp "$ROOT"/mbridge_* "$OUT/" 2>/dev/null
tar czf "$OUT/runs.tgz" -C "$ROOT" --exclude='*.pt' --exclude='hf_cache' --exclude='mbridge_payload' . && ls -la "$OUT"
