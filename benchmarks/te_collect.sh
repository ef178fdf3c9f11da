#!/bin/sh
# Bring back what a te_split.sh series running in the background has left so far (on the device:
# a later call of the session runs `sh benchmarks/te_collect.sh SECONDS`): it waits up to SECONDS
# for the series to end ("done" in its progress file), then copies the progress, machine.txt,
# every step's .out and .json, and the FAST_NVCC_LOGs (logs-*/, one .tgz) to $OUT/r/.
# On a fresh machine (the one the series ran on went back between two calls) there is nothing
# to wait for: it says so and ends at once, rather than hold the new machine for SECONDS
# (2026-12-06: a call that waited 560 s on a fresh machine spent a third of the session's
# device time).
#     setsid sh benchmarks/te_split.sh /tmp/te-split "STEPS" > /dev/null 2>&1 < /dev/null &
#     sleep 2; sh benchmarks/te_collect.sh 560          # the first call
#     sh benchmarks/te_collect.sh 560                   # each next one, within 30 s
set -u
limit=${1:-560}
series=${2:-/tmp/te-split}
out=${OUT:?te_collect: OUT is not set (run it through the device tool)}
if [ ! -f "$series/progress" ]; then
    echo "te_collect: no series at $series on this machine (up since $(uptime -s)): the one it ran on went back" >&2
    exit 3
fi
waited=0
while [ "$waited" -lt "$limit" ] && ! grep -q '^done' "$series/progress"; do
    sleep 5
    waited=$((waited + 5))
done
mkdir -p "$out/r"
cp "$series/progress" "$series/machine.txt" "$out/r/" 2>/dev/null
for f in "$series"/*.out "$series"/*.json; do
    [ -f "$f" ] && cp "$f" "$out/r/"
done
(cd "$series" && ls -d logs-* > /dev/null 2>&1 && tar czf "$out/r/logs.tgz" logs-*)
cat "$series/progress"
