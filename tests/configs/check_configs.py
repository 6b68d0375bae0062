"""Every configs/*.ini is checked and run, as its comment says to run it:

  1. ddplaunch --dry_run --config FILE exits 0 and shows the job's settings
     (ddp-train's [train] section is skipped); no line over 198 characters;
  2. the job runs for real from a copy of the source root's configs/ and
     data/ (so its logs and checkpoints stay out of the tree), on a port the
     kernel picks, and exits 0 with what its program prints at the end.

    check_configs.py DDPLAUNCH CONFIGS_DIR DDP_TRAIN

The Python examples need torch in PYTHON_EXEC (this interpreter by default);
without it they are only dry-run, and the output says so."""
import configparser
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile

ddplaunch, configs, ddp_train = sys.argv[1], sys.argv[2], sys.argv[3]
python = os.environ.get("PYTHON_EXEC", sys.executable)
has_torch = subprocess.run([python, "-c", "import torch"], capture_output=True).returncode == 0

# What a run of each file prints on success; a file not listed needs exit 0.
EXPECT = {
    "launch-basic.ini": ["[rank 0]: done: accuracy"],
    "launch-legacy.ini": ["[rank 0]: local rank 0 of 2, batch size 32: ok",
                          "[rank 1]: local rank 1 of 2, batch size 32: ok"],
    "launch-restarts.ini": ["[rank 0]: epoch 50/50 loss", "[rank 0]: done: accuracy"],
    "launch-digits.ini": ["[rank 0]: ddp-train: done: 440 steps"],
    "digits.ini": ["[rank 0]: ddp-train: done: 440 steps"],
}


def dry_run(path):
    r = subprocess.run([ddplaunch, "--dry_run", "--config", path], capture_output=True,
                       text=True, timeout=30)
    ini = configparser.ConfigParser(interpolation=None, strict=False)
    ini.read(path)
    problems = []
    if r.returncode != 0:
        problems.append("exit %d: %s" % (r.returncode, r.stderr.strip()))
    got = dict(line.split(" = ", 1) for line in r.stdout.splitlines() if " = " in line)
    if ini.has_section("launch") and ini.has_option("launch", "nproc_per_node"):
        if got.get("nproc_per_node") != ini.get("launch", "nproc_per_node"):
            problems.append("nproc_per_node %r" % got.get("nproc_per_node"))
    if ini.has_section("program"):
        program = ini.get("program", "program")
        if program not in got.get("command", ""):
            problems.append("command %r lacks %r" % (got.get("command"), program))
    for line in open(path):
        if len(line.rstrip("\n")) > 198:
            problems.append("a line over 198 characters")
    return ini, problems


def launch(root, name, ini):
    """Runs the job as its comment says (from the source root); a file
    with no [program] (ddp-train's) gets ddp-train with the same file."""
    argv = [ddplaunch, "--master_port=0", "--config", "configs/" + name]
    if not ini.has_section("program"):
        argv += ["ddp-train", "--config", "configs/" + name]
    env = dict(os.environ, PYTHON_EXEC=python, TMPDIR=root,
               PATH=os.path.dirname(os.path.abspath(ddp_train)) + os.pathsep + os.environ["PATH"])
    return subprocess.run(argv, cwd=root, env=env, capture_output=True, text=True, timeout=300)


def check_restarts(root, ini):
    """launch-restarts.ini: the summary in logs/restarts/latest, the
    checkpoint, and a second run that resumes from it into a new log dir."""
    problems = []
    latest = os.path.join(root, "logs", "restarts", "latest")
    first_dir = os.readlink(latest)
    with open(os.path.join(latest, "summary.json")) as f:
        if json.load(f)["exit_code"] != 0:
            problems.append("summary.json: exit_code is not 0")
    if not os.path.exists(os.path.join(root, "checkpoints", "restarts", "checkpoint.pt")):
        problems.append("no checkpoint in checkpoints/restarts")
    again = launch(root, "launch-restarts.ini", ini)
    if again.returncode != 0 or "resuming after epoch 50" not in again.stdout:
        problems.append("second run: exit %d, no resume: %s" % (again.returncode,
                                                                 again.stderr[-500:]))
    if os.readlink(latest) == first_dir:
        problems.append("the second run did not get a log directory of its own")
    return problems


def run_for_real(root, path, ini):
    name = os.path.basename(path)
    program = ini.get("program", "program") if ini.has_section("program") else "ddp-train"
    if program.endswith(".py") and not has_torch:
        return [], "not run: no torch in %s" % python
    r = launch(root, name, ini)
    if r.returncode != 0:
        return ["run: exit %d: %s" % (r.returncode, r.stderr[-1500:])], ""
    problems = ["run: no %r in its output" % want for want in EXPECT.get(name, [])
                if want not in r.stdout + r.stderr]
    if name == "launch-restarts.ini" and not problems:
        problems += check_restarts(root, ini)
    return problems, "ran"


def main():
    files = sorted(glob.glob(os.path.join(configs, "*.ini")))
    assert files, "no job files in %s" % configs
    failed = 0
    with tempfile.TemporaryDirectory(prefix="ddplaunch_configs_") as root:
        shutil.copytree(configs, os.path.join(root, "configs"))
        shutil.copytree(os.path.join(configs, "..", "data"), os.path.join(root, "data"))
        for path in files:
            ini, problems = dry_run(path)
            note = ""
            if not problems:
                more, note = run_for_real(root, path, ini)
                problems += more
            print("%s: %s%s" % (path, "; ".join(problems) if problems else "ok",
                                " (%s)" % note if note and not problems else ""), flush=True)
            failed += bool(problems)
    sys.exit(1 if failed else 0)


main()
