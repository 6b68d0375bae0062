#!/usr/bin/env bash
# Prepares a build for tests/gpu/device-check.sh on a GPU machine that has
# CUDA 13, PyTorch 2.x, meson and ninja but none of Debian's -dev packages.
# Run here, on the (CPU) build machine, from anywhere:
#
#   tests/gpu/prepare-device-bundle.sh [BUILD_DIR]      (default: build-device)
#
# It configures BUILD_DIR with -Dcuda=enabled (so a missing toolkit is an
# error, not a silent CPU build), builds it, copies the shared libraries the
# GPU machine lacks (libuv, inih, jansson, OpenBLAS + libgfortran/libquadmath,
# cmocka) into BUILD_DIR/device-libs, and records where the build was made in
# BUILD_DIR/device-bundle.txt. CUDA's own libraries (cudart, cuBLAS, NCCL)
# are taken from the GPU machine. Then carry BUILD_DIR (it is git-ignored)
# with the working tree and run there, from the repository root:
#
#   tests/gpu/device-check.sh BUILD_DIR [OUT_DIR]
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build-device}
if [ ! -f "$build/build.ninja" ]; then
	meson setup "$build" -Dcuda=enabled -Dtests=enabled --buildtype=release
fi
ninja -C "$build"

libs="$build/device-libs"
rm -rf "$libs"
mkdir -p "$libs"
# Every ELF file of the build, then the libraries they need that are not
# glibc, the C++ runtime or CUDA's (the GPU machine has newer ones).
find "$build" -type f \( -perm -u+x -o -name '*.so*' \) -not -path '*/device-libs/*' \
	-exec sh -c 'head -c4 "$1" | grep -q ELF && ldd "$1"' _ {} \; 2>/dev/null |
	awk '/=> \//{print $1, $3}' | sort -u |
	while read -r name path; do
		case "$name" in
		libuv.so* | libinih.so* | libjansson.so* | libopenblas.so* | libgfortran.so* | \
			libquadmath.so* | libcmocka.so* | libblas.so* | liblapack.so*)
			cp -L "$path" "$libs/$name"
			;;
		esac
	done

{
	echo "source_root=$PWD"
	echo "build_dir=$build"
	echo "made=$(date -u +%Y-%m-%dT%H:%M:%SZ) on $(uname -n)"
	echo "commit=$(git rev-parse HEAD 2>/dev/null || echo unknown)"
	echo "nvcc=$(nvcc --version 2>/dev/null | sed -n 's/.*release //p' || echo unknown)"
	echo "nccl_header=$(sed -n 's/^#define NCCL_VERSION_CODE //p' /usr/local/cuda/include/nccl.h 2>/dev/null)"
} >"$build/device-bundle.txt"
echo "prepared $build ($(du -sh "$build" | cut -f1)); libraries carried:"
ls -l "$libs"
echo "on the GPU machine, from the repository root: tests/gpu/device-check.sh $build [OUT_DIR]"
