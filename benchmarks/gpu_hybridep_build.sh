#!/usr/bin/env bash
# Build NVIDIA DeepEP's HybridEP (deep_ep.HybridEPBuffer, the `hybridep` flex backend of megatron-core) on a GPU host
# without network, from the source archive benchmarks/gpu_hybridep_prepare.sh made where the DeepEP repository is.
#
# usage (repository root, on the host): bash benchmarks/gpu_hybridep_build.sh
#   Copy .gpu_stack/hybridep/ (its parts pNN; one unless it was split for a transfer tool's size limit) into this
#   checkout first. Parts are checked (sha256) and kept in /tmp/mbridge_stack/hybridep/ until every part is there.
# Builds `pip wheel --no-build-isolation` of DeepEP's setup.py against the host's torch, then `pip install --target`
# into /tmp/mbridge_stack/hybridep/site (deep_ep/, deep_ep_cpp*.so, hybrid_ep_cpp*.so, deep_ep/backend/ = the
# headers HybridEP's run-time JIT compiles against), and checks `import deep_ep; deep_ep.HybridEPBuffer` there.
# Then: source /tmp/mbridge_stack/hybridep/env.sh   (PYTHONPATH, CUDA_HOME, HYBRID_EP_CACHE_DIR)
# Prints one line `MBRIDGE_HYBRIDEP built=<yes|no> commit=<sha> ...`; on a failed build the last compiler error lines
# before it. Exit: 0 built (or reused), 1 build/import failed, 2 a bad part, 3 no GPU here or parts still missing (the
# one line says which; nothing is written without a GPU or without any part), 4 built but the smoke failed, 124 the
# build timed out. -h / --help prints this header.
#
# Environment (all optional):
#   HYBRIDEP_ARCH       TORCH_CUDA_ARCH_LIST for the build and the JIT (default: the GPU's, e.g. 9.0; DeepEP's own
#                       default would be 10.0, setup.py L52)
#   HYBRIDEP_NVSHMEM    off (default): deep_ep_cpp without NVSHMEM (intra-node Buffer only; HybridEP never needs it);
#                       auto: DeepEP's own choice, i.e. the nvidia-nvshmem wheel when installed (internode + low-latency
#                       kernels: more to compile); NVSHMEM_DIR set: that one
#   HYBRIDEP_TIMEOUT_S  the build's limit (default 480)
#   MAX_JOBS            parallel compile jobs (default nproc)
#   HYBRIDEP_CXX        the C++ compiler to build with (default: the first of $CXX, g++, the system's g++ whose shared
#                       libraries link libstdc++ dynamically; CC follows it); see 2b
#   CUDA_HOME           default /usr/local/cuda (needed: torch would take /usr/local from a wrapper nvcc on PATH,
#                       and HybridEP's JIT runs $CUDA_HOME/bin/nvcc at run time)
#   HYBRIDEP_SMOKE      N > 0: after the build, one dispatch + combine on N GPUs (torchrun, 240 s limit), which also
#                       exercises the run-time JIT; prints `MBRIDGE_HYBRIDEP smoke=<ok|failed> variant=... ...`, and
#                       on a failure the ranks' last stages, the native and Python frames of a crash and the log tail
#   HYBRIDEP_SMOKE_VARIANTS  space-separated environment assignments, one smoke each (default: "default", the
#                       host's environment), e.g. "default USE_MNNVL=0" (USE_MNNVL=0: cudaMalloc + CUDA IPC instead of
#                       fabric handles, allocator.cu)
#   HYBRIDEP_FORCE      1: rebuild even when the site is already built
set -uo pipefail
# shellcheck source=benchmarks/gpu_common.sh
source "$(dirname "$0")/gpu_common.sh"
gpu_usage_if_asked "$0" "$@"
cd "$(dirname "$0")/.." || exit 1
NAME=hybridep
ROOT=/tmp/mbridge_stack
DIR=$ROOT/$NAME
SITE=$DIR/site
PY=${PYTHON:-python3}
TIMEOUT_S=${HYBRIDEP_TIMEOUT_S:-480}
NVSHMEM_MODE=${HYBRIDEP_NVSHMEM:-off}
export CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
COMMIT="?"

result() {  # result <built> <rc> <words...>: the one summary line, then exit rc
  local built=$1 rc=$2; shift 2
  echo "MBRIDGE_HYBRIDEP built=$built commit=$COMMIT $*"
  exit "$rc"
}

