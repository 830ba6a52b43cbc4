#!/usr/bin/env bash
# Prepare the wheels CloudAI needs on the GPU host (Python 3.12, manylinux x86_64, no network) into .whl/cloudai/
# (ignored by git; copy it into the checkout on the host). CloudAI's own wheel is CLOUDAI_WHEEL (CloudAI is not on
# PyPI: build one from its repository with `pip wheel --no-deps <checkout>`); its dependencies are resolved by pip for
# cp312 / manylinux, then the ones the bridge-0.6.2 stack already installs (benchmarks/gpu_stack/bridge-0.6.2.txt) and
# the ones the GPU image already has (MBRIDGE_IMAGE_PACKAGES, default benchmarks/gpu_stack/image-cuda-has.txt: one name
# a line; /dev/null carries every wheel) are removed, so the host keeps one copy of each. What was left out for the
# image is written to FROM_IMAGE.txt (name and CloudAI's own version range for it, where it states one), which
# benchmarks/gpu_cloudai_ab_run.sh checks on the host before installing anything.
# usage: bash benchmarks/gpu_cloudai_prepare.sh   (where PyPI is; prints the bundle's size)
set -euo pipefail
cd "$(dirname "$0")/.."
CLOUDAI_WHEEL=${CLOUDAI_WHEEL:-/work/shared/wheels/cloudai-1.6.0+unknown-py3-none-any.whl}
DEST=.whl/cloudai
PYTHON=${PYTHON:-python3}
IMAGE_PACKAGES=${MBRIDGE_IMAGE_PACKAGES:-benchmarks/gpu_stack/image-cuda-has.txt}
[ -r "$IMAGE_PACKAGES" ] || { echo "error: gpu_cloudai_prepare.sh: MBRIDGE_IMAGE_PACKAGES=$IMAGE_PACKAGES is not a" \
  "readable file: name a list of the image's packages, one a line, or /dev/null to carry every wheel" >&2; exit 2; }
rm -rf "$DEST" && mkdir -p "$DEST"
cp "$CLOUDAI_WHEEL" "$DEST/"
# PIP_CONSTRAINT: a dev machine's constraint file may pin versions that have no cp312 wheel
PIP_CONSTRAINT=/dev/null "$PYTHON" -m pip download -q --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform any \
  -d "$DEST" "$CLOUDAI_WHEEL" "matplotlib>=3.7"
# Leave out what the bridge stack brings (name==version lines) and what the image has (names; numpy and pandas always:
# datasets, in the bridge stack, imports them, and gpu_cloudai_ab_run.sh checks them first).
"$PYTHON" - "$DEST" "$CLOUDAI_WHEEL" benchmarks/gpu_stack/bridge-0.6.2.txt "$IMAGE_PACKAGES" <<'PY'
import re, sys, zipfile
from pathlib import Path
dest, cloudai_wheel, stack_file, image_file = Path(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
norm = lambda name: re.sub(r"[-_.]+", "_", name).lower()  # the way wheel file names spell a project
lines = lambda path: [ln.split("#")[0].strip() for ln in open(path, encoding="utf-8")]
stack = {norm(m.group(1)) for ln in lines(stack_file) if (m := re.match(r"([A-Za-z0-9_.-]+)==", ln))}
image = {norm(ln) for ln in lines(image_file) if ln} | {"numpy", "pandas"}
def left_out(marker: str) -> bool:
    """True when a requirement's marker leaves it out on the host (Python 3.12, no extras: dev, docs, rl)."""
    from packaging.markers import Marker
    return not Marker(marker).evaluate({"python_version": "3.12", "python_full_version": "3.12.3", "extra": ""})
with zipfile.ZipFile(cloudai_wheel) as zf:  # CloudAI's own version range of each direct requirement
    meta = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
    wants = {}
    for ln in zf.read(meta).decode().splitlines():
        m = re.match(r"Requires-Dist: ([A-Za-z0-9_.-]+)\s*([^;]*)(?:;(.*))?$", ln)
        if m and not (m.group(3) and left_out(m.group(3))):
            wants[norm(m.group(1))] = m.group(2).strip().strip("()")
wants.setdefault("matplotlib", ">=3.7")  # asked for above: the plugin's report pictures
from_image = []
for whl in sorted(dest.glob("*.whl")):
    name, version = whl.name.split("-")[:2]
    if norm(name) in stack:
        print(f"in the bridge stack already: {whl.name}")
    elif norm(name) in image:
        print(f"in the GPU image already: {whl.name}")
        from_image.append(f"{name} {wants.get(norm(name), '')}".rstrip())
    else:
        continue
    whl.unlink()
(dest / "FROM_IMAGE.txt").write_text("".join(f"{ln}\n" for ln in from_image), encoding="utf-8")
PY
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
# awk reads the whole listing: `ls | head` under pipefail ends with SIGPIPE (exit 141) once the listing outgrows a pipe
echo "wheels: $(ls "$DEST"/p*/*.whl | wc -l); left out for the image: $(wc -l <"$DEST/FROM_IMAGE.txt"); largest:"
ls -S -l "$DEST"/p*/*.whl | awk 'NR <= 5 {print "  " $5, $9}'
