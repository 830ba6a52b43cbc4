#!/usr/bin/env bash
# One command: refit over nccl / nvshmem / nixl / gloo on 4 GPUs (tp4 -> ep4) and nccl on 2 GPUs (tp2 -> ep2); each
# job times Megatron-Core's own service and ours (replay, 1024 MiB messages, pairwise) side by side, with the speed-up.
#   usage: bash benchmarks/gpu_refit_run.sh <budget_s>      (run from anywhere; writes under the folder OUT,
#          environment, default /tmp/gpu_out)
# Megatron-Core: the stack bridge-0.6.2 (/tmp/mbridge_stack/bridge-0.6.2/env.sh of benchmarks/gpu_setup.sh) when it
# is there, else a wheel .whl/mcore/megatron_core-*.whl (2.4 MB: it needs only torch, numpy and packaging, which a CUDA
# torch install has; it spares installing the Bridge + Transformer Engine stack), else python3's own megatron.core (a
# venv, docs/gpu.md). Optional wheels: .whl/nvshmem/*.whl (nvshmem4py: nvshmem.core) and .whl/nixl/*.whl
# (nixl._api), installed to /tmp/refit_site. A wheel too large for your transfer tool may come in parts,
# .whl/<name>_a/<wheel>.part0, .whl/<name>_b/<wheel>.part1, ... each folder with the same SHA256SUMS (kept on the host
# between runs): joined and checked here.
# The two steps' arguments can be replaced: REFIT_W4_ARGS / REFIT_W2_ARGS (gpu_refit_nccl.py options after --out;
# "skip" skips the step).
# Every step runs under `timeout` sized from what is left of the budget (and is skipped when too little is left);
# timeout signals its whole process group, so the payload's ranks die with gpu_refit_nccl.py.
# Exit status 3, with one line and before anything is written, on a host with fewer than 2 GPUs or without
# Megatron-Core (benchmarks/gpu_common.sh); -h / --help prints this header.
set -u -o pipefail
# shellcheck source=benchmarks/gpu_common.sh
source "$(dirname "$0")/gpu_common.sh"
gpu_usage_if_asked "$0" "$@"
BUDGET=${1:-560}
cd "$(dirname "$0")/.." || exit 2
gpu_need 2
STACK=$MBRIDGE_STACK_ROOT/bridge-0.6.2/env.sh
MCORE=none
if [ -f "$STACK" ]; then MCORE=stack
elif compgen -G ".whl/mcore/megatron_core-*.whl" > /dev/null; then MCORE=wheel
elif python3 -c "import importlib.util as u, sys; sys.exit(u.find_spec('megatron.core') is None)" 2>/dev/null; then
  MCORE=python
else
  gpu_stop "no Megatron-Core: neither the bridge-0.6.2 stack ($STACK), nor megatron.core in python3, nor" \
    ".whl/mcore/megatron_core-*.whl (pip download --no-deps megatron-core==0.19.2 -d .whl/mcore, where PyPI is)"
fi
OUT=${OUT:-/tmp/gpu_out}
mkdir -p "$OUT"
LOG=$OUT/refit.log
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1

log() { echo "[gpu_refit_run $(date -u +%H:%M:%S) t=${SECONDS}s] $*" | tee -a "$LOG"; }

wheels=()
case $MCORE in
  stack) gpu_use_stack bridge-0.6.2 ;;
  python) export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}; log "megatron-core of $(command -v python3)" ;;
  wheel) wheels+=(.whl/mcore/megatron_core-*.whl); log "megatron-core from the wheel in .whl/mcore (no Bridge stack on this host)" ;;
esac