# 0. Before anything is written: a GPU, and the source (parts here, or kept or unpacked by an earlier run).
no_gpu=$(gpu_problem 1) || result no "$MBRIDGE_NO_GPU_EXIT" "reason=no_gpu: $no_gpu"
if ! compgen -G ".gpu_stack/$NAME/p*/piece" >/dev/null && [ ! -f "$DIR/SHA256SUMS" ] && [ ! -f "$DIR/files/.done" ]; then
  result no "$MBRIDGE_NO_GPU_EXIT" "reason=no_source: no .gpu_stack/$NAME/pNN here nor in $DIR: make them with" \
    "benchmarks/gpu_hybridep_prepare.sh where the DeepEP repository is and copy .gpu_stack/$NAME/ into this checkout"
fi
mkdir -p "$DIR"

# 1. Receive the parts (sha256 of each), join them once all are here, check the tar and its files.
for d in .gpu_stack/"$NAME"/p*/; do
  [ -f "$d/piece" ] || continue
  n=$(awk '{print $2}' "$d/STACK")
  want=$(grep " piece\.$n\$" "$d/SHA256SUMS" | awk '{print $1}')
  got=$(sha256sum "$d/piece" | awk '{print $1}')
  [ "$want" = "$got" ] || { echo "error: $d/piece: sha256 $got, expected $want (copy it again)" >&2; result no 2 reason=bad_part; }
  cp "$d/piece" "$DIR/piece.$n" && cp "$d/SHA256SUMS" "$DIR/SHA256SUMS"
done
if [ ! -f "$DIR/files/.done" ]; then
  total=$(grep -c ' piece\.' "$DIR/SHA256SUMS")
  have=$(ls "$DIR"/piece.* 2>/dev/null | wc -l)
  [ "$have" -ge "$total" ] || result no 3 "reason=waiting have=$have/$total: copy the other .gpu_stack/$NAME/pNN here and run it again"
  cat "$DIR"/piece.* > "$DIR/stack.tar"  # the glob sorts: piece.00, piece.01, ...
  (cd "$DIR" && grep ' stack\.tar$' SHA256SUMS | sha256sum -c --quiet -) || result no 2 reason=stack_tar_sha256
  rm -rf "$DIR/files" && mkdir -p "$DIR/files"
  tar -xf "$DIR/stack.tar" -C "$DIR/files" && rm -f "$DIR/stack.tar" "$DIR"/piece.*
  (cd "$DIR/files" && sha256sum -c --quiet FILES.sha256) || result no 2 reason=file_sha256
  touch "$DIR/files/.done"
fi
COMMIT=$(awk '$1 == "commit" {print $2}' "$DIR/files/SOURCE.txt")

# 2. Build environment.
[ -x "$CUDA_HOME/bin/nvcc" ] || result no 1 "reason=no_nvcc CUDA_HOME=$CUDA_HOME (set CUDA_HOME to the toolkit)"
ARCH=${HYBRIDEP_ARCH:-$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | sed -n 1p | tr -d ' ')}
[ -n "$ARCH" ] || ARCH=9.0
export TORCH_CUDA_ARCH_LIST=$ARCH HYBRID_EP_MULTINODE=0 USE_NIXL=0 MAX_JOBS=${MAX_JOBS:-$(nproc)}
# torch's BuildExtension compiles in parallel (MAX_JOBS) only through ninja; pip's ninja lives in Python's scripts dir.
SCRIPTS=$("$PY" -c 'import sysconfig; print(sysconfig.get_path("scripts"))' 2>/dev/null)
export PATH=$CUDA_HOME/bin:${SCRIPTS:+$SCRIPTS:}$PATH
NINJA=$(ninja --version 2>/dev/null || echo none)
# hybrid_ep_cpp links -lnvtx3interop (setup.py L81): CUDA 13 ships libnvtx3interop.so(.1) in the toolkit's lib64;
# a pip-only CUDA (nvidia/cu13/lib) has only the versioned file, so an unversioned alias is made for the linker.
# The folder holding it goes on the run path too (the .so's NEEDED libnvtx3interop.so.1 at import).
NVTX_LIB=""
for d in "$CUDA_HOME/lib64" "$CUDA_HOME/lib" "$CUDA_HOME/targets/x86_64-linux/lib" \
         $("$PY" -c "import glob, site; print(' '.join(d for p in site.getsitepackages() for d in glob.glob(p + '/nvidia/*/lib')))" 2>/dev/null); do
  if ls "$d"/libnvtx3interop.so* >/dev/null 2>&1; then NVTX_LIB=$d; break; fi
