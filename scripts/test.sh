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
# The torch suite runs every torch test twice: with Debian's torch 1.13 and
# with torch 2.x, from a venv this script makes once in a cache directory
# outside the clone ($XDG_CACHE_HOME or ~/.cache, ddplaunch/venv-torch2, or
# $DDP_TORCH2_VENV) with a pinned torch from PyPI (about 3 minutes and 4 GB),
# reused by later runs and CI. When PyPI cannot be reached the torch 2.x
# tests skip saying so; with CI set they fail instead.
#
# Exit status: 0 when every suite passed. Per-build logs are in
# BUILD/meson-logs/testlog.json (.ci/run sums them).
set -uo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh || exit 1

TORCH2_VERSION=2.15.0
torch2_venv=${DDP_TORCH2_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/ddplaunch/venv-torch2}
torch2_python=""

# Reuses the venv when it has the pinned torch, else makes it and installs
# torch==TORCH2_VERSION; sets torch2_python, or DDP_TORCH2_SKIP (read by
# tests/rendezvous/with_torch.sh) when that fails.
setup_torch2() {
	local py=$torch2_venv/bin/python have
	have=$("$py" -c 'import importlib.metadata as m; print(m.version("torch"))' 2>/dev/null)
	if [ "${have%%+*}" = "$TORCH2_VERSION" ]; then
		torch2_python=$py
		return 0
	fi
	echo "test.sh: installing torch==$TORCH2_VERSION from PyPI into $torch2_venv" \
		"(once: about 3 minutes and 4 GB)"
	if { [ -x "$py" ] || python3 -m venv "$torch2_venv"; } &&
		"$py" -m pip install --disable-pip-version-check --quiet --timeout 30 --retries 2 \
			"torch==$TORCH2_VERSION"; then
		torch2_python=$py
		return 0
	fi
	export DDP_TORCH2_SKIP="pip could not install torch==$TORCH2_VERSION from PyPI into $torch2_venv (is PyPI reachable?)"
	if [ -n "${CI:-}" ]; then
		echo "test.sh: $DDP_TORCH2_SKIP; CI is set, so the torch 2.x tests will fail" >&2
	else
		echo "test.sh: $DDP_TORCH2_SKIP; the torch 2.x tests will be skipped" >&2
	fi
}

configure() { # DIR [meson options...]
	local dir=$1
	shift
	if [ -f "$dir/build.ninja" ]; then
		# Options may differ from the last run (the torch 2.x interpreter).
		meson configure "$dir" "$@" >/dev/null
		return
	fi
	meson setup "$dir" "$@"
}

status=0
run_suites() { # DIR meson-test-arguments...
	local dir=$1
	shift
	meson test -C "$dir" --print-errorlogs --num-processes 2 "$@" || status=1
}

setup_torch2
configure build -Dcuda=auto -Dtorch2_python="$torch2_python" || exit 1
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
