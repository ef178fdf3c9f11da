#!/bin/sh
# Stage what benchmarks/te_build.py needs to build part of TransformerEngine's common library on
# a machine with no network (the GPU device): TE's transformer_engine/common tree and CUTLASS's
# headers at TE's submodule pin, from git, and the headers of cuDNN, its frontend, NCCL, cuBLAS,
# NVRTC and cuRAND from PyPI wheels (cuBLAS, NVRTC and cuRAND are used only where the toolkit
# lacks them). All of it goes into one .tar.xz in .te/ (ignored by git): the device copies the
# work tree with its carried paths, 64 MiB in all, and the headers alone are about 40 MiB.
# Run it here (PyPI reachable), from the repository root:
#     sh benchmarks/te_stage.sh
# then carry .te and run `python3 benchmarks/te_build.py` there.
#
# TE and CUTLASS come from bare git directories (the search tool's `fetch` of
# github:NVIDIA/TransformerEngine and github:NVIDIA/cutlass leaves them under /work/.mirror):
#     TE_GIT=... CUTLASS_GIT=... TE_COMMIT=... sh benchmarks/te_stage.sh
set -eu
python=${PYTHON:-python3}
te_git=${TE_GIT:-/work/.mirror/NVIDIA+TransformerEngine/repo}
cutlass_git=${CUTLASS_GIT:-/work/.mirror/NVIDIA+cutlass/repo}
# TE HEAD on 2026-11-25, the commit NVCC_NOTES.md's TE measurements used.
te_commit=${TE_COMMIT:-d0067d0da6cb01811b8072a7d304f0e00344ce2b}
wheels=${TE_WHEELS:-${TMPDIR:-/tmp}/fast_nvcc-te-wheels}
dest=.te
# Pinned so that every staging gives the same headers. The cuBLAS, NVRTC and cuRAND wheels are
# CUDA 13's (nvidia/cu13/include); the cuDNN and NCCL ones are their -cu13 builds. TE asks for
# nvidia-cudnn-frontend>=1.25.0 (its pyproject.toml).
wheel_pins="nvidia-cudnn-frontend==1.32.0 nvidia-cudnn-cu13==9.24.0.43 nvidia-nccl-cu13==2.30.7
nvidia-cublas==13.1.1.3 nvidia-cuda-nvrtc==13.0.88 nvidia-curand==10.4.0.35"

for dir in "$te_git" "$cutlass_git"; do
    git --git-dir="$dir" rev-parse --git-dir >/dev/null 2>&1 || {
        echo "te_stage: no git directory at $dir (fetch github:NVIDIA/TransformerEngine and github:NVIDIA/cutlass, or set TE_GIT / CUTLASS_GIT)" >&2
        exit 1
    }
done
# The CUTLASS commit that TE's 3rdparty/cutlass submodule pins at te_commit.
cutlass_commit=$(git --git-dir="$te_git" ls-tree "$te_commit" 3rdparty/cutlass | awk '$2 == "commit" {print $3}')
[ -n "$cutlass_commit" ] || { echo "te_stage: $te_commit has no 3rdparty/cutlass submodule" >&2; exit 1; }
git --git-dir="$cutlass_git" cat-file -e "$cutlass_commit^{commit}" 2>/dev/null || {
    echo "te_stage: $cutlass_git lacks CUTLASS commit $cutlass_commit (TE's pin); fetch a newer snapshot" >&2
    exit 1
}

stage=$(mktemp -d "${TMPDIR:-/tmp}/te-stage.XXXXXX")
trap 'rm -rf "$stage"' EXIT
src="$stage/src"
mkdir -p "$src/TransformerEngine" "$src/deps"

# TE: transformer_engine/common without its Python (the Triton kernels, __init__.py, utils.py),
# and the license. The common CMakeLists.txt reads nothing else of TE's repository with
# NVTE_WITH_NCCL_EP=OFF (3rdparty/nccl-extensions is read only with it on). One archive per
# subtree (commit:path): an archive of the whole commit with pathspecs also reads blobs outside
# them, and a mirror may lack the large ones (CUTLASS's media/images/*.png are absent).
git --git-dir="$te_git" archive --format=tar --prefix=transformer_engine/common/ "$te_commit:transformer_engine/common" \
    | tar -x -C "$src/TransformerEngine"
