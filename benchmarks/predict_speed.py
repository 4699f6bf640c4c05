"""Measure `seer predict` end to end on the CPU: process start to exit, and peak memory.

    python benchmarks/predict_speed.py --layers 10000 1000000 --math default,fma --repeat 3 \\
        --report benchmarks/results/h100-predict-speed.json

For each size, a seeded sample of layers (SEER's ranges, the random grid and the training
networks' layers, drawn with replacement) is written to a file, and, for each math mode,
``seer predict FILE --math MATH --out pred.csv`` runs as a fresh process ``--repeat``
times: the wall time from process start to exit, and the process's peak resident memory. The first
run of a fresh install also compiles the tree loop once (numba caches it); one untimed
warm-up run comes first so that every timed run starts as a user's second one does.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from seer.layers.files import write_layers
from seer.layers.grids import networks_grid, random_grid, seer_grid


def sample_layers(count: int, seed: int = 0) -> list:
    """``count`` layers drawn with replacement from SEER's ranges, the random grid and networks."""
    pool = [*seer_grid(), *random_grid(), *networks_grid()]
    picks = np.random.default_rng(seed).integers(0, len(pool), size=count)
    return [pool[i] for i in picks]


def _measure(command: list[str]) -> tuple[float, int]:
    """Wall seconds and peak resident bytes of one child process."""
    runner = ("import resource, subprocess, sys, time; t = time.perf_counter(); "
              "code = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL).returncode; "
              "print(time.perf_counter() - t, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, code)")
    out = subprocess.run([sys.executable, "-c", runner, *command], capture_output=True, text=True, check=True)
    seconds, kib, code = out.stdout.split()
    if code != "0":
        raise RuntimeError(f"{' '.join(command)} exited with {code}: {out.stderr}")
    return float(seconds), int(kib) * 1024


def run(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--layers", type=int, nargs="+", default=[10000, 1000000])
    p.add_argument("--math", default="default")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--report", type=Path)
    args = p.parse_args(argv)
    seer_command = [str(Path(sys.executable).with_name("seer"))]
    figures = {"command": "seer predict FILE --math MATH --out pred.csv",
               "cpu": platform.processor() or platform.machine(), "cpus": os.cpu_count(),
               "python": platform.python_version(), "runs": []}
    with tempfile.TemporaryDirectory() as scratch:
        for count in args.layers:
            started = time.perf_counter()
            source = Path(scratch) / f"layers-{count}.txt"
            write_layers(source, sample_layers(count))
            print(f"{count} layers written in {time.perf_counter() - started:.1f} s", file=sys.stderr)
            for math in args.math.split(","):
                out = Path(scratch) / "pred.csv"
                command = [*seer_command, "predict", str(source), "--math", math, "--out", str(out)]
                _measure(command)  # warm-up: numba's cache, the OS's file cache
                runs = [_measure(command) for _ in range(args.repeat)]
                seconds = sorted(r[0] for r in runs)
                rows = sum(1 for _ in open(out)) - 1
                figures["runs"].append({
                    "layers": count, "math": math, "seconds": [round(s, 3) for s in seconds],
                    "seconds_min": round(seconds[0], 3), "seconds_median": round(seconds[len(seconds) // 2], 3),
                    "seconds_max": round(seconds[-1], 3), "peak_memory_mib": round(max(r[1] for r in runs) / 2**20, 1),
                    "prediction_rows": rows})
                print(json.dumps(figures["runs"][-1]), file=sys.stderr)
    print(json.dumps(figures, indent=2))
    if args.report:
        args.report.write_text(json.dumps(figures, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(run())
