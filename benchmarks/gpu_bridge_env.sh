# The environment every Bridge-stack device command shares (benchmarks/gpu_ab_bridge_run.sh,
# benchmarks/gpu_dispatch_bench_run.sh), sourced with WORK set to the command's scratch folder:
# - OUT (default /tmp/gpu_out) and a fresh WORK;
# - NVLink multicast off (the device's rule), unbuffered Python;
# - the stack bridge-0.6.2 (benchmarks/gpu_setup.sh bridge-0.6.2), or exit 2;
# - PRELOAD: NCCL 2.32.3's libnccl.so.2 from the library stack nccl-2.32.3 (NCCL EP needs >= the NCCL its library
#   was built with), empty with a warning when that stack is missing; NCCL EP's kernel cache and CUDA_HOME;
# - UCCL: `--uccl-dir .whl/uccl` and /tmp/uccl_site on PYTHONPATH when .whl/uccl is carried (the deepep arm).
OUT=${OUT:-/tmp/gpu_out}
: "${WORK:?gpu_bridge_env.sh: set WORK first}"
mkdir -p "$OUT" && rm -rf "$WORK" && mkdir -p "$WORK"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
# shellcheck disable=SC1091
source /tmp/mbridge_stack/bridge-0.6.2/env.sh || { echo "error: run benchmarks/gpu_setup.sh bridge-0.6.2 first"; exit 2; }
NCCL_LIB=/tmp/mbridge_stack/nccl-2.32.3/site/nvidia/nccl/lib/libnccl.so.2
PRELOAD=""
if [ -f "$NCCL_LIB" ]; then PRELOAD=$NCCL_LIB; else echo "warning: $NCCL_LIB missing: torch's own NCCL (ncclep cannot run)"; fi
export NCCL_EP_JIT_CACHE_DIR=/tmp/nccl_ep_jit_cache CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
mkdir -p "$NCCL_EP_JIT_CACHE_DIR"
UCCL=()
if [ -f .whl/uccl/deep_ep/__init__.py ]; then
  rm -rf /tmp/uccl_site
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/uccl_site \
    .whl/uccl/uccl-*.whl .whl/uccl/nvidia_cuda_runtime_cu12-*.whl || echo "warning: the uccl wheels did not install"
  export PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}/tmp/uccl_site
  UCCL=(--uccl-dir .whl/uccl)
fi
