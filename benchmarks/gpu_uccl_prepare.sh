#!/usr/bin/env bash
# Prepare .whl/uccl/, the UCCL-EP files a GPU host without network needs to `import deep_ep` (UCCL's drop-in
# replacement for DeepEP), on a machine with PyPI and a Debian/Ubuntu apt. The host side is
# benchmarks/gpu_dispatcher_run.sh (pip --target of the two wheels, then gpu_dispatcher_ab.py --uccl-dir .whl/uccl).
#
# usage: bash benchmarks/gpu_uccl_prepare.sh [WRAPPER_SRC]
#   WRAPPER_SRC  where UCCL's deep_ep wrapper comes from (it is on GitHub only, not in the uccl wheel), one of:
#                - a UCCL checkout (has ep/deep_ep_wrapper/deep_ep; its buffer.py/utils.py are symlinks into
#                  ep/bench/, copied here as files),
#                - a bare UCCL git dir (has HEAD and objects/): files read with `git show $UCCL_REF:...`,
#                - a folder holding __init__.py buffer.py utils.py of the wrapper.
#                Left out: the deep_ep/ already in .whl/uccl is kept (the script stops if there is none).
#   UCCL_VERSION (0.1.1), CUDART_VERSION (12.8.90), UCCL_REF (v0.1.1, git-dir mode only) from the environment.
# Writes (.whl/ is git-ignored):
#   .whl/uccl/uccl-<v>-cp312-abi3-manylinux_2_35_x86_64.whl        uccl/ep.abi3.so (+ bundled libnuma)
#   .whl/uccl/nvidia_cuda_runtime_cu12-<v>-...whl                   libcudart.so.12, which ep.abi3.so needs
#   .whl/uccl/deep_ep/{__init__,buffer,utils}.py                     UCCL's wrapper (re-exports uccl.ep as deep_ep)
#   .whl/uccl/lib/libibverbs.so.1 libnl-3.so.200 libnl-route-3.so.200  from the Debian packages (NEEDED by
#                ep.abi3.so -> libibverbs; a plain CUDA image lacks them; no verbs providers: no NIC is used)
#   .whl/uccl/SOURCES.txt                                            what came from where (versions, wrapper commit)
# Idempotent: reruns download nothing twice, replace lib/ and (with WRAPPER_SRC) deep_ep/, and drop other uccl
# wheels (gpu_dispatcher_run.sh installs the first uccl-*.whl it lists). Prints the NEEDED check and the sizes.
set -euo pipefail
cd "$(dirname "$0")/.."
DIR=.whl/uccl
UCCL_VERSION=${UCCL_VERSION:-0.1.1}
CUDART_VERSION=${CUDART_VERSION:-12.8.90}
UCCL_REF=${UCCL_REF:-v0.1.1}
SRC=${1:-}
mkdir -p "$DIR"

# 1. Wheels for CPython 3.12 x86-64 (the host's Python). --no-deps: uccl's one dependency, intervaltree, is only
#    used by uccl.p2p/collective, whose ImportError uccl/__init__.py swallows; deep_ep needs uccl.ep alone.
for f in "$DIR"/uccl-*.whl; do
  case "$f" in *"/uccl-$UCCL_VERSION-"*|*"/uccl-*.whl") ;; *) echo "removing $f"; rm -f "$f" ;; esac
done
PIP_CONSTRAINT=/dev/null python3 -m pip download -q --no-deps --disable-pip-version-check --only-binary=:all: \
  --python-version 3.12 --implementation cp --platform manylinux_2_35_x86_64 --platform manylinux_2_28_x86_64 \
  --platform manylinux_2_17_x86_64 -d "$DIR" "uccl==$UCCL_VERSION" "nvidia-cuda-runtime-cu12==$CUDART_VERSION" \
  2> >(grep -v '^WARNING: Location' >&2)
UCCL_WHEEL=$(ls "$DIR"/uccl-"$UCCL_VERSION"-*.whl)
CUDART_WHEEL=$(ls "$DIR"/nvidia_cuda_runtime_cu12-"$CUDART_VERSION"-*.whl)

