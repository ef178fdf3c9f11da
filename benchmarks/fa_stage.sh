#!/bin/sh
# Stage what benchmarks/pytorch_extension.py builds on a machine with no network (the GPU
# device): FlashAttention 2's kernel sources (csrc/flash_attn/src: its headers and the .cu files
# named below) and CUTLASS's headers at FlashAttention's csrc/cutlass submodule pin, from git,
# into one .tar.xz in .fa/ (ignored by git; carried to the device, 64 MiB in all).
# Run it here, from the repository root:
#     sh benchmarks/fa_stage.sh
# FlashAttention and CUTLASS come from bare git directories (the search tool's `fetch` of
# github:Dao-AILab/flash-attention and github:NVIDIA/cutlass leaves them under /work/.mirror):
#     FA_GIT=... CUTLASS_GIT=... FA_COMMIT=... sh benchmarks/fa_stage.sh
set -eu
fa_git=${FA_GIT:-/work/.mirror/Dao-AILab+flash-attention/repo}
cutlass_git=${CUTLASS_GIT:-/work/.mirror/NVIDIA+cutlass/repo}
# flash-attention's HEAD on 2026-11-26.
fa_commit=${FA_COMMIT:-0251105a}
dest=.fa
for dir in "$fa_git" "$cutlass_git"; do
    git --git-dir="$dir" rev-parse --git-dir >/dev/null 2>&1 || {
        echo "fa_stage: no git directory at $dir (fetch github:Dao-AILab/flash-attention and github:NVIDIA/cutlass)" >&2
        exit 1
    }
done
cutlass_commit=$(git --git-dir="$fa_git" ls-tree "$fa_commit" csrc/cutlass | awk '$2 == "commit" {print $3}')
[ -n "$cutlass_commit" ] || { echo "fa_stage: $fa_commit has no csrc/cutlass submodule" >&2; exit 1; }
git --git-dir="$cutlass_git" cat-file -e "$cutlass_commit^{commit}" 2>/dev/null || {
    echo "fa_stage: $cutlass_git lacks CUTLASS commit $cutlass_commit (FlashAttention's pin)" >&2
    exit 1
}
stage=$(mktemp -d "${TMPDIR:-/tmp}/fa-stage.XXXXXX")
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/flash-attention/csrc/cutlass"
# The kernel folder whole (headers and every kernel file: the benchmark picks its sources), the
# setup.py whose flags and MAX_JOBS rule the benchmark copies, and the license.
git --git-dir="$fa_git" archive "$fa_commit" csrc/flash_attn/src setup.py LICENSE | tar -x -C "$stage/flash-attention"
git --git-dir="$cutlass_git" archive "$cutlass_commit" include LICENSE.txt | tar -x -C "$stage/flash-attention/csrc/cutlass"
printf 'flash-attention %s\ncutlass %s\n' "$(git --git-dir="$fa_git" rev-parse "$fa_commit")" "$cutlass_commit" \
    > "$stage/flash-attention/STAGED.txt"
mkdir -p "$dest"
tar -C "$stage" -cJf "$dest/fa-src.tar.xz" flash-attention
echo "fa_stage: $dest/fa-src.tar.xz ($(du -h "$dest/fa-src.tar.xz" | cut -f1)): flash-attention $fa_commit, cutlass $cutlass_commit"
