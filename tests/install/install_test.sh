#!/bin/sh
# install_test.sh BUILD PREFIX BINDIR LIBDIR MESON PKG_CONFIG NM SOURCE CC [CC ARGS...]
#
# Installs BUILD into a temporary DESTDIR (meson install --no-rebuild),
# checks that the installed libddp.so exports exactly the functions the
# installed ddp.h declares (names taken from the preprocessed header, so a
# declaration that lost its DDP_API shows up as missing), then builds SOURCE against the installed libddp using only
# `pkg-config --cflags --libs ddp` (PKG_CONFIG_PATH at the installed ddp.pc,
# PKG_CONFIG_SYSROOT_DIR at the DESTDIR, so the .pc's /usr/local/... paths
# resolve inside it), and runs it as 2 ranks under the installed ddplaunch.
# The program reports where libddp and its parent (ddp-exec) came from;
# both must be the installed copies. PREFIX, BINDIR and LIBDIR are the
# build's options (BINDIR and LIBDIR relative to PREFIX or absolute).
set -eu

build=$1 prefix=$2 bindir=$3 libdir=$4 meson=$5 pkgconfig=$6 nm=$7 src=$8
shift 8

case $bindir in /*) ;; *) bindir=$prefix/$bindir ;; esac
case $libdir in /*) ;; *) libdir=$prefix/$libdir ;; esac
tmp=$(mktemp -d "${TMPDIR:-/tmp}/ddp-install-XXXXXX")
trap 'rm -rf "$tmp"' EXIT
dest=$tmp/root

fail() {
	echo "install test: $*" >&2
	exit 1
}

if ! "$meson" install -C "$build" --no-rebuild --destdir "$dest" >"$tmp/install.log" 2>&1; then
	cat "$tmp/install.log" >&2
	fail "meson install --destdir failed"
fi
for f in "$bindir/ddplaunch" "$libdir/libddp.so.0" "$libdir/libddp.so" \
	"$libdir/pkgconfig/ddp.pc" "$prefix/include/ddp.h"; do
	[ -e "$dest$f" ] || fail "'$f' was not installed"
done

# The API is ddp.h's functions: every ddp_NAME( left once the preprocessor
# has removed the comments (function-pointer members read "(*name)(" and
# macros are expanded away). The library's dynamic symbols must be exactly
# these: a missing one breaks programs, an extra one is internals leaking.
"$@" -E -P -x c "$dest$prefix/include/ddp.h" >"$tmp/ddp.i" ||
	fail "the installed ddp.h does not preprocess on its own"
grep -oE '\bddp_[A-Za-z0-9_]+[[:space:]]*\(' "$tmp/ddp.i" | tr -d ' (' | sort -u >"$tmp/api"
"$nm" -D --defined-only "$dest$libdir/libddp.so.0" | awk '{ print $NF }' | sort -u >"$tmp/exported"
[ "$(wc -l <"$tmp/api")" -ge 40 ] || fail "found only $(wc -l <"$tmp/api") functions in ddp.h"
if ! cmp -s "$tmp/api" "$tmp/exported"; then
	echo "declared in ddp.h but not exported: $(comm -23 "$tmp/api" "$tmp/exported" | xargs)" >&2
	echo "exported but not in ddp.h: $(comm -13 "$tmp/api" "$tmp/exported" | xargs)" >&2
	fail "libddp.so's exported symbols are not ddp.h's functions"
fi
echo "libddp.so exports ddp.h's $(wc -l <"$tmp/api") functions and nothing else"

PKG_CONFIG_PATH=$dest$libdir/pkgconfig
PKG_CONFIG_SYSROOT_DIR=$dest
export PKG_CONFIG_PATH PKG_CONFIG_SYSROOT_DIR
[ "$("$pkgconfig" --variable=pcfiledir ddp)" = "$dest$libdir/pkgconfig" ] ||
	fail "pkg-config found another ddp.pc: $("$pkgconfig" --variable=pcfiledir ddp)"
flags=$("$pkgconfig" --cflags --libs ddp)
echo "pkg-config --cflags --libs ddp: $flags"
case $flags in *"-I$dest"*) ;; *) fail "the cflags do not point into the DESTDIR" ;; esac
case $flags in *"-L$dest"*) ;; *) fail "the libs do not point into the DESTDIR" ;; esac
# shellcheck disable=SC2086 # the flags are words
"$@" -o "$tmp/install_check" "$src" $flags || fail "cannot build against the installed libddp"

# Only the installed libddp: meson test points LD_LIBRARY_PATH at the build's.
LD_LIBRARY_PATH=$dest$libdir
DDP_BACKEND=cpu
DDP_TIMEOUT_MS=60000
export LD_LIBRARY_PATH DDP_BACKEND DDP_TIMEOUT_MS
"$dest$bindir/ddplaunch" --standalone --nproc_per_node=2 "$tmp/install_check" >"$tmp/out" 2>&1 ||
	{
		cat "$tmp/out" >&2
		fail "the 2-rank job under the installed ddplaunch failed"
	}
cat "$tmp/out"
for r in 0 1; do
	grep -q "rank $r of 2: all-reduce 3 ok, store ok" "$tmp/out" || fail "rank $r did not report"
	grep -q "rank $r libddp $dest$libdir/libddp.so" "$tmp/out" ||
		fail "rank $r did not load the installed libddp"
	grep -q "rank $r parent $dest.*/ddp-exec\$" "$tmp/out" ||
		fail "rank $r was not started by the installed ddp-exec"
done
echo "install test: ok"
