#!/bin/sh
# with_torch.sh MAJOR PYTHON SCRIPT [ARGS...]
#
# Runs SCRIPT ARGS under PYTHON when PYTHON has torch MAJOR.x (1 for
# Debian's python3-torch 1.13, 2 for the venv scripts/test.sh creates).
# Otherwise the test is skipped (exit 77, meson's plain exit-code protocol)
# with a message saying why and how to get that torch; with CI set in the
# environment it fails instead (exit 1): in CI every torch test must run.
# $DDP_TORCH2_SKIP, set by scripts/test.sh when it could not install torch
# 2.x, is shown as the reason.
major=$1
py=$2
shift 2

skip() {
	if [ -n "${CI:-}" ]; then
		echo "with_torch: $1; CI is set, so the torch $major.x tests must run" >&2
		exit 1
	fi
	echo "with_torch: skipped: $1" >&2
	exit 77
}

if [ "$major" = 1 ]; then
	fix="install Debian's python3-torch (scripts/setup.sh does)"
else
	fix="run scripts/test.sh, which installs a pinned torch 2.x from PyPI into a venv, or configure with meson -Dtorch2_python=PATH"
fi
if [ -z "$py" ]; then
	skip "${DDP_TORCH2_SKIP:-no interpreter with torch $major.x is configured}; $fix"
fi
if [ ! -x "$py" ]; then
	skip "'$py' is not an executable; $fix"
fi
# The version from the package metadata: importing torch takes seconds.
ver=$("$py" -c 'import importlib.metadata as m; print(m.version("torch"))' 2>/dev/null)
case "$ver" in
"$major".*) ;;
"") skip "'$py' has no torch; $fix" ;;
*) skip "'$py' has torch $ver, not $major.x; $fix" ;;
esac
exec "$py" "$@"
