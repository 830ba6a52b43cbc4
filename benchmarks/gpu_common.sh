# shellcheck shell=bash
# Shared by the benchmarks/gpu_*.sh entry scripts (sourced; defines functions only, runs and writes nothing).
# A script stops before it writes anything when this host cannot run it: one line, `error: <script>: <what is
# missing>: <what to do>`, on stderr, and exit status 3 (MBRIDGE_NO_GPU_EXIT), the same as the gpu_*.py scripts
# (benchmarks/provenance.py require_gpu).
#   gpu_usage_if_asked <script path> "$@"   -h / --help: print the script's header comment and exit 0 (no GPU needed)
#   gpu_need <n>                            stop unless nvidia-smi lists at least n GPUs
#   gpu_stop <what is missing and what to do>
#   gpu_use_stack <stack>                   the Python packages of <stack> (e.g. bridge-0.6.2): gpu_setup.sh's
#                                           /tmp/mbridge_stack/<stack>/env.sh when it is there, else the active Python
#                                           when it has Megatron-Bridge at that version; stop otherwise. Call it from
#                                           the repository root (it goes on PYTHONPATH).
MBRIDGE_NO_GPU_EXIT=3
MBRIDGE_STACK_ROOT=${MBRIDGE_STACK_ROOT:-/tmp/mbridge_stack}

gpu_script_name() { basename "${MBRIDGE_SCRIPT:-$0}"; }

gpu_stop() {
  echo "error: $(gpu_script_name): $*" >&2
  exit "$MBRIDGE_NO_GPU_EXIT"
}

gpu_usage_if_asked() {
  local script=$1
  shift
  case "${1:-}" in
    -h|--help) sed -n '2,/^[^#]/{/^#/s/^# \{0,1\}//p}' "$script"; exit 0 ;;
  esac
}

# gpu_problem <n>: why this host lacks n NVIDIA GPUs, on stdout (nothing, status 0, when it has them)
gpu_problem() {
  local need=$1 have
  if ! command -v nvidia-smi >/dev/null 2>&1; then
    echo "no NVIDIA GPU here (nvidia-smi is not on PATH): run it on a GPU host (docs/gpu.md)"
    return 1
  fi
  have=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
  if [ "$have" -lt "$need" ]; then
    echo "$need GPU(s) needed, nvidia-smi lists $have: run it on a host with $need NVIDIA GPU(s)"
    return 1
  fi
}

gpu_need() {
  local why
  why=$(gpu_problem "$1") || gpu_stop "$why"
}

gpu_use_stack() {
  local stack=$1 want have
  if [ -f "$MBRIDGE_STACK_ROOT/$stack/env.sh" ]; then
    # shellcheck disable=SC1090
    source "$MBRIDGE_STACK_ROOT/$stack/env.sh"
    return 0
  fi
  want=${stack#bridge-}
  have=$(python3 -c 'import importlib.metadata as m; print(m.version("megatron-bridge"))' 2>/dev/null)
  if [ -n "$have" ] && [ "$have" = "$want" ]; then  # as env.sh does: the checkout on PYTHONPATH
    export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} MBRIDGE_STACK=${MBRIDGE_STACK:-$stack}
    return 0
  fi
  gpu_stop "the $stack stack is missing (no $MBRIDGE_STACK_ROOT/$stack/env.sh, and python3 has Megatron-Bridge" \
    "${have:-none}, not $want): install it (docs/gpu.md) or run benchmarks/gpu_setup.sh $stack"
}
