#!/usr/bin/env bash
# The dispatcher A/B on the real Megatron-Bridge stack, as one command: alltoall against the flex arms (ncclep
# through Transformer Engine's NCCL EP; deepep through UCCL-EP's drop-in deep_ep) on every GPU of the host, each run a
# fresh process start, by benchmarks/gpu_dispatcher_ab.py --engine bridge.
#
# usage (GPU host; runs from the repository root): bash benchmarks/gpu_ab_bridge_run.sh <budget_s> [gpu_dispatcher_ab.py options...]
# Needs the stack bridge-0.6.2 (Megatron-Bridge 0.6.2, Megatron-Core 0.19.2, Transformer Engine 2.20.2: installed by
# benchmarks/gpu_setup.sh bridge-0.6.2, or in the active Python, docs/gpu.md) and NCCL 2.32.3 (gpu_setup.sh
# nccl-2.32.3, or MBRIDGE_NCCL_LIB=<its libnccl.so.2>). Optional: .whl/uccl (made by benchmarks/gpu_uccl_prepare.sh)
# for the deepep arm; /tmp/mbridge_stack/hybridep/site (benchmarks/gpu_hybridep_build.sh,
# NVIDIA DeepEP's hybrid-ep build) for the hybridep arm: when it exists and the options ask for hybridep
# (--with-hybridep or hybridep in --arms) without --hybridep-dir, `--hybridep-dir <that site>` is added (the hybridep
# arm alone then runs with it first on PYTHONPATH, no UCCL path, deepep_impl nvidia; its env.sh is not sourced, as it
# would put NVIDIA's deep_ep on every arm's path).
# Every arm runs with the same NCCL: 2.32.3 by LD_PRELOAD (NCCL EP needs >= the NCCL its library was built with; the
# payload's MBRIDGE_VERSIONS line records the loaded one). NCCL EP's kernel cache is shared by the starts
# (NCCL_EP_JIT_CACHE_DIR): only the first ncclep start compiles. NVLink multicast stays off, as in every recorded run.
# Results in the folder OUT (environment, default /tmp/gpu_out): ab.log (everything printed), gpu_dispatcher_ab.json,
# ab_runs.tgz (run folders: config + rank logs; `python3 benchmarks/gpu_dispatcher_ab.py --report <unpacked>` redoes
# metrics and the A/B). AB_WORK (default /tmp/gpu_work/ab_bridge) is the scratch folder, emptied first: two runs of
# this script in one session each take their own (and their own OUT), e.g. a one-start smoke of a flex arm before the
# interleaved starts.
# The verdict (reports/ab.py) needs CloudAI: this interpreter's, else the folder CloudAI's wheels were installed into
# on this host (MBRIDGE_CLOUDAI_SITE, default /tmp/cloudai_site, where gpu_cloudai_ab_run.sh puts it), for the report
# step only (gpu_dispatcher_ab.py find_cloudai).
# A start that hangs ends without holding the rest of the budget (docs/gpu.md): the payload's watchdog
# (--hang-timeout-s, default 120 s without progress) exits 124 after writing its stacks and MBRIDGE_HANG into the rank
# logs; past the per-run --timeout-s the launcher (payload/refit/local.py) asks the ranks for their stacks (SIGUSR1)
# and kills each rank's whole process group; this script's outer timeout (SIGTERM to the driver) ends the ranks too.
# Rank logs are written live into the run folders. Such a start is a failed start of its arm, with its class ("hang at
# first dispatch"), and the remaining starts run.
# Exit status 3, with one line and before anything is written, without a GPU or without the bridge-0.6.2 stack
# (benchmarks/gpu_common.sh); -h / --help prints this header.
set -u -o pipefail
# shellcheck source=benchmarks/gpu_common.sh
source "$(dirname "$0")/gpu_common.sh"
gpu_usage_if_asked "$0" "$@"
BUDGET=${1:?usage: gpu_ab_bridge_run.sh <budget_s> [options]}
shift
cd "$(dirname "$0")/.." || exit 2
WORK=${AB_WORK:-/tmp/gpu_work/ab_bridge}
# shellcheck source=benchmarks/gpu_bridge_env.sh
source benchmarks/gpu_bridge_env.sh
HYBRIDEP_SITE=/tmp/mbridge_stack/hybridep/site
HEP=()
want_hep=0; have_hep=0
for a in "$@"; do
  case $a in
    --with-hybridep|hybridep) want_hep=1 ;;
    --hybridep-dir|--hybridep-dir=*) have_hep=1 ;;
  esac
done
if [ "$want_hep" = 1 ] && [ "$have_hep" = 0 ]; then
  if [ -d "$HYBRIDEP_SITE/deep_ep" ]; then HEP=(--hybridep-dir "$HYBRIDEP_SITE")
  else echo "warning: $HYBRIDEP_SITE/deep_ep missing (run benchmarks/gpu_hybridep_build.sh): hybridep without it"; fi
fi
date -u +"date_utc %Y-%m-%dT%H:%M:%SZ"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
nvidia-smi topo -m 2>&1 | sed -n '1,6p'
T=$((BUDGET - SECONDS - 12))
echo "=== gpu_dispatcher_ab --engine bridge (timeout ${T}s, t+${SECONDS}s) LD_PRELOAD=$PRELOAD"
# A 20-iteration run took 74-104 s on 4 x H100 (2026-11-27): none is started with less than 110 s of budget left.
LD_PRELOAD=$PRELOAD timeout -k 10 "$T" python3 benchmarks/gpu_dispatcher_ab.py --out "$WORK" --engine bridge \
  --budget-s $((T - 10)) --min-run-s 110 ${UCCL[@]+"${UCCL[@]}"} ${HEP[@]+"${HEP[@]}"} "$@" 2>&1 \
  | grep -v -E "UserWarning|warnings.warn|^  return func|^\s*$" | tee "$OUT/ab.log"
echo "=== gpu_dispatcher_ab: exit ${PIPESTATUS[0]} at t+${SECONDS}s"
cp "$WORK"/gpu_dispatcher_ab.json "$OUT/" 2>/dev/null
ls "$NCCL_EP_JIT_CACHE_DIR" 2>/dev/null | sed -n '1,3p' | sed 's/^/nccl_ep_jit_cache: /'
tar czf "$OUT/ab_runs.tgz" -C "$WORK" --exclude='*.pt' --exclude='hf_cache' . && ls -la "$OUT"
