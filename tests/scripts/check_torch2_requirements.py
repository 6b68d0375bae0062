"""Fails when a Python file of the tests imports a module that the torch 2.x
venv recipe (scripts/torch2-requirements.txt) does not install.

Every import statement of every .py file under tests/, configs/ and python/
is read (top level and inside functions alike, since a test may import
lazily); a module is fine when it is in Python's standard library, is one of
the tree's own modules (a .py file or a package folder anywhere under the
scanned folders: python/ddplaunch too), is named by the requirements file, or
is imported on a line that says `# not in the venv: WHY` (a benchmark's
optional anchor that runs under an interpreter of its own, such as torchft's).
Anything else is printed with
the files that import it, and the exit status is 1: add it to the
requirements file (scripts/test.sh then installs it into every venv, cached
ones included).

    check_torch2_requirements.py SOURCE_ROOT
"""
import ast
import os
import re
import sys

SCANNED = ("tests", "configs", "python")
OPTIONAL = "# not in the venv:"


def required_modules(path):
    """The import names of the distributions the requirements file lists."""
    names = set()
    with open(path) as f:
        for line in f:
            req = line.split("#", 1)[0].strip()
            if req:
                name = re.split(r"[=<>!~\[; ]", req, maxsplit=1)[0]
                names.add(re.sub(r"[-.]", "_", name).lower())
    return names


def python_files(root):
    for top in SCANNED:
        for folder, dirs, files in os.walk(os.path.join(root, top)):
            dirs[:] = [d for d in dirs if not d.startswith(".") and d != "__pycache__"]
            for name in files:
                if name.endswith(".py"):
                    yield os.path.join(folder, name)


def local_modules(root):
    """Module names the tree itself provides: every .py file and package."""
    names = set()
    for path in python_files(root):
        names.add(os.path.splitext(os.path.basename(path))[0])
        folder = os.path.dirname(path)
        if os.path.exists(os.path.join(folder, "__init__.py")):
            names.add(os.path.basename(folder))
    return names


def imported_modules(path):
    """(top-level module name, line) of every absolute import in PATH, but
    those on a line marked OPTIONAL."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    tree = ast.parse(text, filename=path)
    lines = text.splitlines()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)) and OPTIONAL in lines[node.lineno - 1]:
            continue
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name.split(".")[0], node.lineno
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.module.split(".")[0], node.lineno


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: check_torch2_requirements.py SOURCE_ROOT")
    root = sys.argv[1]
    requirements = os.path.join(root, "scripts", "torch2-requirements.txt")
    allowed = set(sys.stdlib_module_names) | local_modules(root) | required_modules(requirements)
    missing = {}
    count = 0
    for path in sorted(python_files(root)):
        count += 1
        for module, line in imported_modules(path):
            if module not in allowed:
                missing.setdefault(module, []).append(f"{os.path.relpath(path, root)}:{line}")
    for module, where in sorted(missing.items()):
        print(f"check_torch2_requirements: '{module}' is imported by {', '.join(where)} "
              f"but {os.path.relpath(requirements, root)} does not install it; add it there")
    if missing:
        sys.exit(1)
    print(f"check_torch2_requirements: {count} files; every import is the standard library's, "
          f"the tree's own or in {os.path.relpath(requirements, root)}")


if __name__ == "__main__":
    main()
