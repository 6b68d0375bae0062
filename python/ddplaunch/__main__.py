"""`python -m ddplaunch ARGS...`: runs the ddplaunch program installed with
this package, as `python -m torch.distributed.run` runs torchrun.

The program is the one this copy of the package was installed with: the
`bin/ddplaunch` that pip recorded for it (a wheel, in a venv, --user or a
prefix), else the bin/ of the prefix that `meson install` put it under, else
the one next to the interpreter, else the first on PATH. The process becomes
ddplaunch (exec): its signals, exit status and output are ddplaunch's.
"""
import importlib.metadata
import os
import shutil
import sys
from pathlib import Path

PROGRAM = "ddplaunch"


def _recorded(site):
    """The bin/ddplaunch that pip's record of the ddplaunch distribution in
    SITE (the folder holding this package) names, or None."""
    try:
        dists = list(importlib.metadata.distributions(path=[str(site)]))
    except OSError:
        return None
    for dist in dists:
        if (dist.metadata["Name"] or "").lower() != PROGRAM:
            continue
        for f in dist.files or ():
            if f.parts[-2:] == ("bin", PROGRAM):
                return Path(os.path.normpath(dist.locate_file(f)))
    return None


def find_program():
    """The path of the ddplaunch program that belongs to this package, or
    None."""
    site = Path(__file__).resolve().parent.parent
    candidates = [
        _recorded(site),
        # meson install: PREFIX/lib/pythonX.Y/{dist,site}-packages/ddplaunch
        site.parents[2] / "bin" / PROGRAM if len(site.parents) > 2 else None,
        Path(sys.executable).parent / PROGRAM,
    ]
    for c in candidates:
        if c is not None and os.access(c, os.X_OK) and c.is_file():
            return str(c)
    return shutil.which(PROGRAM)


def main():
    path = find_program()
    if path is None:
        sys.stderr.write(
            "python -m ddplaunch: cannot find the ddplaunch program installed with "
            "this package (%s); install it with `pip install` from a ddplaunch "
            "clone or wheel\n" % Path(__file__).resolve().parent
        )
        return 127
    # .py workers run under this interpreter (as python -m torch.distributed.run's
    # do), not the first python3 on PATH: a venv's python need not be on PATH
    os.environ.setdefault("PYTHON_EXEC", sys.executable)
    os.execv(path, [path] + sys.argv[1:])
    return 127  # not reached


if __name__ == "__main__":
    sys.exit(main())
