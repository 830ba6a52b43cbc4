#!/usr/bin/env bash
# One device command: refit over nccl / nvshmem / nixl / gloo on 4 GPUs (tp4 -> ep4) and nccl on 2 GPUs (tp2 -> ep2),
# each with coalescing (1024 MiB messages) next to megatron-core's own service, phases profiled (REFIT_PHASES).
#   usage: bash benchmarks/gpu_refit_run.sh <budget_s>      (run from anywhere; writes under $OUT, default /tmp/gpu_out)
# Needs the pre-installed stack /tmp/mbridge_stack/bridge-0.6.2/env.sh (megatron-core, torch). Optional carried
# wheels: .whl/nvshmem/*.whl (nvshmem4py: nvshmem.core) and .whl/nixl/*.whl (nixl._api), installed to /tmp/refit_site.
# Every step runs under `timeout` sized from what is left of the budget (and is skipped when too little is left);
# timeout signals its whole process group, so the payload's ranks die with gpu_refit_nccl.py.
set -u -o pipefail
BUDGET=${1:-560}
OUT=${OUT:-/tmp/gpu_out}
mkdir -p "$OUT"
LOG=$OUT/refit.log
cd "$(dirname "$0")/.." || exit 2
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1

log() { echo "[gpu_refit_run $(date -u +%H:%M:%S) t=${SECONDS}s] $*" | tee -a "$LOG"; }

STACK=/tmp/mbridge_stack/bridge-0.6.2/env.sh
if [ ! -f "$STACK" ]; then
  log "error: $STACK is missing (the pre-installed megatron-core stack); nothing run"
  exit 2
fi
# shellcheck disable=SC1090
source "$STACK"

wheels=()
for dir in .whl/nvshmem .whl/nixl; do
  if compgen -G "$dir/*.whl" > /dev/null; then
    wheels+=("$dir"/*.whl)
  else
    log "warning: no wheels in $dir (not carried?); that transport will fail if the stack lacks it"
  fi
done
if [ ${#wheels[@]} -gt 0 ]; then
  log "installing ${wheels[*]} into /tmp/refit_site"
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/refit_site \
    "${wheels[@]}" 2>&1 | tee -a "$LOG" || log "warning: pip install failed (rc=$?); continuing"
fi
export PYTHONPATH="${PYTHONPATH:+$PYTHONPATH:}/tmp/refit_site"

python3 - <<'PY' 2>&1 | tee -a "$LOG"
import importlib, importlib.metadata as md
for mod in ("nvshmem.core", "nixl._api", "megatron.core", "torch"):
    try:
        importlib.import_module(mod)
        print(f"import {mod}: ok")
    except BaseException as exc:
        print(f"import {mod}: FAILED {type(exc).__name__}: {exc}")
for dist in ("nvidia-nvshmem-cu13", "nvshmem4py-cu13", "nixl-cu13", "nixl", "megatron-core", "torch"):
    try:
        print(f"version {dist}: {md.version(dist)}")
    except BaseException as exc:
        print(f"version {dist}: FAILED {type(exc).__name__}: {exc}")
PY
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader 2>&1 | tee -a "$LOG"

# step <name> <min_s> <command...>: runs under timeout (what is left of the budget minus 20 s for tar), or skips
step() {
  local name=$1 min=$2; shift 2
  local left=$((BUDGET - SECONDS - 20))
  if [ "$left" -lt "$min" ]; then
    log "SKIP $name: ${left}s left, needs ${min}s"
    return 0
  fi
  log "START $name (timeout ${left}s): $*"
  timeout -k 15 "$left" "$@" 2>&1 | tee -a "$LOG"
  local rc=${PIPESTATUS[0]}
  log "END $name rc=$rc$([ "$rc" = 124 ] && echo ' (timed out)')"
}

step w4 120 python3 benchmarks/gpu_refit_nccl.py --out "$OUT/w4" --world 4 --layers 1 --pairs tp4-ep4 \
  --transports nccl nvshmem nixl gloo --coalesce-mib 0 1024 --profile --iterations 8 --warmup 2 \
  --refit-timeout-s 120 --no-fallback
step w2 90 python3 benchmarks/gpu_refit_nccl.py --out "$OUT/w2" --world 2 --layers 1 --pairs tp2-ep2 \
  --transports nccl --coalesce-mib 0 1024 --profile --iterations 8 --warmup 2 --refit-timeout-s 120 --no-fallback

parts=()
for d in w4 w2; do
  [ -d "$OUT/$d/runs" ] && parts+=("$d/runs")
  [ -f "$OUT/$d/gpu_refit_nccl.json" ] && parts+=("$d/gpu_refit_nccl.json")
done
if [ ${#parts[@]} -gt 0 ]; then
  tar czf "$OUT/refit_runs.tgz" -C "$OUT" "${parts[@]}" && log "wrote $OUT/refit_runs.tgz (${parts[*]})"
fi
log "done"