done
ALIAS=$DIR/linkalias && rm -rf "$ALIAS" && mkdir -p "$ALIAS"
if [ -n "$NVTX_LIB" ]; then
  [ -e "$NVTX_LIB/libnvtx3interop.so" ] || ln -s "$(ls "$NVTX_LIB"/libnvtx3interop.so.* | sed -n 1p)" "$ALIAS/libnvtx3interop.so"
  export LIBRARY_PATH=$ALIAS:$NVTX_LIB${LIBRARY_PATH:+:$LIBRARY_PATH}
  export LDFLAGS="${LDFLAGS:-} -L$ALIAS -L$NVTX_LIB -Wl,-rpath,$NVTX_LIB"
else
  echo "warning: no libnvtx3interop.so* under $CUDA_HOME or site-packages nvidia/*/lib: the link will likely fail"
fi

# 2b. The C++ compiler, picked only when a build runs (pick_compiler). The GPU image's default (CC/CXX =
# /opt/gcc/bin/gcc, g++: a wrapper around GCC 13.3) links libstdc++ statically into a shared library and exports its
# symbols: the hybrid_ep_cpp built with it died with
# SIGSEGV in HybridEPBuffer() on 1 and on 4 GPUs, inside std::ostream::_M_insert<long> (get_comm_id's
# ostringstream, csrc/hybrid_ep/hybrid_ep.cu L27-L31), a private libstdc++ copy meeting the process's own; built with
# the system's x86_64-linux-gnu-g++-13 (libstdc++.so.6 linked dynamically) the same smoke passed (1 x H200,
# 2026-11-29). So each candidate links a probe library first, and the first whose library exports no libstdc++
# symbol compiles and links (HYBRIDEP_CXX names one to take as it is).
so_carries_libstdcxx() {  # <lib.so>: 0 when the library carries a libstdc++ of its own: it exports std::ostream
  # symbols, or holds libstdc++'s iostream code without loading libstdc++.so.6 (such a copy meets the process's own)
  # grep reads all of nm's output: `| grep -q` would end nm with SIGPIPE and, under pipefail, turn a match into 141
  nm -D --defined-only "$1" 2>/dev/null | grep ' _ZNSo' >/dev/null && return 0
  grep -q -a 'St9basic_ios' "$1" || return 1
  ! readelf -d "$1" 2>/dev/null | grep 'NEEDED.*libstdc++' >/dev/null
}
cxx_links_libstdcxx_dynamically() {  # <g++>: 0 when a -shared library it links carries no libstdc++ of its own
  local c=$1 d rc
  d=$(mktemp -d) || return 1
  printf '#include <sstream>\n#include <string>\nstd::string probe(long v) { std::ostringstream s; s << v; return s.str(); }\n' > "$d/p.cpp"
  "$c" -shared -fPIC -O1 -o "$d/p.so" "$d/p.cpp" >/dev/null 2>&1 || { rm -rf "$d"; return 1; }
  ! so_carries_libstdcxx "$d/p.so"
  rc=$?
  rm -rf "$d"
  return $rc
}
pick_compiler() {  # [compilers to skip...]: export CXX / CC for the build, one line per candidate refused
  local c p CXX_PICK=${HYBRIDEP_CXX:-} CC_PICK skip=" $* "
  if [ -z "$CXX_PICK" ]; then
    for c in "${CXX:-}" g++ /usr/bin/g++ /usr/bin/x86_64-linux-gnu-g++ /usr/bin/x86_64-linux-gnu-g++-*; do
      [ -n "$c" ] && p=$(command -v "$c" 2>/dev/null) || continue
      p=$(readlink -f "$p")
      case "$skip" in *" $p "*) continue ;; esac
      skip="$skip$p "
      if cxx_links_libstdcxx_dynamically "$p"; then CXX_PICK=$p; break; fi
      echo "MBRIDGE_HYBRIDEP compiler $c ($p) links libstdc++ statically into shared libraries: not used"
    done
  fi
  if [ -n "$CXX_PICK" ]; then
    CC_PICK=$(echo "$CXX_PICK" | sed 's#g++\([^/]*\)$#gcc\1#')
    [ -x "$CC_PICK" ] || CC_PICK=${CC:-gcc}
    export CXX=$CXX_PICK CC=$CC_PICK
    echo "MBRIDGE_HYBRIDEP compiler CXX=$CXX ($("$CXX" -dumpfullversion 2>/dev/null || echo '?'))${HYBRIDEP_CXX:+ (HYBRIDEP_CXX)}"
  else
    echo "warning: no C++ compiler here links libstdc++ dynamically; building with ${CXX:-c++} (HybridEPBuffer() may crash)"
  fi
}