# parts of a cut wheel: .whl/<name>_<x>/<wheel>.part<N> (+ SHA256SUMS) -> /tmp/refit_joined/<wheel>
mkdir -p /tmp/refit_joined
for sums in .whl/*_a/SHA256SUMS; do
  [ -f "$sums" ] || continue
  base=${sums%_a/SHA256SUMS}
  while read -r want name; do
    parts=$(ls "$base"_*/"$name".part* 2>/dev/null | awk -F'.part' '{print $NF" "$0}' | sort -n | cut -d' ' -f2-)
    n=$(echo "$parts" | grep -c . || true)
    # shellcheck disable=SC2086
    cat $parts > "/tmp/refit_joined/$name" 2>/dev/null
    got=$(sha256sum "/tmp/refit_joined/$name" | awk '{print $1}')
    if [ "$got" = "$want" ]; then
      log "joined $name from $n part(s)"
      wheels+=("/tmp/refit_joined/$name")
    else
      log "warning: $name: $n part(s) here, sha256 differs (a part missing?); not installed"
      rm -f "/tmp/refit_joined/$name"
    fi
  done < "$sums"
  for w in "$base"_a/*.whl; do [ -f "$w" ] && wheels+=("$w"); done
done

for dir in .whl/nvshmem .whl/nixl; do
  if compgen -G "$dir/*.whl" > /dev/null; then
    wheels+=("$dir"/*.whl)
  else
    log "warning: no wheels in $dir; that transport will fail if the stack lacks it"
  fi
done
for w in "${wheels[@]}"; do  # one at a time: a wheel that does not install costs only its own transport
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/refit_site --upgrade "$w" \
    2>&1 | tee -a "$LOG"
  [ "${PIPESTATUS[0]}" = 0 ] && log "installed $(basename "$w")" || log "warning: $(basename "$w") did not install"
done
export PYTHONPATH="${PYTHONPATH:+$PYTHONPATH:}/tmp/refit_site"

# The PyPI wheel of megatron-core 0.19.2 lacks the CUDA source its NVSHMEM copy service compiles at planning
# (resharding/nvshmem_copy_service/kernels/chunked_kernel.cu; 4 x H100, 2026-11-28: FileNotFoundError). A copy
# put in .whl/mcore_kernels/ (from Megatron-LM's repository at the release's tag; not part of this project) is
# put where the service looks, only when the installed megatron-core has none.
if compgen -G ".whl/mcore_kernels/*.cu" > /dev/null; then
  svc=$(python3 -c "import importlib.util as u, os; s = u.find_spec('megatron.core'); \
print(os.path.join(s.submodule_search_locations[0], 'resharding', 'nvshmem_copy_service'))" 2>/dev/null)
  if [ -n "$svc" ] && [ ! -d "$svc/kernels" ]; then
    if mkdir -p "$svc/kernels" 2>/dev/null && cp .whl/mcore_kernels/*.cu "$svc/kernels/"; then
      log "placed $(ls .whl/mcore_kernels/*.cu | xargs -n1 basename | tr '\n' ' ')in $svc/kernels (missing from the wheel)"
    else
      log "warning: $svc/kernels is missing and could not be written"
    fi
  fi
fi

python3 - <<'PY' 2>&1 | tee -a "$LOG"
import importlib, importlib.metadata as md
for mod in ("nvshmem.core", "cupy", "nixl._api", "megatron.core", "torch"):
    try:
        importlib.import_module(mod)
        print(f"import {mod}: ok")
    except BaseException as exc:
        print(f"import {mod}: FAILED {type(exc).__name__}: {exc}")
for dist in ("nvidia-nvshmem-cu13", "nvshmem4py-cu13", "cupy-cuda13x", "nixl-cu13", "nixl", "megatron-core", "torch"):
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

# --executor compare: each job times Megatron-Core's own service for the transport, then ours (replay over 1024 MiB
# pairwise messages, overlapped), then the plan's own exchange ceiling; each row prints both medians with n, % of the
# p2p ceiling of step 1 and of the plan's, and the speed-up with its 95 % interval (RESULT ..._speedup*). No --profile:
# it serialises ours (add it through REFIT_W4_ARGS for REFIT_PHASES). One path only: --coalesce-mib 0 (Megatron-Core's
# service) or --executor replay.
W4_ARGS=${REFIT_W4_ARGS:-"--world 4 --layers 1 --pairs tp4-ep4 --transports nccl nvshmem nixl gloo --coalesce-mib 1024 \
--executor compare --coalesce-schedule pairwise --coalesce-overlap on --iterations 8 --warmup 2 --refit-timeout-s 120 \
--no-fallback"}
W2_ARGS=${REFIT_W2_ARGS:-"--world 2 --layers 1 --pairs tp2-ep2 --transports nccl --coalesce-mib 1024 --executor compare \
--coalesce-schedule pairwise --coalesce-overlap on --iterations 8 --warmup 2 --refit-timeout-s 120 --no-fallback"}
# shellcheck disable=SC2086
[ "$W4_ARGS" = skip ] || step w4 120 python3 benchmarks/gpu_refit_nccl.py --out "$OUT/w4" $W4_ARGS
# shellcheck disable=SC2086
[ "$W2_ARGS" = skip ] || step w2 90 python3 benchmarks/gpu_refit_nccl.py --out "$OUT/w2" $W2_ARGS

parts=()
for d in w4 w2; do
  [ -d "$OUT/$d/runs" ] && parts+=("$d/runs")
  [ -f "$OUT/$d/gpu_refit_nccl.json" ] && parts+=("$d/gpu_refit_nccl.json")
done
if [ ${#parts[@]} -gt 0 ]; then
  tar czf "$OUT/refit_runs.tgz" -C "$OUT" "${parts[@]}" && log "wrote $OUT/refit_runs.tgz (${parts[*]})"
fi
log "done"
