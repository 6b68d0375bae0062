#!/bin/bash
# run-all.sh - builds what the benchmarks need (release build in build-bench)
# and runs them against each reference torch side by side, in one run:
# Debian's torch 1.13 (/usr/bin/python3) and torch 2.x (the venv
# scripts/test.sh makes). For each: ddp-rdzvd against that torch's TCPStore
# server (2.x: its libuv server), ddplaunch against its torchrun (launch and
# restart), libddp's all-reduce against its gloo, ddp-train against its DDP;
# and, once, ddp-train's fixed global batch (--virtual_shards) against its
# own step at the same global batch (shards_bench.py; it needs no torch);
# beside torch 2.x, a node killed every 10 s in place against the restart
# path and torchrun's (chaos_bench.py).
# Prints the machine, every figure, ours/theirs ratios and the targets, then
# the ratio and target lines of every reference together; keeps a copy in
# BUILD/bench-results.txt. The hand-over of the training state to a process
# that joins (a 100 MB broadcast, shared memory and TCP ring across two
# simulated nodes) has no torch counterpart: it runs once. ddplaunch.torch's
# Elastic (in place) runs beside ddplaunch's restart path and torchrun's on the
# same script and failure (elastic_bench.py), and beside torchft where
# ${XDG_CACHE_HOME:-~/.cache}/ddplaunch/venv-torchft has it (torch 2.x only).
#
#   tests/bench/run-all.sh [--quick] [--store-only | --launch-only |
#                          --allreduce-only | --train-only | --multinode-only |
#                          --handover-only | --shards-only | --chaos-only |
#                          --elastic-only]
#
# --quick: shorter runs (1 s per throughput row, fewer trials and sizes),
# same checks. Environment: BUILD_DIR (default build-bench); PYTHONS, the
# reference interpreters separated by spaces (default /usr/bin/python3 and
# ${XDG_CACHE_HOME:-~/.cache}/ddplaunch/venv-torch2/bin/python; one without
# torch is left out, saying so; with none, ddplaunch's parts are measured
# alone); PYTHON, one interpreter instead (the old form).
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
build=${BUILD_DIR:-$root/build-bench}
venv_python=${XDG_CACHE_HOME:-$HOME/.cache}/ddplaunch/venv-torch2/bin/python
torchft_python=${XDG_CACHE_HOME:-$HOME/.cache}/ddplaunch/venv-torchft/bin/python
read -r -a candidates <<<"${PYTHONS:-${PYTHON:-/usr/bin/python3 $venv_python}}"
quick=0 parts="store launch allreduce train multinode handover shards chaos elastic"
for arg in "$@"; do
	case $arg in
	--quick) quick=1 ;;
	--store-only) parts=store ;;
	--launch-only) parts=launch ;;
	--allreduce-only) parts=allreduce ;;
	--train-only) parts=train ;;
	--multinode-only) parts=multinode ;;
	--handover-only) parts=handover ;;
	--shards-only) parts=shards ;;
	--chaos-only) parts=chaos ;;
	--elastic-only) parts=elastic ;;
	*)
		echo "usage: $0 [--quick] [--store-only | --launch-only | --allreduce-only |" \
			"--train-only | --multinode-only | --handover-only | --shards-only |" \
			"--chaos-only | --elastic-only]" >&2
		exit 2
		;;
	esac
done

if [ ! -f "$build/build.ninja" ]; then
	meson setup "$build" "$root" -Dbuildtype=release >/dev/null
fi
meson compile -C "$build" store_bench launch_bench launch_bench_worker allreduce_bench \
	ddp-rdzvd ddplaunch ddp-exec ddp-train rdzv_swarm mn_worker handover_bench >/dev/null

# The path of a built executable, by target name.
target_path() {
	meson introspect --targets "$build" | /usr/bin/python3 -c '
import json, sys
for t in json.load(sys.stdin):
    if t["name"] == sys.argv[1] and t["type"] == "executable":
        print(t["filename"][0]); break
else:
    sys.exit("run-all.sh: no executable target " + sys.argv[1])' "$1"
}

