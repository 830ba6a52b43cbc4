#!/usr/bin/env bash
# Sourced by the *_prepare.sh scripts: cut one tar into parts (one part unless a size is given, e.g. the file size
# limit of the tool that copies them to the GPU host).
#   cut_pieces <stack name> <out dir> <tar file> <part bytes, 0: one part> [note for the SHA256SUMS header]
# Writes <out dir>/pNN/{piece,SHA256SUMS,STACK} (SHA256SUMS: every part and the whole tar; STACK: "<name> <n>
# <total>"), removes the tar, and prints one line per part with its size. benchmarks/gpu_setup.sh and
# gpu_hybridep_build.sh join and check them on the host.
cut_pieces() {
  local name=$1 outdir=$2 tarball=$3 piece=$4 note=${5:-}
  [ "$piece" -gt 0 ] 2>/dev/null || piece=$(($(wc -c < "$tarball") + 1))
  split -b "$piece" -d -a 2 "$tarball" "$outdir/piece."
  local total
  total=$(ls "$outdir"/piece.* | wc -l)
  {
    echo "# stack $name: $total parts of <= $piece bytes; $(wc -c < "$tarball") bytes in all${note:+; $note}"
    (cd "$(dirname "$tarball")" && sha256sum "$(basename "$tarball")")
    (cd "$outdir" && sha256sum piece.*)
  } > "$outdir/SHA256SUMS"
  local p n d
  for p in "$outdir"/piece.*; do
    n=${p##*.}; d=$outdir/p$n
    mkdir -p "$d" && mv "$p" "$d/piece" && cp "$outdir/SHA256SUMS" "$d/" && echo "$name $n $total" > "$d/STACK"
  done
  rm -f "$tarball"
  echo "stack $name: $total part(s) under $outdir/"
  du -b "$outdir"/p*/piece | awk '{printf "  %s  %d bytes (%.2f MB)\n", $2, $1, $1/1e6}'
}

# default_piece_bytes: the part size when the command line gives none: MBRIDGE_PART_BYTES (e.g. your transfer tool's
# file size limit in bytes), else 0, one part.
default_piece_bytes() {
  echo "${MBRIDGE_PART_BYTES:-0}"
}
