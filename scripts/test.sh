#!/usr/bin/env bash
# Builds ddplaunch and runs every test suite that needs no GPU (the gpu suite
# runs too and skips itself without a GPU). Self-sufficient on a fresh Debian
# 12 machine: installs what is missing, configures, builds. Idempotent.
#
#   build/        the normal build (CUDA kernels compiled when nvcc is found):
#                 suites unit, integration, torch, multinode, gpu
#   build-asan/   AddressSanitizer + UBSan build: suite unit
#   build-fuzz/   clang libFuzzer build: suite fuzz (bounded fuzz runs)
#
# Exit status: 0 when every suite passed. Per-build logs are in
# BUILD/meson-logs/testlog.json (.ci/run sums them).
set -uo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh || exit 1

configure() { # DIR [meson options...]
	local dir=$1
	shift
	if [ -f "$dir/build.ninja" ]; then
		return 0
	fi
	meson setup "$dir" "$@"
}

status=0
run_suites() { # DIR meson-test-arguments...
	local dir=$1
	shift
	meson test -C "$dir" --print-errorlogs --num-processes 2 "$@" || status=1
}

configure build -Dcuda=auto || exit 1
ninja -C build || exit 1
run_suites build --no-suite bench --no-suite fuzz

configure build-asan -Dcuda=disabled -Db_sanitize=address,undefined -Db_lundef=false || exit 1
ninja -C build-asan || exit 1
ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
	run_suites build-asan --suite unit

CC=clang configure build-fuzz -Dcuda=disabled -Dfuzz=true -Db_lundef=false || exit 1
ninja -C build-fuzz || exit 1
run_suites build-fuzz --suite fuzz

exit $status
