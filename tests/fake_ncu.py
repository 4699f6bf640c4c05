#!/usr/bin/env python3
"""A stand-in for ncu in CPU tests: runs the app, then replays rows of a REAL ncu capture.

It writes, for the runs in the worker's plan, the rows of the ncu raw CSV named by
FAKE_NCU_CAPTURE (captured on the H100), keeping only the requested metric columns, as
ncu itself would. FAKE_NCU_DROP=<metric group's first metric> drops one kernel row from
the run in that ncu invocation, to test that inconsistent groups are refused.

Like ncu, whose launcher starts the application through processes of its own, it starts
the app through a shell that the orchestrator's parent-death signal does not reach.
"""

import gzip
import json
import os
import re
import subprocess
import sys

args = sys.argv[1:]
if args == ["--version"]:
    print("NVIDIA (R) Nsight Compute Command Line Profiler\nVersion 2025.3.1.0 (fake for tests)")
    sys.exit(0)
log = args[args.index("--log-file") + 1]
metrics = args[args.index("--metrics") + 1].split(",")
app = args[args.index("--log-file") + 2:]
code = subprocess.call(["sh", "-c", '"$@"; exit $?', "sh", *app])
plan = app[app.index("--plan") + 1]
events = app[app.index("--results") + 1]
keys = set()
for line in open(events):
    e = json.loads(line)
    if e.get("event") == "profiled" and e.get("status") == "ok":
        keys.add(f"seer_{e['shape_id']}_{e['math']}_{e['algo']}")
lines = gzip.open(os.environ["FAKE_NCU_CAPTURE"], "rt").read().splitlines()
start = next(i for i, line in enumerate(lines) if line.startswith('"ID"'))


def cells(line):
    return next(__import__("csv").reader([line]))


header = cells(lines[start])
base = [i for i, name in enumerate(header) if "__" not in name or name.startswith("device__")]
wanted = base + [header.index(m) for m in metrics if m in header]
rx = re.compile(r"seer_[0-9a-f]{12}_[a-z]+_[A-Z_]+")
rows = [lines[start], lines[start + 1]]
dropped = False
for line in lines[start + 2:]:
    m = rx.search(line)
    if m and m.group(0) in keys:
        if os.environ.get("FAKE_NCU_DROP") in metrics and not dropped and "FFT_TILING" in m.group(0):
            dropped = True
            continue
        rows.append(line)


def fmt(values):
    return ",".join('"' + v.replace('"', '""') + '"' for v in values)


with open(log, "w") as out:
    out.write("==PROF== Connected to process 1 (python3)\n")
    for line in rows:
        c = cells(line)
        out.write(fmt([c[i] for i in wanted]) + "\n")
    out.write("==PROF== Disconnected from process 1\n")
sys.exit(code)