torch_version() {
	"$1" -c 'import torch; print(torch.__version__)' 2>/dev/null
}

# The references: the candidates whose torch imports, with a short tag each.
pythons=() tags=()
for py in "${candidates[@]}"; do
	if v=$(torch_version "$py"); then
		pythons+=("$py")
		tags+=("torch-$(expr "$v" : "\([0-9.]*\)")")
	else
		echo "run-all.sh: $py cannot import torch; it is not a reference in this run" >&2
	fi
done

results=$build/bench-results.txt
{
	echo "== machine"
	echo "date:    $(date -u '+%Y-%m-%d %H:%M UTC')"
	echo "commit:  $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)"
	echo "cpu:     $(nproc) x $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)"
	echo "kernel:  $(uname -r)"
	echo "memory:  $(awk '/MemTotal/ {printf "%.1f GiB", $2 / 1048576}' /proc/meminfo)"
	for i in "${!pythons[@]}"; do
		echo "torch:   ${tags[$i]} (${pythons[$i]})"
	done
	[ ${#pythons[@]} -gt 0 ] || echo "torch:   none (ddplaunch's parts measured alone)"
	echo "build:   $build ($(meson introspect --buildoptions "$build" | /usr/bin/python3 -c '
import json, sys
print(next(o["value"] for o in json.load(sys.stdin) if o["name"] == "buildtype"))'))"
	echo "load:    $(cut -d' ' -f1-3 /proc/loadavg) (1/5/15 min; other work on the machine skews figures)"
} | tee "$results"

status=0
# run PART TAG COMMAND...: runs one benchmark, its output into the results
# and into BUILD/bench-PART-TAG.txt for the side-by-side summary.
run() {
	local part=$1 tag=$2
	shift 2
	echo | tee -a "$results"
	echo "== $part, reference $tag" | tee -a "$results"
	echo "\$ $*" | tee -a "$results"
	"$@" 2>&1 | tee "$build/bench-$part-$tag.txt" | tee -a "$results" || status=1
}

bench_one() { # PART PYTHON-or-empty TAG
	local part=$1 py=$2 tag=$3 torch_args
	if [ -n "$py" ]; then torch_args=(--python "$py"); else torch_args=(--no-torch); fi
	case $part in
	store)
		local args=(--rdzvd "$(target_path ddp-rdzvd)" "${torch_args[@]}")
		[ "$quick" = 1 ] && args+=(--seconds 1 --storm 1024,10000 --idle 500)
		run store "$tag" "$(target_path store_bench)" "${args[@]}"
		;;
	launch)
		local args=(--ddplaunch "$(target_path ddplaunch)"
			--worker "$(target_path launch_bench_worker)" "${torch_args[@]}")
		[ "$quick" = 1 ] && args+=(--trials 5 --torch-trials 3)
		run launch "$tag" "$(target_path launch_bench)" "${args[@]}"
		;;
	allreduce)
		[ -n "$py" ] || return 0
		local args=(--bench "$(target_path allreduce_bench)" --ddplaunch "$(target_path ddplaunch)"
			--gloo "$root/tests/bench/allreduce_gloo.py" --python "$py")
		[ "$quick" = 1 ] && args+=(--ranks 2 --max $((16 << 20)) --trials 1)
		run allreduce "$tag" /usr/bin/python3 "$root/tests/bench/allreduce_bench.py" "${args[@]}"
		;;
	train)
		[ -n "$py" ] || return 0
		local args=(--ddp-train "$(target_path ddp-train)" --ddplaunch "$(target_path ddplaunch)"
			--source "$root" --python "$py" --out "$build/train_bench-$tag.md")
		[ "$quick" = 1 ] && args+=(--reps 1 --configs digits)
		run train "$tag" /usr/bin/python3 "$root/tests/bench/train_bench.py" "${args[@]}"
		;;
	shards) # ddp-train against itself: once, beside the first reference
		[ "$tag" = "${tags[0]:-ours-alone}" ] || return 0
		local args=(--ddp-train "$(target_path ddp-train)" --ddplaunch "$(target_path ddplaunch)"
			--source "$root" --out "$build/shards_bench.md")
		[ "$quick" = 1 ] && args+=(--reps 1)
		run shards "$tag" /usr/bin/python3 "$root/tests/bench/shards_bench.py" "${args[@]}"
		;;
	multinode) # the swarm once; the agents beside torchrun 2.x only (1.13's differs)
		case $tag in torch-1.*) return 0 ;; esac
		local sizes=64,512,4000 agents=2,8,16
		[ "$quick" = 1 ] && sizes=64,512 agents=2,8
		run multinode "$tag" "$(target_path rdzv_swarm)" --rdzvd "$(target_path ddp-rdzvd)" \
			--agents "$sizes"
		local args=(--ddplaunch "$(target_path ddplaunch)" --worker "$(target_path mn_worker)"
			--sizes "$agents" --out "$build/mn_bench-$tag.md")
		if [ -n "$py" ]; then args+=(--torch "$py"); else args+=(--torch /nonexistent); fi
		run multinode-agents "$tag" /usr/bin/python3 "$root/tests/bench/mn_bench.py" "${args[@]}"
		;;
	handover) # no torch counterpart: once, beside the first reference
		[ "$tag" = "${tags[0]:-ours-alone}" ] || return 0
		local args=(--bench "$(target_path handover_bench)" --ddplaunch "$(target_path ddplaunch)")
		[ "$quick" = 1 ] && args+=(--repeats 3)
		run handover "$tag" /usr/bin/python3 "$root/tests/bench/handover_bench.py" "${args[@]}"
		;;
	chaos) # failures in place beside the restart path and torchrun 2.x only
		case $tag in torch-1.*) return 0 ;; esac
		local args=(--ddplaunch "$(target_path ddplaunch)" --ddp-train "$(target_path ddp-train)"
			--out "$build/chaos_bench-$tag.md")
		if [ -n "$py" ]; then args+=(--torch "$py"); else args+=(--torch /nonexistent); fi
		[ "$quick" = 1 ] && args+=(--seconds 20)
		run chaos "$tag" /usr/bin/python3 "$root/tests/bench/chaos_bench.py" "${args[@]}"
		;;
	elastic) # ddplaunch.torch in place vs restart + checkpoint and torchrun's restart
		[ -n "$py" ] || return 0
		local args=(--python "$py" --ddplaunch "$(target_path ddplaunch)" --source "$root"
			--out "$build/elastic_bench-$tag.md")
		[ "$quick" = 1 ] && args+=(--quick)
		case $tag in torch-1.*) ;; *) [ -x "$torchft_python" ] && args+=(--torchft "$torchft_python") ;; esac
		run elastic "$tag" /usr/bin/python3 "$root/tests/bench/elastic_bench.py" "${args[@]}"
		;;
	esac
}

for part in $parts; do
	if [ ${#pythons[@]} -eq 0 ]; then
		bench_one "$part" "" ours-alone
	fi
	for i in "${!pythons[@]}"; do
		bench_one "$part" "${pythons[$i]}" "${tags[$i]}"
	done
done

# The comparisons of every reference together.
{
	echo
	echo "== side by side: the ratio and target lines of each reference"
	for part in $parts; do
		for tag in "${tags[@]}"; do
			f=$build/bench-$part-$tag.txt
			[ -f "$f" ] || continue
			echo "-- $part vs $tag"
			grep -E 'ratio|target|VmHWM|released|^\| |samples/s ->' "$f" || true
		done
	done
} | tee -a "$results"
echo "run-all.sh: results in $results"
exit $status
