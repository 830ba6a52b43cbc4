# The environment every Bridge-stack benchmark command shares (benchmarks/gpu_ab_bridge_run.sh,
# benchmarks/gpu_dispatch_bench_run.sh), sourced from the repository root with WORK set to the command's scratch folder:
# - first, before anything is written: a GPU (nvidia-smi) and the stack bridge-0.6.2 (benchmarks/gpu_setup.sh's, or
#   the active Python's: gpu_common.sh gpu_use_stack); without them one line and exit 3;
# - OUT (the results folder, default /tmp/gpu_out) and a fresh WORK;
# - NVLink multicast off (as in every recorded run), unbuffered Python;
# - PRELOAD: NCCL 2.32.3's libnccl.so.2 (MBRIDGE_NCCL_LIB, default the library stack nccl-2.32.3 of gpu_setup.sh; NCCL
#   EP needs >= the NCCL its library was built with), empty with a warning when missing; NCCL EP's kernel cache and
#   CUDA_HOME;
# - UCCL: `--uccl-dir .whl/uccl` and /tmp/uccl_site on PYTHONPATH when .whl/uccl is there (the deepep arm; made by
#   benchmarks/gpu_uccl_prepare.sh where PyPI is).
# shellcheck source=benchmarks/gpu_common.sh
source "$(dirname "${BASH_SOURCE[0]}")/gpu_common.sh"
: "${WORK:?gpu_bridge_env.sh: set WORK first}"
gpu_need 1
gpu_use_stack bridge-0.6.2
OUT=${OUT:-/tmp/gpu_out}
mkdir -p "$OUT" && rm -rf "$WORK" && mkdir -p "$WORK"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
NCCL_LIB=${MBRIDGE_NCCL_LIB:-$MBRIDGE_STACK_ROOT/nccl-2.32.3/site/nvidia/nccl/lib/libnccl.so.2}
PRELOAD=""
if [ -f "$NCCL_LIB" ]; then PRELOAD=$NCCL_LIB; else echo "warning: $NCCL_LIB missing: torch's own NCCL (ncclep cannot run; set MBRIDGE_NCCL_LIB)"; fi
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
