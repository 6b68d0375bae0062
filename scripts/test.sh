#!/usr/bin/env bash
# Builds ddplaunch and runs every test suite that needs no GPU (the gpu suite
# runs too and skips itself without a GPU). Self-sufficient on a fresh Debian
# 12 machine: installs what is missing, configures, builds. Idempotent.
#
#   build/        the normal build (CUDA kernels compiled when nvcc is found):
#                 suites unit, integration, torch, multinode, gpu, pip (pip
#                 install and a bundled wheel in fresh venvs, meson-python
#                 and the rest of the build's requirements from PyPI through
#                 ~/.cache/ddplaunch/pip; skipped saying so where PyPI cannot
#                 be reached, failed under CI)
#   build-asan/   AddressSanitizer + UBSan build: suites unit and asan (ddp-train
#                 end to end: checkpoints, a resume, an in-place re-formation of
#                 simulated nodes; tests/worker/train/sanitize_it.py)
#   build-fuzz/   clang libFuzzer build: suite fuzz (bounded fuzz runs)
#
# The torch suite runs every torch test twice: with Debian's torch 1.13 and
# with torch 2.x, from a venv this script makes once in a cache directory
# outside the clone ($XDG_CACHE_HOME or ~/.cache, ddplaunch/venv-torch2, or
# $DDP_TORCH2_VENV) with scripts/torch2-requirements.txt from PyPI (a pinned
# torch and what the tests import besides; about 3 minutes and 4 GB), reused by
# later runs and CI once every requirement in it imports. When PyPI cannot be
# reached the torch 2.x tests skip saying so; with CI set they fail instead.
#
# Exit status: 0 when every suite passed. Per-build logs are in
# BUILD/meson-logs/testlog.json (.ci/run sums them).
set -uo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh || exit 1

torch2_requirements=scripts/torch2-requirements.txt
torch2_venv=${DDP_TORCH2_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/ddplaunch/venv-torch2}
torch2_python=""

# Prints the requirements that PY does not satisfy (one a line): a version pinned
# with == must match the installed one, and the module must import (found by
# importlib without running it: importing torch takes seconds).
torch2_missing() { # PY
	"$1" - "$torch2_requirements" <<'PY' 2>/dev/null || echo "(the venv's python does not run)"
import importlib.metadata as md, importlib.util, re, sys
for line in open(sys.argv[1]):
    req = line.split("#", 1)[0].strip()
    if not req:
        continue
    name, _, pin = req.partition("==")
    try:
        have = md.version(name).split("+")[0]
    except md.PackageNotFoundError:
        have = None
    module = re.sub(r"[-.]", "_", name).lower()
    if have is None or (pin and have != pin) or importlib.util.find_spec(module) is None:
        print(req)
PY
}

# Reuses the venv when it satisfies scripts/torch2-requirements.txt, else makes
# it and installs (or completes) them; sets torch2_python, or DDP_TORCH2_SKIP
# (read by tests/rendezvous/with_torch.sh) when that fails.
setup_torch2() {
	local py=$torch2_venv/bin/python missing
	if [ -x "$py" ]; then
		missing=$(torch2_missing "$py")
		if [ -z "$missing" ]; then
			torch2_python=$py
			return 0
		fi
		echo "test.sh: the torch 2.x venv $torch2_venv lacks $(echo $missing); completing it"
	else
		echo "test.sh: installing $torch2_requirements from PyPI into $torch2_venv" \
			"(once: about 3 minutes and 4 GB)"
	fi
	if { [ -x "$py" ] || python3 -m venv "$torch2_venv"; } &&
		"$py" -m pip install --disable-pip-version-check --quiet --timeout 30 --retries 2 \
			-r "$torch2_requirements" && missing=$(torch2_missing "$py") && [ -z "$missing" ]; then
		torch2_python=$py
		return 0
	fi
	export DDP_TORCH2_SKIP="pip could not install $torch2_requirements from PyPI into $torch2_venv (is PyPI reachable?)"
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
# /metrics is optional (-Dmetrics=auto), but CI tests it (multinode_Metrics):
# there a build without libmicrohttpd fails at configure, not quietly.
metrics=auto
if [ -n "${CI:-}" ]; then
	metrics=enabled
fi
configure build -Dcuda=auto -Dmetrics=$metrics -Dtorch2_python="$torch2_python" || exit 1
ninja -C build || exit 1
run_suites build --no-suite bench --no-suite fuzz

configure build-asan -Dcuda=disabled -Db_sanitize=address,undefined -Db_lundef=false || exit 1
ninja -C build-asan || exit 1
ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
	run_suites build-asan --suite unit --suite asan

CC=clang configure build-fuzz -Dcuda=disabled -Dfuzz=true -Db_lundef=false || exit 1
ninja -C build-fuzz || exit 1
run_suites build-fuzz --suite fuzz

exit $status
