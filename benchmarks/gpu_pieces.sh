#!/usr/bin/env bash
# Sourced by the *_prepare.sh scripts: cut one tar into pieces that each fit one transfer to a GPU host.
#   cut_pieces <stack name> <out dir> <tar file> <piece bytes> [note for the SHA256SUMS header]
# Writes <out dir>/pNN/{piece,SHA256SUMS,STACK} (SHA256SUMS: every piece and the whole tar; STACK: "<name> <n>
# <total>"), removes the tar, and prints one line per piece with its size. benchmarks/gpu_setup.sh and
# gpu_hybridep_build.sh join and check them on the host.
cut_pieces() {
  local name=$1 outdir=$2 tarball=$3 piece=$4 note=${5:-}
  split -b "$piece" -d -a 2 "$tarball" "$outdir/piece."
  local total
  total=$(ls "$outdir"/piece.* | wc -l)
  {
    echo "# stack $name: $total pieces of <= $piece bytes; $(wc -c < "$tarball") bytes in all${note:+; $note}"
    (cd "$(dirname "$tarball")" && sha256sum "$(basename "$tarball")")
    (cd "$outdir" && sha256sum piece.*)
  } > "$outdir/SHA256SUMS"
  local p n d
  for p in "$outdir"/piece.*; do
    n=${p##*.}; d=$outdir/p$n
    mkdir -p "$d" && mv "$p" "$d/piece" && cp "$outdir/SHA256SUMS" "$d/" && echo "$name $n $total" > "$d/STACK"
  done
  rm -f "$tarball"
  echo "stack $name: $total pieces under $outdir/"
  du -b "$outdir"/p*/piece | awk '{printf "  %s  %d bytes (%.2f MB)\n", $2, $1, $1/1e6}'
}

# default_piece_bytes: the largest piece one device call can carry beside the working tree: 64 MiB less the tracked
# files (17 MB on 2026-11-28: 56 MB pieces no longer fit, "the working tree is larger than 64 MiB") less 2 MB.
default_piece_bytes() {
  local tree
  tree=$(git ls-files -z | xargs -0 stat -c %s 2>/dev/null | awk '{s += $1} END {print s + 0}')
  echo $((64 * 1024 * 1024 - tree - 2000000))
}
