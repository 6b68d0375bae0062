#!/usr/bin/env python3
"""test_agent_layers.py NM LIBLAUNCHERAGENT.a - the calls between the agent's files, read from the
library's objects with nm, follow docs/architecture.md's launcher/agent/ line:

- no file calls the state machine, agent.c and agent_machine_workers.c (the machine calls the
  others, never the other way round; its two halves call each other);
- the watch for hangs (agent_hang.c, agent_hang_learn.c, agent_hang_rare.c,
  agent_hang_waiters.c) calls nothing of the agent's other files: it reports through the
  functions of its struct agent_hang_host, given at start.

Exits 0 when they hold, 1 naming each call that breaks them.
"""
import re
import subprocess
import sys
from collections import defaultdict

MACHINE = {"agent.c.o", "agent_machine_workers.c.o"}
HANG = {"agent_hang.c.o", "agent_hang_learn.c.o", "agent_hang_rare.c.o",
        "agent_hang_waiters.c.o"}


def members(nm, lib, flags):
    """member -> the global symbols nm lists for it with flags."""
    out = subprocess.run([nm, "-A", *flags, lib], check=True, capture_output=True, text=True).stdout
    got = defaultdict(set)
    for line in out.splitlines():
        # "LIB:[DIR/]MEMBER.o:[ADDR] T NAME" (a thin archive names its members' paths)
        where = re.search(r"([^/:\s]+\.o):", line)
        words = line.split()
        if where and len(words) >= 2:
            got[where.group(1)].add(words[-1])
    return got


def main():
    nm, lib = sys.argv[1], sys.argv[2]
    defined = members(nm, lib, ["--defined-only", "-g"])
    wanted = members(nm, lib, ["-u"])
    owner = {s: m for m, syms in defined.items() for s in syms}
    if not MACHINE <= set(defined) or not HANG <= set(defined):
        print(f"{lib}: the agent's objects are not all there: {sorted(defined)}")
        return 1
    bad = []
    for member, syms in sorted(wanted.items()):
        for s in sorted(syms):
            to = owner.get(s)
            if not to or to == member:
                continue
            if to in MACHINE and member not in MACHINE:
                bad.append(f"{member} calls {s} of {to[:-2]}: only the machine (agent.c, "
                           "agent_machine_workers.c) drives it")
            elif member in HANG and to not in HANG:
                bad.append(f"{member} calls {s} of {to}: the hang watch calls back only "
                           "through struct agent_hang_host")
    for b in bad:
        print(b)
    print(f"{len(bad)} call(s) against the layers" if bad else "the agent's layers hold")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
