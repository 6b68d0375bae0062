#!/bin/bash
# run-all.sh - builds what the store and launcher benchmarks need (release
# build in build-bench) and runs them: ddp-rdzvd against torch 1.13's
# TCPStore server, ddplaunch against torchrun, in the same run. Prints the
# machine, every figure, ours/theirs ratios and the targets; keeps a copy in
# BUILD/bench-results.txt.
#
#   tests/bench/run-all.sh [--quick] [--store-only | --launch-only]
#
# --quick: shorter runs (1 s per throughput row, fewer trials), same checks.
# Environment: BUILD_DIR (default build-bench), PYTHON (default
# /usr/bin/python3, the Debian Python that has torch).
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
build=${BUILD_DIR:-$root/build-bench}
python=${PYTHON:-/usr/bin/python3}
quick=0 store=1 launch=1
for arg in "$@"; do
	case $arg in
	--quick) quick=1 ;;
	--store-only) launch=0 ;;
	--launch-only) store=0 ;;
	*) echo "usage: $0 [--quick] [--store-only | --launch-only]" >&2; exit 2 ;;
	esac
done

if [ ! -f "$build/build.ninja" ]; then
	meson setup "$build" "$root" -Dbuildtype=release >/dev/null
fi
meson compile -C "$build" store_bench launch_bench launch_bench_worker ddp-rdzvd ddplaunch ddp-exec >/dev/null

# The path of a built executable, by target name.
target_path() {
	meson introspect --targets "$build" | "$python" -c '
import json, sys
for t in json.load(sys.stdin):
    if t["name"] == sys.argv[1] and t["type"] == "executable":
        print(t["filename"][0]); break
else:
    sys.exit("run-all.sh: no executable target " + sys.argv[1])' "$1"
}

results=$build/bench-results.txt
{
	echo "== machine"
	echo "date:    $(date -u '+%Y-%m-%d %H:%M UTC')"
	echo "commit:  $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)"
	echo "cpu:     $(nproc) x $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)"
	echo "kernel:  $(uname -r)"
	echo "memory:  $(awk '/MemTotal/ {printf "%.1f GiB", $2 / 1048576}' /proc/meminfo)"
	echo "torch:   $("$python" -c 'import torch; print(torch.__version__)' 2>/dev/null || echo none)"
	echo "build:   $build ($(meson introspect --buildoptions "$build" | "$python" -c '
import json, sys
print(next(o["value"] for o in json.load(sys.stdin) if o["name"] == "buildtype"))'))"
	echo "load:    $(cut -d' ' -f1-3 /proc/loadavg) (1/5/15 min; other work on the machine skews figures)"
} | tee "$results"

# Without torch, measure ours alone (no ratios).
torch_args=(--python "$python")
if ! "$python" -c 'import torch' 2>/dev/null; then
	echo "run-all.sh: $python cannot import torch; measuring ddplaunch's parts alone" >&2
	torch_args=(--no-torch)
fi

status=0
if [ "$store" = 1 ]; then
	args=(--rdzvd "$(target_path ddp-rdzvd)" "${torch_args[@]}")
	[ "$quick" = 1 ] && args+=(--seconds 1 --storm 1024,10000)
	echo | tee -a "$results"
	echo "\$ store_bench ${args[*]}" | tee -a "$results"
	"$(target_path store_bench)" "${args[@]}" | tee -a "$results" || status=1
fi
if [ "$launch" = 1 ]; then
	args=(--ddplaunch "$(target_path ddplaunch)" --worker "$(target_path launch_bench_worker)"
		"${torch_args[@]}")
	[ "$quick" = 1 ] && args+=(--trials 5 --torch-trials 3)
	echo | tee -a "$results"
	echo "\$ launch_bench ${args[*]}" | tee -a "$results"
	"$(target_path launch_bench)" "${args[@]}" | tee -a "$results" || status=1
fi
echo "run-all.sh: results in $results"
exit $status
