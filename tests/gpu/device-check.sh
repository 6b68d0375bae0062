#!/usr/bin/env bash
# The GPU check, on a machine with a GPU, CUDA 13 and PyTorch 2.x (its
# python3), from a build prepared on the CPU build machine by
# tests/gpu/prepare-device-bundle.sh. Run from the repository root:
#
#   tests/gpu/device-check.sh [BUILD_DIR [OUT_DIR]]
#       BUILD_DIR  default build-device
#       OUT_DIR    default $OUT, else ./device-results
#       PYTHON     the interpreter with PyTorch 2.x (default python3)
#
# Steps, each bounded in time (at most about 10 minutes in all, usually
# well under 8):
#   1. env.txt         GPU, driver, libraries as resolved, versions
#   2. the gpu suite   (kernels vs CPU, NCCL collectives, watchdog, ddp-train
#                      equivalence, exact resume and the shard mode's
#                      identity on CUDA) -> gpu-results.json
#   3. the store's PyTorch client tests (suite torch, store_*) with this
#                      machine's python3 -> torch-results.json
#   4. a 1-rank init_process_group("nccl") job under ddplaunch -> nccl-job.log
#   5. the GPU benchmark, ddp-train vs PyTorch DDP -> bench.txt
# Test output goes to tests.log; summary.txt says what passed. Exit 0 when
# steps 2 and 4 passed and the benchmark ran.
set -uo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
build=${1:-build-device}
out=${2:-${OUT:-$root/device-results}}
py=${PYTHON:-python3}
mkdir -p "$out"
summary="$out/summary.txt"
: >"$summary"
note() { echo "$*" | tee -a "$summary"; }

if [ ! -f "$build/device-bundle.txt" ]; then
	note "device-check: $build/device-bundle.txt is missing; run tests/gpu/prepare-device-bundle.sh $build on the build machine and bring $build along"
	exit 2
fi
build=$(cd "$build" && pwd)
# Test commands and compiled-in paths name the checkout the build was made
# in; point that path at this checkout when they differ.
src=$(sed -n 's/^source_root=//p' "$build/device-bundle.txt")
if [ -n "$src" ] && [ "$src" != "$root" ]; then
	if [ -e "$src" ] && [ ! -L "$src" ]; then
		note "device-check: $src exists here and is not this checkout; paths in the build will be wrong"
	else
		mkdir -p "$(dirname "$src")" && ln -sfn "$root" "$src"
	fi
fi

# Libraries: CUDA's from the pip packages PyTorch brings (nvidia-nccl,
# nvidia-cublas, ...) first, so our programs and PyTorch load the same ones;
# then the carried ones; then the toolkit's.
ldp=""
site=$("$py" -c 'import nvidia, os; print(os.path.dirname(list(nvidia.__path__)[0]))' 2>/dev/null)
if [ -n "$site" ]; then
	for f in $(find "$site/nvidia" -maxdepth 4 \( -name 'libnccl.so.2' -o -name 'libcublas.so.13' \
		-o -name 'libcublasLt.so.13' -o -name 'libcudart.so.13' \) 2>/dev/null); do
		case ":$ldp:" in *":$(dirname "$f"):"*) ;; *) ldp="$ldp${ldp:+:}$(dirname "$f")" ;; esac
	done
fi
ldp="$ldp${ldp:+:}$build/device-libs"
for d in /usr/local/cuda/lib64 /usr/local/cuda/lib; do
	[ -d "$d" ] && ldp="$ldp:$d"
done
export LD_LIBRARY_PATH="$ldp${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export NCCL_SOCKET_IFNAME=${NCCL_SOCKET_IFNAME:-lo}

{
	echo "== bundle"; cat "$build/device-bundle.txt"
	echo "== machine"; uname -a; date -u
	echo "== nvidia-smi"; timeout 30 nvidia-smi 2>&1
	echo "== probe"; "$build/tests/gpu/gpu_probe" 2>&1
	echo "== python"
	"$py" -c 'import sys, torch; print(sys.version); print("torch", torch.__version__, "cuda", torch.version.cuda, "gpu", torch.cuda.is_available()); print("nccl", torch.cuda.nccl.version())' 2>&1 | tail -4
	echo "== LD_LIBRARY_PATH"; echo "$LD_LIBRARY_PATH"
	echo "== ldd"
	for b in worker/train/ddp-train tests/gpu/test_gpu_kernels launcher/ddplaunch; do
		echo "-- $b"; ldd "$build/$b" 2>&1 | grep -E 'not found|cuda|nccl|cublas|uv|inih|jansson|openblas'
	done
} >"$out/env.txt" 2>&1
note "$(sed -n '/== probe/{n;p}' "$out/env.txt")"

t0=$(date +%s)
timeout 240 "$py" tests/gpu/run_meson_tests.py --build "$build" --suite gpu --python "$py" \
	--log "$out/tests.log" --json "$out/gpu-results.json" | tee -a "$summary"
gpu_rc=${PIPESTATUS[0]}
# On a GPU machine a skipped gpu test is a failure (it found no GPU).
if [ "$gpu_rc" -eq 0 ] && ! "$py" -c 'import json, sys; c = json.load(open(sys.argv[1]))["counts"]; sys.exit(0 if c.get("OK") and not c.get("SKIP") else 1)' "$out/gpu-results.json"; then
	note "gpu suite: some tests were skipped or none ran: the GPU was not usable by them"
	gpu_rc=1
fi
note "gpu suite: exit $gpu_rc ($(($(date +%s) - t0)) s)"

t0=$(date +%s)
timeout 100 "$py" tests/gpu/run_meson_tests.py --build "$build" --suite torch --match '^store_' \
	--max-timeout 45 --python "$py" --log "$out/tests.log" --json "$out/torch-results.json" |
	tee -a "$summary"
note "store PyTorch client tests: exit ${PIPESTATUS[0]} ($(($(date +%s) - t0)) s)"

t0=$(date +%s)
PYTHON_EXEC="$py" timeout 60 "$build/launcher/ddplaunch" --standalone --nproc_per_node=1 \
	tests/gpu/torch_nccl_job.py >"$out/nccl-job.log" 2>&1
job_rc=$?
note "torch init_process_group(nccl) under ddplaunch: exit $job_rc ($(($(date +%s) - t0)) s): $(grep -m1 'init_process_group' "$out/nccl-job.log" | tail -c 200)"

t0=$(date +%s)
timeout 180 "$py" tests/bench/gpu_bench.py --ddp-train "$build/worker/train/ddp-train" \
	--ddplaunch "$build/launcher/ddplaunch" --source "$root" --python "$py" \
	--probe "$build/tests/gpu/gpu_probe" --steps 100 --warmup 20 --out "$out/bench.txt" \
	>>"$out/tests.log" 2>&1
bench_rc=$?
note "gpu benchmark: exit $bench_rc ($(($(date +%s) - t0)) s)"
if [ -f "$out/bench.txt" ]; then
	sed -n '1,20p' "$out/bench.txt" | tee -a "$summary"
elif [ -f "$out/bench.txt.partial" ]; then
	note "gpu benchmark cut short; rows so far:"
	tee -a "$summary" <"$out/bench.txt.partial"
fi

if [ "$gpu_rc" -eq 0 ] && [ "$job_rc" -eq 0 ] && [ "$bench_rc" -eq 0 ]; then
	note "device-check: PASS"
	exit 0
fi
note "device-check: FAIL (details in $out/tests.log, $out/nccl-job.log)"
exit 1
