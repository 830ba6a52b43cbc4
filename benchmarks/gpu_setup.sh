#!/usr/bin/env bash
# Install a stack for the `bridge` engine on a GPU host without network, from the parts benchmarks/gpu_stack_prepare.sh
# made where PyPI is (for a host with network, or a wheelhouse, see docs/gpu.md: one pip command into a venv).
#
# usage (repository root, on the host): bash benchmarks/gpu_setup.sh <stack>
#   Copy .gpu_stack/<stack>/ (and .gpu_stack/<name>/ of every stack its list names with `stack:`, e.g. Transformer
#   Engine) into this checkout, then run it. Parts may also arrive a few at a time: each run checks the parts it finds
#   (.gpu_stack/<name>/pNN, sha256) and keeps them in /tmp/mbridge_stack/<name>/ until every part is there; the run
#   that completes every needed stack installs, and prints `MBRIDGE_STACK ready ...`.
# Exit status: 0 installed (or installed already); 1 a part or file whose sha256 differs, or a failed build; 2 an
# unknown stack; 3, with one line, on a host without a GPU (a stack with Megatron or Transformer Engine needs one) or
# while parts are missing (that line names them; nothing is written when none is found).
# Install: every wheel --no-deps into /tmp/mbridge_stack/<stack>/site (the host's own packages stay as they are),
# Transformer Engine's core wheel last (it carries the whole transformer_engine package), then its torch extension:
# a wheel built earlier for the same TE, torch, CUDA, Python and GPU arch is reused (found as
# .gpu_stack/te_torch/<key>.whl, or left in /tmp by an earlier run), otherwise it is built here (about 2 minutes on 16
# cores) and copied to the folder OUT (when set) so that the next host can reuse it from .gpu_stack/te_torch/. The
# PyPI megatron-core wheel has its dataset helpers prebuilt but no Makefile, while Bridge's initialize runs `make`
# there: a no-op Makefile is added.
# Then: source /tmp/mbridge_stack/<stack>/env.sh   (PYTHONPATH; MBRIDGE_STACK=<stack>)
set -euo pipefail
# shellcheck source=benchmarks/gpu_common.sh
source "$(dirname "$0")/gpu_common.sh"
gpu_usage_if_asked "$0" "$@"
cd "$(dirname "$0")/.."
STACK=${1:?usage: gpu_setup.sh <stack>}
ROOT=$MBRIDGE_STACK_ROOT
PY=${PYTHON:-python3}
LIST=benchmarks/gpu_stack/$STACK.txt
[ -f "$LIST" ] || { echo "error: gpu_setup.sh: no stack $STACK (benchmarks/gpu_stack/ has: $(ls benchmarks/gpu_stack | sed 's/\.txt$//' | xargs))" >&2; exit 2; }
NEEDS=$(grep '^stack:' "$LIST" | sed 's/^stack://' || true)
# A stack with Megatron or Transformer Engine builds and checks on the GPU; a library stack (NCCL) needs none.
lists=("$LIST")
for n in $NEEDS; do lists+=("benchmarks/gpu_stack/$n.txt"); done
if grep -q -E '^(megatron-|transformer-engine)' "${lists[@]}"; then
  gpu_need 1
fi
# Nothing is written before some part of every needed stack is here (or was kept, or unpacked, by an earlier run).
none=()
for name in "$STACK" $NEEDS; do
  if ! compgen -G ".gpu_stack/$name/p*/piece" >/dev/null && [ ! -f "$ROOT/$name/SHA256SUMS" ] \
     && [ ! -f "$ROOT/$name/files/.done" ]; then none+=("$name"); fi