# 3. Build (once; an existing site whose import works is reused).
check_import() {
  PYTHONPATH=$SITE${PYTHONPATH:+:$PYTHONPATH} "$PY" - <<'PYEOF' 2>&1
import torch, deep_ep, hybrid_ep_cpp, deep_ep_cpp, os
assert hasattr(deep_ep, "HybridEPBuffer"), "deep_ep has no HybridEPBuffer"
backend = os.path.join(os.path.dirname(deep_ep.__file__), "backend", "hybrid_ep_backend.cuh")
assert os.path.isfile(backend), f"{backend} missing (HybridEP's JIT needs it)"
print(f"IMPORT_OK deep_ep={deep_ep.__file__} hybrid_ep_cpp={hybrid_ep_cpp.__file__} torch={torch.__version__}")
PYEOF
}
LOG=$DIR/build.log
start=$SECONDS
build_once() {  # one build with the exported CXX / CC into $SITE; exits through result() on a failure
  B=$DIR/build && rm -rf "$B" "$SITE" && mkdir -p "$B/out" "$SITE"
  tar -xzf "$DIR/files/DeepEP-src.tar.gz" -C "$B" || result no 1 reason=untar
  if [ "$NVSHMEM_MODE" = off ] && [ -z "${NVSHMEM_DIR:-}" ]; then
    # setup.py L216 finds the nvidia-nvshmem wheel by itself; without a spec it disables NVSHMEM (L220-L222). Done in
    # this build copy only: DeepEP's setup.py has no switch for it.
    grep -q 'importlib.util.find_spec("nvidia.nvshmem")' "$B/DeepEP/setup.py" || result no 1 reason=nvshmem_patch_no_match
    sed -i 's/importlib.util.find_spec("nvidia.nvshmem")/None/' "$B/DeepEP/setup.py"
  fi
  echo "MBRIDGE_HYBRIDEP building commit=$COMMIT CXX=${CXX:-c++} CC=${CC:-cc} TORCH_CUDA_ARCH_LIST=$ARCH MAX_JOBS=$MAX_JOBS nvshmem=${NVSHMEM_DIR:-$NVSHMEM_MODE} ninja=$NINJA CUDA_HOME=$CUDA_HOME nvtx=${NVTX_LIB:-none} timeout=${TIMEOUT_S}s"
  (cd "$B/DeepEP" && timeout -k 15 "$TIMEOUT_S" "$PY" -m pip wheel -v --no-build-isolation --no-deps --no-index \
     --disable-pip-version-check -w "$B/out" .) > "$LOG" 2>&1
  rc=$?
  grep -E '^ > (Arch list|NVSHMEM path|Libraries)' "$LOG" | sed 's/^/  /' | sed -n '1,6p'
  if [ "$rc" -ne 0 ]; then
    echo "--- last compiler/linker errors ($LOG):"
    grep -n -E 'error|Error|undefined reference|cannot find|No such file|fatal' "$LOG" | grep -v -E 'Werror|-Wno-|error_|_error\b' | tail -25
    echo "--- tail of $LOG:"; tail -15 "$LOG"
    [ -z "${OUT:-}" ] || cp "$LOG" "$OUT/hybridep_build.log"
    [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ] && result no 124 "reason=timeout after $((SECONDS - start))s (HYBRIDEP_TIMEOUT_S=$TIMEOUT_S) arch=$ARCH log=$LOG"
    result no 1 "reason=build_failed rc=$rc after $((SECONDS - start))s arch=$ARCH log=$LOG"
  fi
  whl=$(ls "$B"/out/deep_ep-*.whl 2>/dev/null | sed -n 1p)
  [ -n "$whl" ] || result no 1 "reason=no_wheel log=$LOG"
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --disable-pip-version-check --target "$SITE" "$whl" \
    || result no 1 "reason=pip_install_failed wheel=$whl"
  mkdir -p "$ROOT/wheels" && cp "$whl" "$ROOT/wheels/"
  [ -z "${OUT:-}" ] || cp "$LOG" "$OUT/hybridep_build.log"
}
if [ "${HYBRIDEP_FORCE:-0}" != 1 ] && [ -f "$SITE/.done" ] && check_import | grep '^IMPORT_OK' >/dev/null; then
  how="reused"
