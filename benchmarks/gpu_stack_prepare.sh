#!/usr/bin/env bash
# Prepare, on a machine with PyPI, the wheels a GPU host without network needs for the `bridge` engine, in one tar (or
# in parts, for a transfer tool that limits file size). The host side is benchmarks/gpu_setup.sh. (A plain wheelhouse
# for `pip install --no-index --find-links` is the simpler way: docs/gpu.md.)
#
# usage: bash benchmarks/gpu_stack_prepare.sh <stack> [part_bytes]
#   stack       a list under benchmarks/gpu_stack/ (bridge-0.4.2: the NGC nemo 26.04 pair; bridge-0.6.2: PyPI's newest;
#               te-2.20.2: Transformer Engine, which both name with `stack:`; prepare it too; nccl-2.32.3)
#   part_bytes  split into parts of at most this many bytes (default MBRIDGE_PART_BYTES, else one part)
# Writes (all under .gpu_stack/, which git ignores):
#   .gpu_stack/cache/            every downloaded wheel / sdist, shared by the stacks (nothing is fetched twice)
#   .gpu_stack/<stack>/pNN/      one folder per part: `piece` (a slice of one uncompressed tar of the stack's files)
#                                and `SHA256SUMS` (every part, the whole tar and each file in it) and `STACK` (its name)
# Wheels are for CPython 3.12 on x86-64 manylinux (the Python of the NGC images and of the GPU hosts measured here);
# `sdist:` lines are source archives the host builds. Prints the parts and their sizes; exits non-zero if any download
# fails.
set -euo pipefail
cd "$(dirname "$0")/.."
STACK=${1:?usage: gpu_stack_prepare.sh <stack> [part_bytes]}
PIECE=${2:-}
LIST=benchmarks/gpu_stack/$STACK.txt
[ -f "$LIST" ] || { echo "error: no list $LIST (stacks: $(ls benchmarks/gpu_stack | sed 's/\.txt$//' | xargs))" >&2; exit 2; }
CACHE=.gpu_stack/cache
OUTDIR=.gpu_stack/$STACK
mkdir -p "$CACHE"
PY=${PYTHON:-python3}
files=()
while read -r line; do
  read -r spec tag _ <<< "${line%%#*}" || true
  case "${spec:-}" in ""|stack:*) continue ;; esac
  name=${spec#sdist:}; dist=${name%%==*}; ver=${name##*==}
  norm=$(echo "$dist" | tr '[:upper:]-.' '[:lower:]__')
  if [ "$spec" != "$name" ]; then
    found=$(ls "$CACHE" | grep -i -E "^${norm//_/[-_.]}-${ver}\.(tar\.gz|zip)$" | sed -n 1p || true)
    # pip would build the sdist's metadata (TE's needs torch): take the archive from PyPI's JSON API instead.
    [ -n "$found" ] || "$PY" - "$dist" "$ver" "$CACHE" <<'PYEOF'
import hashlib, json, sys, urllib.parse, urllib.request
dist, ver, cache = sys.argv[1:]
api = f"https://pypi.org/pypi/{dist}/json"
with urllib.request.urlopen(api, timeout=60) as r:
    files = [f for f in json.load(r)["releases"].get(ver, []) if f["packagetype"] == "sdist"]
if not files:
    sys.exit(f"error: PyPI has no sdist of {dist}=={ver}")
f = files[0]
with urllib.request.urlopen(urllib.parse.urljoin(api, f["url"]), timeout=300) as r:
    data = r.read()
if hashlib.sha256(data).hexdigest() != f["digests"]["sha256"]:
    sys.exit(f"error: {f['filename']}: sha256 differs from PyPI's")
open(f"{cache}/{f['filename']}", "wb").write(data)
PYEOF
    found=$(ls "$CACHE" | grep -i -E "^${norm//_/[-_.]}-${ver}\.(tar\.gz|zip)$" | sed -n 1p || true)
  else
    found=$(ls "$CACHE" | grep -i -E "^${norm//_/[-_.]}-${ver}-.*\.whl$" | sed -n 1p || true)
    if [ -z "$found" ]; then
      plat=(--platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64
            --platform manylinux2014_x86_64 --platform any)
      [ -n "${tag:-}" ] && plat=(--platform "$tag" "${plat[@]}")
      "$PY" -m pip download -q --no-deps --disable-pip-version-check --only-binary=:all: --python-version 3.12 --implementation cp "${plat[@]}" \
        -d "$CACHE" "$name" 2> >(grep -v '^WARNING: Location' >&2)
      found=$(ls "$CACHE" | grep -i -E "^${norm//_/[-_.]}-${ver}-.*\.whl$" | sed -n 1p || true)
    fi
  fi
  [ -n "$found" ] || { echo "error: $spec was not downloaded" >&2; exit 1; }
  files+=("$found")
done < "$LIST"

rm -rf "$OUTDIR" && mkdir -p "$OUTDIR"
tarball=$OUTDIR/stack.tar
(cd "$CACHE" && sha256sum "${files[@]}") > "$OUTDIR/FILES.sha256"
tar -cf "$tarball" -C "$CACHE" "${files[@]}" -C "$PWD/$OUTDIR" FILES.sha256
rm -f "$OUTDIR/FILES.sha256"
# shellcheck source=benchmarks/gpu_pieces.sh
source benchmarks/gpu_pieces.sh
PIECE=${PIECE:-$(default_piece_bytes)}
cut_pieces "$STACK" "$OUTDIR" "$tarball" "$PIECE" "${#files[@]} files"
echo "On the GPU host: copy .gpu_stack/$STACK/ (and the stacks its list names with stack:) into the checkout, then"
echo "  bash benchmarks/gpu_setup.sh $STACK"