done
[ ${#none[@]} -eq 0 ] || gpu_stop "no parts of ${none[*]} (.gpu_stack/<name>/pNN): make them where PyPI is with" \
  "benchmarks/gpu_stack_prepare.sh <name>, copy .gpu_stack/<name>/ into this checkout, run again (docs/gpu.md)"
mkdir -p "$ROOT"

# receive <name>: keep the checked parts of stack <name> found in .gpu_stack/<name>/
receive() {
  local name=$1 dir=$ROOT/$1 d n
  mkdir -p "$dir"
  for d in .gpu_stack/"$name"/p*/; do
    [ -f "$d/piece" ] || continue
    n=$(awk '{print $2}' "$d/STACK")
    want=$(grep " piece\.$n\$" "$d/SHA256SUMS" | awk '{print $1}')
    got=$(sha256sum "$d/piece" | awk '{print $1}')
    if [ "$want" != "$got" ]; then echo "error: $d/piece: sha256 $got, expected $want (copy it again)" >&2; exit 1; fi
    cp "$d/piece" "$dir/piece.$n" && cp "$d/SHA256SUMS" "$dir/SHA256SUMS"
  done
}
# unpack <name>: the stack's files in $ROOT/<name>/files once every part is here (return 1, with what is missing in
# WAITING, while some are not)
WAITING=()
unpack() {
  local name=$1 dir=$ROOT/$1 total have
  [ -f "$dir/files/.done" ] && return 0
  total=$(grep -c ' piece\.' "$dir/SHA256SUMS")
  have=$(ls "$dir"/piece.* 2>/dev/null | wc -l)
  if [ "$have" -lt "$total" ]; then WAITING+=("$name have $have/$total"); return 1; fi
  cat $(ls "$dir"/piece.* | sort) > "$dir/stack.tar"
  (cd "$dir" && grep ' stack\.tar$' SHA256SUMS | sha256sum -c --quiet -) || { echo "error: $name: stack.tar sha256 differs" >&2; exit 1; }
  rm -rf "$dir/files" && mkdir -p "$dir/files"
  tar -xf "$dir/stack.tar" -C "$dir/files" && rm -f "$dir/stack.tar" "$dir"/piece.*
  (cd "$dir/files" && sha256sum -c --quiet FILES.sha256) || { echo "error: $name: a file's sha256 differs" >&2; exit 1; }
  touch "$dir/files/.done"
}

ready=1
for name in "$STACK" $NEEDS; do receive "$name"; done
for name in "$STACK" $NEEDS; do unpack "$name" || ready=0; done
[ "$ready" = 1 ] || gpu_stop "parts missing (${WAITING[*]}; those found are kept in $ROOT): copy the other" \
  ".gpu_stack/<name>/pNN folders into this checkout and run it again"

SITE=$ROOT/$STACK/site
if [ ! -f "$SITE/.done" ]; then
  rm -rf "$SITE" && mkdir -p "$SITE"
  wheels=() te_core=""
  for name in "$STACK" $NEEDS; do
    for f in "$ROOT/$name"/files/*; do
      case "$f" in
        */transformer_engine_cu*.whl) te_core=$f ;;
        *.whl) wheels+=("$f") ;;
        */transformer_engine_torch-*) ;;  # built below
        *.tar.gz|*.zip) "$PY" -m pip wheel -q --no-deps --no-build-isolation --no-index -w "$ROOT/$name/built" "$f" ;;
      esac
    done
    for f in "$ROOT/$name"/built/*.whl; do [ -f "$f" ] && wheels+=("$f"); done
  done
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$SITE" "${wheels[@]}"
  [ -z "$te_core" ] || "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target "$SITE" "$te_core"
  mk=$SITE/megatron/core/datasets/Makefile
  if [ -d "$(dirname "$mk")" ] && [ ! -f "$mk" ]; then printf 'all:\n\t@true\n' > "$mk"; fi
  # Byte-compile once here (the wheels went in with --no-compile): otherwise every rank of the first run compiles
  # the same thousands of modules at once.
  start=$SECONDS
  "$PY" -m compileall -q -j 0 "$SITE" >/dev/null 2>&1 || true
  echo "MBRIDGE_STACK compileall $((SECONDS - start)) s"
  touch "$SITE/.done"
fi

# A library stack (no Megatron in it, e.g. nccl-2.32.3): nothing to build or import-check.
if [ ! -d "$SITE/megatron" ]; then
  echo "MBRIDGE_STACK ready stack=$STACK library site=$SITE: $(cd "$SITE" && find . -name '*.so*' | sed -n '1,5p' | xargs)"
  exit 0
fi

# Transformer Engine's torch extension: reuse or build.
te_sdist=$(ls "$ROOT"/*/files/transformer_engine_torch-*.tar.gz 2>/dev/null | sed -n 1p || true)
if [ -n "$te_sdist" ] && ! ls "$SITE"/transformer_engine/wheel_lib/transformer_engine_torch*.so >/dev/null 2>&1; then
  te_ver=$(basename "$te_sdist" .tar.gz | sed 's/^transformer_engine_torch-//')
  arch=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | sed -n 1p | tr -d '.')
  key=$("$PY" -c "import sys, torch; print(f'te{sys.argv[1]}-torch{torch.__version__}-py{sys.version_info[0]}{sys.version_info[1]}-sm{sys.argv[2]}'.replace('+', '_'))" "$te_ver" "$arch")
  ext=""
  for f in .gpu_stack/te_torch/"$key".whl "$ROOT/te_torch/$key.whl"; do [ -f "$f" ] && ext=$f && break; done
  if [ -n "$ext" ]; then
    echo "MBRIDGE_STACK te_torch reuse $ext"
  else
    echo "MBRIDGE_STACK te_torch build $key (NVTE_CUDA_ARCHS=$arch)"
    b=$ROOT/te_build && rm -rf "$b" && mkdir -p "$b" && tar -xzf "$te_sdist" -C "$b"
    start=$SECONDS
    (cd "$b"/transformer_engine_torch-* && PYTHONPATH=$SITE NVTE_PYTORCH_FORCE_BUILD=TRUE NVTE_CUDA_ARCHS=$arch \
      MAX_JOBS=$(nproc) "$PY" -m pip wheel -q --no-build-isolation --no-deps --no-index -w "$b/out" . ) \
      > "$b/build.log" 2>&1 || { tail -40 "$b/build.log"; echo "error: the TE torch extension did not build" >&2; exit 1; }
    mkdir -p "$ROOT/te_torch" && ext=$ROOT/te_torch/$key.whl && cp "$b"/out/transformer_engine_torch-*.whl "$ext"
    echo "MBRIDGE_STACK te_torch built in $((SECONDS - start)) s"
    if [ -n "${OUT:-}" ]; then mkdir -p "$OUT" && cp "$ext" "$OUT/"; fi
  fi
  # Unpacked, not pip-installed: pip --target would replace the core's transformer_engine/ folder. Its dist-info
  # comes along: TE's import check wants transformer-engine, -cu13 and -torch metadata at one version.
  "$PY" -c "import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2])" "$ext" "$SITE"
fi

cat > "$ROOT/$STACK/env.sh" <<ENV
export PYTHONPATH=$SITE:$PWD\${PYTHONPATH:+:\$PYTHONPATH}
export MBRIDGE_STACK=$STACK
ENV
# shellcheck disable=SC1090
source "$ROOT/$STACK/env.sh"
"$PY" - <<'PYEOF' 2>&1 | grep -v -i warn
import importlib.metadata as md, os, torch
# The payload's order (Bridge first): an import that only works after TE pulled in setuptools would pass otherwise.
from megatron.bridge.training.pretrain import pretrain  # noqa: F401
from megatron.bridge.training.finetune import finetune  # noqa: F401
import megatron.core, megatron.bridge  # noqa: F401
import transformer_engine.pytorch  # noqa: F401  (loads the core library and the torch extension)
v = {n: md.version(n) for n in ("megatron-bridge", "megatron-core", "transformer-engine-cu13", "transformers")}
print(f"MBRIDGE_STACK ready stack={os.environ['MBRIDGE_STACK']} " + " ".join(f"{k}={x}" for k, x in v.items())
      + f" torch={torch.__version__} device={torch.cuda.get_device_name(0)}")
PYEOF