# 2. The deep_ep wrapper (UCCL repo: ep/deep_ep_wrapper/deep_ep/__init__.py, buffer.py -> ep/bench/buffer.py,
#    utils.py -> ep/bench/utils.py). test_internode.py (a test) is left out.
# Without WRAPPER_SRC the provenance line of the last SOURCES.txt is kept.
WRAPPER_FROM=$(sed -n 's#^deep_ep/  UCCL ep/deep_ep_wrapper: ##p' "$DIR/SOURCES.txt" 2>/dev/null || true)
WRAPPER_FROM=${WRAPPER_FROM:-"already in $DIR/deep_ep (source unknown)"}
if [ -n "$SRC" ]; then
  tmp=$(mktemp -d) && trap 'rm -rf "$tmp"' EXIT
  if [ -f "$SRC/HEAD" ] && [ -d "$SRC/objects" ]; then
    git --git-dir="$SRC" show "$UCCL_REF:ep/deep_ep_wrapper/deep_ep/__init__.py" > "$tmp/__init__.py"
    git --git-dir="$SRC" show "$UCCL_REF:ep/bench/buffer.py" > "$tmp/buffer.py"
    git --git-dir="$SRC" show "$UCCL_REF:ep/bench/utils.py" > "$tmp/utils.py"
    WRAPPER_FROM="git $UCCL_REF = $(git --git-dir="$SRC" rev-parse "$UCCL_REF^{commit}") of $SRC"
  else
    w=$SRC; [ -d "$SRC/ep/deep_ep_wrapper/deep_ep" ] && w=$SRC/ep/deep_ep_wrapper/deep_ep
    for f in __init__.py buffer.py utils.py; do
      [ -f "$w/$f" ] || { echo "error: $w/$f not found (see usage)" >&2; exit 2; }
      cp -L "$w/$f" "$tmp/$f"
    done
    WRAPPER_FROM="copied from $w"
    if [ "$w" != "$SRC" ]; then
      c=$(git -C "$SRC" rev-parse HEAD 2>/dev/null || true); [ -z "$c" ] || WRAPPER_FROM="$WRAPPER_FROM (commit $c)"
    fi
  fi
  rm -rf "$DIR/deep_ep" && mkdir -p "$DIR/deep_ep" && cp "$tmp"/*.py "$DIR/deep_ep/"
fi
for f in __init__.py buffer.py utils.py; do
  [ -f "$DIR/deep_ep/$f" ] || { echo "error: $DIR/deep_ep/$f missing: pass WRAPPER_SRC (see usage); it cannot be \
downloaded from PyPI (github.com/uccl-project/uccl, ep/deep_ep_wrapper)" >&2; exit 2; }
done

# 3. libibverbs.so.1 and the libnl it needs, from the distribution's packages (any recent Debian/Ubuntu; the
#    bookworm ones need glibc 2.34). Real files under their SONAMEs, no symlinks (some copy tools drop links).
debs=$(mktemp -d) && trap 'rm -rf "$debs" ${tmp:+"$tmp"}' EXIT
(cd "$debs" && apt-get download -q libibverbs1 libnl-3-200 libnl-route-3-200) >&2
for d in "$debs"/*.deb; do dpkg -x "$d" "$debs/root"; done
rm -rf "$DIR/lib" && mkdir -p "$DIR/lib"
for so in libibverbs.so.1 libnl-3.so.200 libnl-route-3.so.200; do
  cp -L "$(find "$debs/root" -name "$so" | sed -n 1p)" "$DIR/lib/$so"
done
DEBS=$(cd "$debs" && ls *.deb | xargs)

# 4. NEEDED of uccl/ep.abi3.so and who gives each on the host.
ex=$(mktemp -d) && trap 'rm -rf "$debs" "$ex" ${tmp:+"$tmp"}' EXIT
python3 -m zipfile -e "$UCCL_WHEEL" "$ex/w" && python3 -m zipfile -e "$CUDART_WHEEL" "$ex/c"
echo "NEEDED of uccl/ep.abi3.so ($(readelf -d "$ex/w/uccl/ep.abi3.so" | grep -E 'RPATH|RUNPATH' | sed 's/.*: //')):"
missing=0
for n in $(readelf -d "$ex/w/uccl/ep.abi3.so" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'); do
  case "$n" in
    libc10.so|libtorch.so|libtorch_cpu.so) by="torch/lib (loaded by import torch first; no symbols bound)" ;;
    libc.so.6|libstdc++.so.6|libgcc_s.so.1|ld-linux-x86-64.so.2) by="system" ;;
    *) by=$(ls "$DIR/lib/$n" "$ex/w/uccl.libs/$n" "$ex/c/nvidia/cuda_runtime/lib/$n" 2>/dev/null | sed -n 1p \
            | sed -e "s#^$ex/w/#uccl wheel: #" -e "s#^$ex/c/#cudart wheel: #" || true) ;;
  esac
  [ -n "$by" ] || { by="MISSING"; missing=1; }
  printf '  %-28s %s\n' "$n" "$by"
done
for so in "$DIR"/lib/*; do
  echo "  $so NEEDED: $(readelf -d "$so" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | xargs)"
done

cat > "$DIR/SOURCES.txt" <<EOF
$(basename "$UCCL_WHEEL")  PyPI
$(basename "$CUDART_WHEEL")  PyPI
deep_ep/  UCCL ep/deep_ep_wrapper: $WRAPPER_FROM
lib/  $DEBS  ($(. /etc/os-release && echo "$PRETTY_NAME") apt)
$(cd "$DIR" && sha256sum -- *.whl deep_ep/*.py lib/*)
EOF
(cd "$DIR" && find . -type f | sort | xargs ls -l | awk '{printf "  %10d  %s\n", $5, $9}') && du -sh "$DIR"
exit $missing
