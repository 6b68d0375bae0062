#!/bin/sh
# install_check.sh BUILD MESON PREFIX
#
# Exit 77 (skip) where /usr/bin/python3 has no torch to import it with.
# `meson install` into a temporary DESTDIR puts ddplaunch.torch in a folder
# that Debian's python3 searches (once the DESTDIR is stripped), the
# installed copy imports there, and its `python -m ddplaunch` runs the
# ddplaunch installed beside it.
set -eu
build=$1 meson=$2 prefix=$3
d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT
DESTDIR="$d" "$meson" install -C "$build" --no-rebuild --quiet >/dev/null
init=$(find "$d" -path '*/ddplaunch/torch/__init__.py' | head -1)
if [ -z "$init" ]; then
	echo "install_check: meson install put no ddplaunch/torch/__init__.py under $d" >&2
	exit 1
fi
site=${init#"$d"}
site=${site%/ddplaunch/torch/__init__.py}
case $site in
"$prefix"/*) ;;
*)
	echo "install_check: '$site' is not under the prefix '$prefix'" >&2
	exit 1
	;;
esac
/usr/bin/python3 - "$site" <<'PY'
import sys
site = sys.argv[1]
if site not in sys.path:
    sys.exit("install_check: /usr/bin/python3 does not search '%s' (its path: %s)" % (site, sys.path))
PY
# python -m ddplaunch runs the ddplaunch of the same install (PREFIX/bin).
found=$(PYTHONPATH="$d$site" /usr/bin/python3 -c 'import ddplaunch.__main__ as m; print(m.find_program())')
if [ "$found" != "$d$prefix/bin/ddplaunch" ]; then
	echo "install_check: python -m ddplaunch would run '$found', not '$d$prefix/bin/ddplaunch'" >&2
	exit 1
fi
PYTHONPATH="$d$site" /usr/bin/python3 -m ddplaunch --version
if ! /usr/bin/python3 -c 'import torch' 2>/dev/null; then
	echo "install_check: skipped the import: /usr/bin/python3 has no torch (install python3-torch)" >&2
	exit 77
fi
PYTHONPATH="$d$site" /usr/bin/python3 -c 'import ddplaunch.torch as t, sys; sys.exit(0 if t.__file__.startswith(sys.argv[1]) else "imported " + t.__file__)' "$d$site"
echo "install_check: ddplaunch.torch installed in $site, on /usr/bin/python3's path"