git --git-dir="$te_git" show "$te_commit:LICENSE" >"$src/TransformerEngine/LICENSE"
find "$src/TransformerEngine/transformer_engine/common" -name '*.py' -delete
rm -rf "$src/TransformerEngine/transformer_engine/common/triton"
# CUTLASS: the two include directories TE's CMake names, where its CMake looks (../../3rdparty).
cutlass="$src/TransformerEngine/3rdparty/cutlass"
mkdir -p "$cutlass"
for part in include tools/util/include; do
    git --git-dir="$cutlass_git" archive --format=tar --prefix="$part/" "$cutlass_commit:$part" | tar -x -C "$cutlass"
done
git --git-dir="$cutlass_git" show "$cutlass_commit:LICENSE.txt" >"$cutlass/LICENSE.txt"

mkdir -p "$wheels"
# shellcheck disable=SC2086  # one word per pin
"$python" -m pip download --quiet --no-deps --only-binary=:all: -d "$wheels" $wheel_pins

# Headers (and licenses) out of the wheels with zipfile; each library directory gets empty files
# named like the wheel's shared libraries: TE's CMake must find them, nothing links against them.
# shellcheck disable=SC2086
"$python" - "$wheels" "$src/deps" $wheel_pins <<'EOF'
import sys, zipfile
from pathlib import Path

wheels, deps = Path(sys.argv[1]), Path(sys.argv[2])
versions = dict(pin.replace("-", "_").split("==") for pin in sys.argv[3:])
# distribution: (folder under deps/, include prefix in the wheel, library prefix in the wheel)
WHEELS = {
    "nvidia_cudnn_frontend": ("cudnn_frontend", "include/", None),
    "nvidia_cudnn_cu13": ("cudnn", "nvidia/cudnn/include/", "nvidia/cudnn/lib/"),
    "nvidia_nccl_cu13": ("nccl", "nvidia/nccl/include/", None),
    "nvidia_cublas": ("cublas", "nvidia/cu13/include/", "nvidia/cu13/lib/"),
    "nvidia_cuda_nvrtc": ("nvrtc", "nvidia/cu13/include/", "nvidia/cu13/lib/"),
    "nvidia_curand": ("curand", "nvidia/cu13/include/", None),
}
for dist, (folder, include, lib) in WHEELS.items():
    # The pinned version's wheel (a wheel folder kept between runs may hold others).
    (wheel,) = wheels.glob(f"{dist}-{versions[dist]}-*.whl")
    target = deps / folder
    with zipfile.ZipFile(wheel) as archive:
        for name in archive.namelist():
            if name.startswith(include) and not name.endswith("/"):
                path = target / "include" / name[len(include):]
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(archive.read(name))
            elif ".dist-info/licenses/" in name and not name.endswith("/"):
                (target / Path(name).name).write_bytes(archive.read(name))
            elif lib and name.startswith(lib) and ".so" in name:
                # libcudnn_graph.so.9 -> lib/libcudnn_graph.so (empty)
                stem = Path(name).name.split(".so")[0]
                (target / "lib").mkdir(parents=True, exist_ok=True)
                (target / "lib" / f"{stem}.so").write_bytes(b"")
    (target / "WHEEL").write_text(wheel.name + "\n")
EOF

{
    echo "TransformerEngine $te_commit (transformer_engine/common, without *.py)"
    echo "CUTLASS $cutlass_commit (TE's 3rdparty/cutlass pin; include/, tools/util/include/)"
    for w in "$src"/deps/*/WHEEL; do echo "$(basename "$(dirname "$w")") $(cat "$w")"; done
    echo "unpacked: $(du -sk "$src" | cut -f1) KiB"
} >"$src/MANIFEST.txt"

rm -rf "$dest"
mkdir -p "$dest"
# Reproducible archive: sorted, fixed owner and time.
tar -C "$src" --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 -cf - . \
    | xz -9 -T0 >"$dest/te-src.tar.xz"
cp "$src/MANIFEST.txt" "$dest/MANIFEST.txt"
cat "$dest/MANIFEST.txt"
du -sh "$dest"
