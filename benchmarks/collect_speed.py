"""Measure collection speed on a GPU: timing items per second and ncu kernels per second.

Runs ``seer collect`` into a fresh dataset directory and reports the rates from the session
record the collector writes. The measurements are real and complete, so ``--merge-into``
can add them to a dataset afterwards instead of throwing them away.

    python benchmarks/collect_speed.py --gpu h100 --grid seer --shapes 1000 --math fma \
        --profile-shapes 0                      # timing: 1,000 shapes x 8 algorithms
    python benchmarks/collect_speed.py --gpu h100 --grid seer --shapes 40 --profile-shapes all
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

from seer.cli import main as seer_main
from seer.collect.store import RunStore
from seer.dataset.build import kernels_table


def run(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--gpu", required=True)
    p.add_argument("--grid", default="seer")
    p.add_argument("--shapes", type=int, default=1000)
    p.add_argument("--math", default="fma")
    p.add_argument("--profile-shapes", default="0")
    p.add_argument("--merge-into", type=Path, help="copy the raw records into this dataset's raw/ folder")
    p.add_argument("--report", type=Path, help="also write the figures as JSON here")
    p.add_argument("extra", nargs="*", help="more `seer collect` options, after --")
    args = p.parse_args(argv)
    root = Path(tempfile.mkdtemp(prefix="seer-bench-"))
    started = time.monotonic()
    code = seer_main(["collect", "--gpu", args.gpu, "--grid", args.grid, "--limit-shapes", str(args.shapes),
                      "--math", args.math, "--profile-shapes", args.profile_shapes,
                      "--data-dir", str(root), "--no-parse", *args.extra])
    wall = time.monotonic() - started
    dataset = next(root.iterdir())
    raw = dataset / "raw"
    session = [json.loads(line) for line in (raw / "sessions.jsonl").read_text().splitlines()][-1]
    counts = session["counts"]
    complete_kernels = len(kernels_table(RunStore(dataset))) if counts["kernels"] else 0
    figures = {
        "gpu": session["probe"]["device_name"], "grid": args.grid, "shapes": args.shapes,
        "math": args.math, "wall_seconds": round(wall, 1),
        "timing_items": counts["timing_rows"], "timing_seconds": session["timing_seconds"],
        "timing_items_per_second": round(counts["timing_rows"] / max(session["timing_seconds"], 1e-9), 2),
        "profiled_runs": counts["profiled_runs"], "profiling_seconds": session["profiling_seconds"],
        # A kernel counts once, when every metric group has profiled its run; a record per
        # group and kernel would count it once per group.
        "kernels": complete_kernels, "kernel_records": counts["kernels"],
        "kernels_per_second": round(complete_kernels / session["profiling_seconds"], 2)
        if session["profiling_seconds"] else None,
        "ncu_groups": session["ncu_groups"], "command": session["command"],
    }
    print(json.dumps(figures, indent=2))
    if args.report:
        args.report.write_text(json.dumps(figures, indent=2) + "\n")
    if args.merge_into:
        target = args.merge_into / "raw"
        target.mkdir(parents=True, exist_ok=True)
        for path in raw.glob("*.jsonl"):
            name = path.name if path.name != "sessions.jsonl" else None
            if name is None:
                with open(target / "sessions.jsonl", "a") as out:
                    out.write(path.read_text())
            else:
                shutil.copy(path, target / f"{path.stem}-bench{int(time.time())}.jsonl")
    return code


if __name__ == "__main__":
    sys.exit(run())