else
  how="built"
  # The probe can pass a compiler whose real build still bundles libstdc++ (a 2 x H200 host, 2026-11-29: /opt/gcc's
  # g++ passed the probe, its hybrid_ep_cpp died in HybridEPBuffer()): the built library itself is checked, and
  # built once more with the next compiler when it carries a libstdc++ of its own (never when HYBRIDEP_CXX is set).
  refused=""
  for attempt in 1 2; do
    pick_compiler $refused
    build_once
    so=$(ls "$SITE"/hybrid_ep_cpp*.so 2>/dev/null | sed -n 1p)
    if [ -n "$so" ] && so_carries_libstdcxx "$so"; then
      if [ -z "${HYBRIDEP_CXX:-}" ] && [ "$attempt" = 1 ]; then
        echo "MBRIDGE_HYBRIDEP compiler $CXX built $(basename "$so") with a libstdc++ of its own (HybridEPBuffer() would crash): building again with the next compiler"
        refused=$(readlink -f "$CXX"); unset CXX CC; continue
      fi
      echo "warning: $(basename "$so") carries a libstdc++ of its own (built with $CXX): HybridEPBuffer() may crash; set HYBRIDEP_CXX to the system g++"
    fi
    break
  done
fi

# 4. Import check, env.sh, the summary line.
imp=$(check_import)
if ! echo "$imp" | grep '^IMPORT_OK' >/dev/null; then
  echo "--- import failed:"; echo "$imp" | tail -15
  for so in "$SITE"/hybrid_ep_cpp*.so "$SITE"/deep_ep_cpp*.so; do
    [ -f "$so" ] && ldd "$so" | grep 'not found' | grep -v -E 'libc10|libtorch' | sed "s#^#  $(basename "$so"): #"
  done
  result no 1 "reason=import_failed $(echo "$imp" | grep -E 'Error|error' | tail -n 1 | tr -s ' ' | cut -c1-300)"
