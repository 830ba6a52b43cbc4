#!/usr/bin/env bash
# Prepare, on a machine with a clone of the DeepEP repository, the HybridEP source a GPU host without network builds
# (benchmarks/gpu_hybridep_build.sh), in one tar (or in parts, for a transfer tool that limits file size).
#
# HybridEP (deep_ep.HybridEPBuffer, which megatron-core 0.19.2's fused_a2a.py imports for the flex backend
# "hybridep") lives on the `hybrid-ep` branch of github.com/deepseek-ai/DeepEP; its setup.py builds two extensions,
# deep_ep_cpp (DeepEP's Buffer; NVSHMEM optional) and hybrid_ep_cpp (HybridEP; intra-node needs no NVSHMEM and no
# RDMA: HYBRID_EP_MULTINODE=0 by default). The third-party/nccl submodule is only used by HYBRID_EP_MULTINODE=1 with
# the DOCA path and is not in the archive (git archive leaves submodules out).
#
# usage: bash benchmarks/gpu_hybridep_prepare.sh [GIT_DIR] [COMMIT] [part_bytes]
#   GIT_DIR      a bare DeepEP git dir (git clone --bare https://github.com/deepseek-ai/DeepEP; default
#                /work/.mirror/deepseek-ai+DeepEP/repo)
#   COMMIT       the commit to build (default: the pinned one below, hybrid-ep at 2026-07-10)
#   part_bytes   split into parts of at most this many bytes (default MBRIDGE_PART_BYTES, else one part)
# Writes (all under .gpu_stack/, which git ignores), in the layout of benchmarks/gpu_stack_prepare.sh:
#   .gpu_stack/hybridep/pNN/   `piece` (a slice of one uncompressed tar), `SHA256SUMS` (every part, the whole tar),
#                              `STACK` ("hybridep <n> <total>")
#   the tar holds DeepEP-src.tar.gz (git archive --prefix=DeepEP/ of COMMIT), SOURCE.txt (repo, branch, commit,
#   date, subject) and FILES.sha256.
# No Python package is downloaded: the GPU image has setuptools, wheel, ninja, pybind11 and nvidia-ml-py (the wheel's
# one install_requires, pynvml, is not imported by deep_ep), and torch must stay the host's own.
set -euo pipefail
cd "$(dirname "$0")/.."
GIT_DIR=${1:-/work/.mirror/deepseek-ai+DeepEP/repo}
# deepseek-ai/DeepEP branch hybrid-ep, "Disable custom allgather by default (#682)", 2026-07-10. It has every
# HybridEPBuffer argument megatron-core 0.19.2 passes (num_blocks_permute, num_sms_preprocessing_api,
# fuse_permute_dispatch / fuse_unpermute_combine, handle[-1] = overflow_flag).
COMMIT=${2:-94a9f8f6b146c07d97ec58f67cd6d303296d6098}
PIECE=${3:-}
NAME=hybridep
OUTDIR=.gpu_stack/$NAME
[ -f "$GIT_DIR/HEAD" ] || { echo "error: $GIT_DIR is no bare git dir (git clone --bare https://github.com/deepseek-ai/DeepEP <dir>, then pass <dir>)" >&2; exit 2; }
git() { command git --git-dir="$GIT_DIR" "$@"; }
COMMIT=$(git rev-parse --verify "$COMMIT^{commit}")
git cat-file -e "$COMMIT:deep_ep/hybrid_ep_buffer.py" 2>/dev/null \
  || { echo "error: $COMMIT has no deep_ep/hybrid_ep_buffer.py (not a hybrid-ep commit)" >&2; exit 2; }
git show "$COMMIT:deep_ep/hybrid_ep_buffer.py" | grep '^class HybridEPBuffer' >/dev/null \
  || { echo "error: $COMMIT: deep_ep/hybrid_ep_buffer.py defines no class HybridEPBuffer" >&2; exit 2; }
branches=$(git branch --contains "$COMMIT" --format='%(refname:short)' 2>/dev/null | xargs || true)

tmp=$(mktemp -d) && trap 'rm -rf "$tmp"' EXIT
git archive --format=tar.gz --prefix=DeepEP/ -o "$tmp/DeepEP-src.tar.gz" "$COMMIT"
cat > "$tmp/SOURCE.txt" <<EOF
repo github.com/deepseek-ai/DeepEP
branches ${branches:-?}
commit $COMMIT
date $(git log -1 --format=%cI "$COMMIT")
subject $(git log -1 --format=%s "$COMMIT")
archive git archive --format=tar.gz --prefix=DeepEP/ $COMMIT (submodule third-party/nccl left out)
EOF
(cd "$tmp" && sha256sum DeepEP-src.tar.gz SOURCE.txt) > "$tmp/FILES.sha256"

rm -rf "$OUTDIR" && mkdir -p "$OUTDIR"
tarball=$OUTDIR/stack.tar
tar -cf "$tarball" -C "$tmp" DeepEP-src.tar.gz SOURCE.txt FILES.sha256
# shellcheck source=benchmarks/gpu_pieces.sh
source benchmarks/gpu_pieces.sh
PIECE=${PIECE:-$(default_piece_bytes)}
cut_pieces "$NAME" "$OUTDIR" "$tarball" "$PIECE" "DeepEP $COMMIT (${branches:-?})"
cp "$tmp/SOURCE.txt" "$OUTDIR/SOURCE.txt"
echo "On the GPU host: copy .gpu_stack/$NAME/ into the checkout, then"
echo "  bash benchmarks/gpu_hybridep_build.sh"
