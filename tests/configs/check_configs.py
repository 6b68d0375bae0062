"""Every configs/*.ini parses: ddplaunch --dry_run --config FILE exits 0 and
shows the job's settings; ddp-train's [train] section is skipped."""
import configparser
import glob
import os
import subprocess
import sys

ddplaunch, configs = sys.argv[1], sys.argv[2]
files = sorted(glob.glob(os.path.join(configs, "*.ini")))
assert files, "no job files in %s" % configs
failed = 0
for path in files:
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
    print("%s: %s" % (path, "; ".join(problems) if problems else "ok"))
    failed += bool(problems)
sys.exit(1 if failed else 0)