fi
touch "$SITE/.done"
cat > "$DIR/env.sh" <<ENV
export PYTHONPATH=$SITE\${PYTHONPATH:+:\$PYTHONPATH}
export CUDA_HOME=$CUDA_HOME
export HYBRID_EP_CACHE_DIR=\${HYBRID_EP_CACHE_DIR:-/tmp/hybridep_jit}
ENV
sos=$(cd "$SITE" && echo ./*.so)
nvs=$(ldd "$SITE"/deep_ep_cpp*.so 2>/dev/null | grep -c nvshmem)

# 5. Optional smoke: one dispatch + combine over N GPUs (JIT-compiles HybridEP's kernels on first use), once per
# variant of HYBRIDEP_SMOKE_VARIANTS. Each rank marks its stage (STAGE rank=<r> <what>) before each step, runs under
# Python's faulthandler (the Python frame of a SIGSEGV) and, where the host has a C compiler, with a preloaded handler
# that prints the native frames (backtrace_symbols_fd) before the default action: a crash says where it happened.
smoke=""
if [ "${HYBRIDEP_SMOKE:-0}" -gt 0 ] 2>/dev/null; then
  sm=$DIR/smoke.py
  cat > "$sm" <<'PYEOF'
import os, sys, time, torch, torch.distributed as dist
rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
def stage(what):
    print(f"STAGE rank={rank} {what}", file=sys.stderr, flush=True)
stage("import deep_ep")
from deep_ep import HybridEPBuffer
torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
dist.init_process_group("nccl")
group = dist.new_group(list(range(world)))
T, H, EL, K = 128, 1024, 4, 2
E = EL * world
torch.manual_seed(rank)
stage("HybridEPBuffer()")
buf = HybridEPBuffer(group=group, hidden_dim=H, max_num_of_tokens_per_rank=T, num_local_experts=EL)
x = torch.randn(T, H, device="cuda", dtype=torch.bfloat16)
idx = torch.stack([torch.randperm(E, device="cuda")[:K] for _ in range(T)])
rmap = torch.zeros(T, E, dtype=torch.bool, device="cuda").scatter_(1, idx, True)
probs = torch.where(rmap, 1.0 / K, 0.0).float()
t0 = time.time()
stage("dispatch_with_permute")
hid, dprobs, _, tpe, handle = buf.dispatch_with_permute(hidden=x, routing_map=rmap, probs=probs,
                                                        num_of_experts_per_rank=EL)
torch.cuda.synchronize()
stage("combine_with_unpermute")
y, _ = buf.combine_with_unpermute(hidden=hid, handle=handle)
torch.cuda.synchronize()
stage("check")
err = (y.float() - K * x.float()).abs().max().item()  # each token comes back from its K experts, unweighted
n = torch.tensor([hid.shape[0]], device="cuda"); dist.all_reduce(n)
e = torch.tensor([err], device="cuda"); dist.all_reduce(e, op=dist.ReduceOp.MAX)
if rank == 0:
    print(f"SMOKE world={world} dispatched_rows={int(n.item())} expected={T * K * world} "
          f"max_abs_err={e.item():.4g} first_call_s={time.time() - t0:.1f}", flush=True)
dist.destroy_process_group()
PYEOF
  preload=""
  if command -v cc >/dev/null 2>&1; then
    cat > "$DIR/segv_frames.c" <<'CEOF'
#include <execinfo.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>
static void on_fatal(int sig) {
  void *frames[64];
  int n = backtrace(frames, 64);
  const char *head = "NATIVE_FRAMES (innermost first):\n";
  write(2, head, strlen(head));
  backtrace_symbols_fd(frames, n, 2);
  signal(sig, SIG_DFL);
  raise(sig);
}
__attribute__((constructor)) static void install(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_fatal;
  sigaction(SIGSEGV, &sa, 0); sigaction(SIGBUS, &sa, 0); sigaction(SIGFPE, &sa, 0); sigaction(SIGILL, &sa, 0);
}
CEOF
    cc -shared -fPIC -O1 -o "$DIR/libsegv_frames.so" "$DIR/segv_frames.c" 2>/dev/null && preload=$DIR/libsegv_frames.so
  fi
  echo "MBRIDGE_HYBRIDEP smoke_setup native_frames=${preload:-none (no C compiler)} faulthandler=on"
  failed=0
  for variant in ${HYBRIDEP_SMOKE_VARIANTS:-default}; do
    venv=(); [ "$variant" = default ] || venv=("$variant")
    # shellcheck disable=SC1091
    sout=$(source "$DIR/env.sh" && env ${preload:+LD_PRELOAD=$preload} "${venv[@]}" timeout -k 10 240 "$PY" -X faulthandler \
           -m torch.distributed.run --standalone --nproc-per-node "$HYBRIDEP_SMOKE" "$sm" 2>&1)
    src=$?
    line=$(echo "$sout" | grep '^SMOKE' | tail -n 1)
    [ -z "${OUT:-}" ] || printf '%s\n' "$sout" > "$OUT/hybridep_smoke_$(echo "$variant" | tr -c 'A-Za-z0-9_\n' '_').log"
    if [ "$src" -eq 0 ] && [ -n "$line" ]; then
      echo "MBRIDGE_HYBRIDEP smoke=ok variant=$variant ${line#SMOKE }"
    else
      echo "$sout" | grep -E '^STAGE' | tail -n "$((2 * HYBRIDEP_SMOKE))"
      echo "$sout" | grep -E -A 14 'NATIVE_FRAMES|Fatal Python error' | sed -n '1,60p'
      # Frames inside DeepEP's own libraries (and HybridEP's JIT modules), resolved to functions where binutils is here.
      if command -v addr2line >/dev/null 2>&1; then
        echo "$sout" | grep -o -E '/[^ ()]*(hybrid_ep|deep_ep|jit)[^ ()]*\.so\(\+0x[0-9a-f]+\)' | sort -u | sed -n '1,12p' |
          while IFS= read -r fr; do
            so=${fr%%(*}; off=${fr##*(+}; off=${off%)}
            echo "  $(basename "$so")+$off: $(addr2line -C -f -e "$so" "$off" 2>/dev/null | sed -n 1p)"
          done
      fi
      echo "$sout" | grep -v -i warn | grep -v -E '^STAGE' | tail -12
      echo "MBRIDGE_HYBRIDEP smoke=failed variant=$variant rc=$src last_stage=\"$(echo "$sout" | grep -E '^STAGE' | tail -n 1 | cut -d' ' -f3-)\""
      failed=$((failed + 1))
    fi
  done
  if [ "$failed" -gt 0 ]; then smoke=" smoke=failed"; else smoke=" smoke=ok"; fi
fi
[ "$smoke" != " smoke=failed" ] || result yes 4 "how=$how arch=$ARCH site=$SITE env=$DIR/env.sh smoke=failed"
result yes 0 "how=$how build_s=$((SECONDS - start)) arch=$ARCH nvshmem_linked=$nvs so=[$sos] site=$SITE env=$DIR/env.sh$smoke"
