#!/usr/bin/env bash
# Prepare the wheels CloudAI needs on the GPU host (Python 3.12, manylinux x86_64, no network) into .whl/cloudai/
# (ignored by git; copy it into the checkout on the host). CloudAI's own wheel is CLOUDAI_WHEEL (CloudAI is not on
# PyPI: build one from its repository with `pip wheel --no-deps <checkout>`); its dependencies are resolved by pip for
# cp312 / manylinux, then the ones the bridge-0.6.2 stack already installs (benchmarks/gpu_stack/bridge-0.6.2.txt) are
# removed, so the host keeps one copy of each.
# usage: bash benchmarks/gpu_cloudai_prepare.sh   (where PyPI is; prints the bundle's size)
set -euo pipefail
cd "$(dirname "$0")/.."
CLOUDAI_WHEEL=${CLOUDAI_WHEEL:-/work/shared/wheels/cloudai-1.6.0+unknown-py3-none-any.whl}
DEST=.whl/cloudai
PYTHON=${PYTHON:-python3}
rm -rf "$DEST" && mkdir -p "$DEST"
cp "$CLOUDAI_WHEEL" "$DEST/"
# PIP_CONSTRAINT: a dev machine's constraint file may pin versions that have no cp312 wheel
PIP_CONSTRAINT=/dev/null "$PYTHON" -m pip download -q --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform any \
  -d "$DEST" "$CLOUDAI_WHEEL" "matplotlib>=3.7"
# what the bridge stack brings already (name==version lines; names normalised the way wheel files spell them)
sed -n 's/^\([A-Za-z0-9_.-]*\)==.*/\1/p' benchmarks/gpu_stack/bridge-0.6.2.txt | tr 'A-Z.-' 'a-z__' | sort -u >"$DEST/.stack"
# and what the host image has (datasets, in the bridge stack, imports them; gpu_cloudai_ab_run.sh checks them first)
printf '%s\n' numpy pandas >>"$DEST/.stack"
for whl in "$DEST"/*.whl; do
  name=$(basename "$whl" | cut -d- -f1 | tr 'A-Z.-' 'a-z__')
  if grep -qx "$name" "$DEST/.stack"; then echo "in the bridge stack already: $(basename "$whl")"; rm -f "$whl"; fi
done
rm -f "$DEST/.stack"
# Two halves, p0/ and p1/ (largest wheel first into whichever holds less), so that each stays small for a transfer tool
# that limits size; benchmarks/gpu_cloudai_ab_run.sh installs both.
mkdir -p "$DEST/p0" "$DEST/p1"
for whl in $(ls -S "$DEST"/*.whl); do
  a=$(du -sb "$DEST/p0" | cut -f1); b=$(du -sb "$DEST/p1" | cut -f1)
  if [ "$a" -le "$b" ]; then mv "$whl" "$DEST/p0/"; else mv "$whl" "$DEST/p1/"; fi
done
ls -1 "$DEST"/p0 "$DEST"/p1 >"$DEST/MANIFEST.txt"
du -sb "$DEST"/p0 "$DEST"/p1 | awk '{printf "half %s: %.1f MB\n", $2, $1 / 1e6}'
du -sb "$DEST" | awk '{printf "bundle %s: %.1f MB\n", $2, $1 / 1e6}'
echo "wheels: $(ls "$DEST"/p*/*.whl | wc -l); largest:"; ls -S -l "$DEST"/p*/*.whl | head -5 | awk '{print "  " $5, $9}'
