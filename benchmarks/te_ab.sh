#!/bin/sh
# The same te_split.sh steps with an earlier commit's code and with this tree's, one after the
# other on one device machine, so that a change to the scheduler is measured against the code
# before it (benchmarks/te_split.sh; docs/benchmarks.md). Here, once (PyPI and git reachable):
#     rm -rf .base && mkdir .base && git archive COMMIT | tar x -C .base   # ignored: /.base/
# then, carrying [".te", ".base"], the first device call:
#     setsid sh benchmarks/te_ab.sh "full-split" > /dev/null 2>&1 < /dev/null &
#     sleep 2; sh benchmarks/te_collect.sh 560 /tmp/te-base
# and each next call within the device's 30 idle seconds:
#     sh benchmarks/te_collect.sh 560 /tmp/te-base    # until its progress says done
#     sh benchmarks/te_collect.sh 560 /tmp/te-split   # this tree's steps
# The two series share TE's work directory (/tmp/te-work-full for the full-* steps), so their
# objects compare; the base series runs first, so that a machine lost midway has measured the
# reference. A step of a series that never started leaves only "queued" in its progress file.
set -u
steps=${1:?te_ab: name the te_split.sh steps}
[ -d .base/benchmarks ] || { echo "te_ab: no .base/ (git archive COMMIT | tar x -C .base)" >&2; exit 2; }
mkdir -p /tmp/te-base /tmp/te-split
echo "queued $(date +%T)" > /tmp/te-split/progress
rm -rf .base/.te && cp -a .te .base/
(cd .base && sh benchmarks/te_split.sh /tmp/te-base "$steps")
sh benchmarks/te_split.sh /tmp/te-split "$steps"
