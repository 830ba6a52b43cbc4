#!/usr/bin/env bash
# Set a GPU host without network up for the `bridge` engine from the pieces benchmarks/gpu_stack_prepare.sh made.
#
# usage (repository root, on the host): bash benchmarks/gpu_setup.sh <stack>
#   Run it once per device call, each call carrying one piece (.gpu_stack/<name>/pNN) of <stack> or of a stack it
#   names with `stack:` (Transformer Engine). Pieces are checked (sha256) and kept in /tmp/mbridge_stack/<name>/ while
#   the host stays up; the call that completes every needed stack installs, and prints `MBRIDGE_STACK ready ...`.
#   Until then it prints `MBRIDGE_STACK waiting <name> have=<n>/<total>` and exits 0.
# Install: every wheel --no-deps into /tmp/mbridge_stack/<stack>/site (the host's own packages stay as they are),
# Transformer Engine's core wheel last (it carries the whole transformer_engine package), then its torch extension:
# a wheel built earlier for the same TE, torch, CUDA, Python and GPU arch is reused (carried as
# .gpu_stack/te_torch/<key>.whl, or left in /tmp by an earlier call), otherwise it is built here (about 2 minutes on 16
# cores) and copied to $OUT (when set) so that it can be carried next time. The PyPI megatron-core wheel has its
# dataset helpers prebuilt but no Makefile, while Bridge's initialize runs `make` there: a no-op Makefile is added.
# Then: source /tmp/mbridge_stack/<stack>/env.sh   (PYTHONPATH; MBRIDGE_STACK=<stack>)
set -euo pipefail
cd "$(dirname "$0")/.."
STACK=${1:?usage: gpu_setup.sh <stack>}
ROOT=/tmp/mbridge_stack
PY=${PYTHON:-python3}
mkdir -p "$ROOT"

# receive <name>: keep the carried, checked pieces of stack <name>; prints how many of how many are here
receive() {
  local name=$1 dir=$ROOT/$1 d n
  mkdir -p "$dir"
  for d in .gpu_stack/"$name"/p*/; do
    [ -f "$d/piece" ] || continue
    n=$(awk '{print $2}' "$d/STACK")
    want=$(grep " piece\.$n\$" "$d/SHA256SUMS" | awk '{print $1}')
    got=$(sha256sum "$d/piece" | awk '{print $1}')
    if [ "$want" != "$got" ]; then echo "error: $d/piece: sha256 $got, expected $want (resend it)" >&2; exit 1; fi
    cp "$d/piece" "$dir/piece.$n" && cp "$d/SHA256SUMS" "$dir/SHA256SUMS"
  done
}
# unpack <name>: the stack's files in $ROOT/<name>/files once every piece is here (return 1 while some are missing)
unpack() {
  local name=$1 dir=$ROOT/$1 total have
  [ -f "$dir/files/.done" ] && return 0
  if [ ! -f "$dir/SHA256SUMS" ]; then echo "MBRIDGE_STACK waiting $name have=0/?"; return 1; fi
  total=$(grep -c ' piece\.' "$dir/SHA256SUMS")
  have=$(ls "$dir"/piece.* 2>/dev/null | wc -l)
  if [ "$have" -lt "$total" ]; then echo "MBRIDGE_STACK waiting $name have=$have/$total"; return 1; fi
  cat $(ls "$dir"/piece.* | sort) > "$dir/stack.tar"
  (cd "$dir" && grep ' stack\.tar$' SHA256SUMS | sha256sum -c --quiet -) || { echo "error: $name: stack.tar sha256 differs" >&2; exit 1; }
  rm -rf "$dir/files" && mkdir -p "$dir/files"
  tar -xf "$dir/stack.tar" -C "$dir/files" && rm -f "$dir/stack.tar" "$dir"/piece.*
  (cd "$dir/files" && sha256sum -c --quiet FILES.sha256) || { echo "error: $name: a file's sha256 differs" >&2; exit 1; }
  touch "$dir/files/.done"
}

NEEDS=$(grep '^stack:' "benchmarks/gpu_stack/$STACK.txt" | sed 's/^stack://' || true)
ready=1
for name in "$STACK" $NEEDS; do receive "$name"; done
for name in "$STACK" $NEEDS; do unpack "$name" || ready=0; done
[ "$ready" = 1 ] || exit 0

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
  echo "MBRIDGE_STACK ready stack=$STACK library site=$SITE: $(cd "$SITE" && find . -name '*.so*' | head -5 | xargs)"
  exit 0
fi

# Transformer Engine's torch extension: reuse or build.
te_sdist=$(ls "$ROOT"/*/files/transformer_engine_torch-*.tar.gz 2>/dev/null | head -n 1 || true)
if [ -n "$te_sdist" ] && ! ls "$SITE"/transformer_engine/wheel_lib/transformer_engine_torch*.so >/dev/null 2>&1; then
  te_ver=$(basename "$te_sdist" .tar.gz | sed 's/^transformer_engine_torch-//')
  arch=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -n 1 | tr -d '.')
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
    if [ -n "${OUT:-}" ]; then cp "$ext" "$OUT/"; fi
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
