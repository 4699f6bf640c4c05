"""What profiling costs under each ncu setting, for one fixed set of runs.

Times the given shapes once, then runs the profiling worker on the same successful runs
under ncu once per configuration (replay mode and metric list) and reports the wall time,
the rows ncu wrote (kernels, or ranges in range replay) and rows per second. Run on a GPU:

    python benchmarks/ncu_cost.py --gpu h100 --grid quick --shapes 10 \
        --config kernel:all --config kernel/none:memory --config kernel:launch+gpu__time_duration.sum

A configuration is ``REPLAY[/CACHE]:METRICS``: replay mode (kernel, application, range),
optional cache control (all, none; default all) and metrics joined by ``+``. With
``--passes``, each configuration is first run on the first shape alone without ``--csv``,
where ncu prints how many replay passes each kernel took.
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from seer.algorithms import algorithm_names
from seer.cli import main as seer_main
from seer.collect import ncu
from seer.collect.children import child_env, worker_command
from seer.collect.orchestrate import CollectOptions
from seer.collect.plan import select_evenly
from seer.collect.profiling import profile_items
from seer.collect.protocol import write_plan
from seer.collect.store import RunStore
from seer.hardware.gpus import get_gpu_spec
from seer.layers.grids import resolve_grids, write_shapes_file
from seer.metrics import METRIC_BY_COLUMN, PROFILE_GROUPS, RETIRED_GROUPS, ncu_metric_names
from seer.schema import MATH_MODE_NAMES


def metric_list(spec: str) -> list[str]:
    """Metrics for 'a+b+...': each part a profiling group (current or retired), 'all', 'launch'
    or an ncu metric name."""
    names: list[str] = []
    for part in spec.split("+"):
        if part in PROFILE_GROUPS:
            names += ncu_metric_names(part)
        elif part in RETIRED_GROUPS:  # to measure again what earlier collections ran
            names += [METRIC_BY_COLUMN[column].ncu_name for column in RETIRED_GROUPS[part]]
        elif part == "all":
            names += ncu_metric_names()
        elif part == "launch":
            names += [n for n in ncu_metric_names() if n.startswith("launch__")]
        else:
            names.append(part)
    return list(dict.fromkeys(names))


def run(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--gpu", required=True)
    p.add_argument("--grid", default="quick")
    p.add_argument("--shapes", type=int, default=10)
    p.add_argument("--evenly", type=int, metavar="N",
                   help="take the shapes from the profiling order of `--profile-shapes N` "
                        "(seer.collect.plan.select_evenly) instead of the grid's first ones")
    p.add_argument("--skip", type=int, default=0, help="with --evenly: skip this many shapes first")
    p.add_argument("--keep-csv", type=Path, help="copy each configuration's ncu CSV here, gzipped")
    p.add_argument("--config", action="append", required=True, help="replay_mode:metrics")
    p.add_argument("--report", type=Path)
    p.add_argument("--config-timeout", type=float, default=None,
                   help="give up on a configuration after this many seconds (it is then reported as slow)")
    p.add_argument("--passes", action="store_true",
                   help="also report ncu's replay passes per kernel for each configuration")
    args = p.parse_args(argv)
    base = Path(tempfile.mkdtemp(prefix="seer-ncu-cost-"))
    if args.evenly:
        picked = select_evenly(resolve_grids(args.grid), args.evenly)[args.skip: args.skip + args.shapes]
        grid = str(base / "shapes.txt")
        write_shapes_file(grid, [gs.shape for gs in picked])
    else:
        grid = args.grid
    if seer_main(["collect", "--gpu", args.gpu, "--grid", grid, "--limit-shapes", str(args.shapes),
                  "--no-parse", "--data-dir", str(base), "--profile-shapes", "0"]):
        return 1
    shapes = resolve_grids(grid)[: args.shapes]
    dataset_dir = next(p for p in base.iterdir() if p.is_dir())
    options = CollectOptions(gpu=get_gpu_spec(args.gpu), shapes=shapes, maths=list(MATH_MODE_NAMES),
                             algos=algorithm_names("cudnn"), dataset_dir=dataset_dir)
    plan = profile_items(options, RunStore(dataset_dir))
    plan_file = base / "plan.jsonl"
    write_plan(plan_file, plan)
    runs = sum(len(w.items) for w in plan)
    ncu_path = ncu.find_ncu()
    results = []
    first_shape = base / "plan-first.jsonl"
    write_plan(first_shape, plan[:1])
    for i, config in enumerate(args.config):
        mode, spec = config.split(":", 1)
        replay, _, cache = mode.partition("/")
        csv = base / f"cfg{i}.csv"
        app = [*worker_command(), "profile", "--plan", str(plan_file), "--results", str(base / f"ev{i}.jsonl"),
               "--workspace-cap", str(8 * 2**30)]
        command = ncu.ncu_command(ncu_path, csv, app, replay_mode=replay, metrics=metric_list(spec),
                                  cache_control=cache or "all")
        passes = replay_passes(command, first_shape, args.config_timeout) if args.passes else None
        started = time.monotonic()
        try:
            proc = subprocess.run(command, env=child_env(), capture_output=True, text=True,
                                  timeout=args.config_timeout)
        except subprocess.TimeoutExpired:
            results.append({"config": config, "runs": runs, "seconds": f"> {args.config_timeout}"}
                           | ({"passes": passes} if passes is not None else {}))
            print(json.dumps(results[-1]), flush=True)
            continue
        seconds = time.monotonic() - started
        if args.keep_csv and csv.exists():
            args.keep_csv.mkdir(parents=True, exist_ok=True)
            with open(csv, "rb") as src, gzip.open(args.keep_csv / f"ncu-cost-{i}.csv.gz", "wb") as dst:
                shutil.copyfileobj(src, dst)
        try:
            rows = len(ncu.read_ncu_csv(csv)) if csv.exists() else 0
        except Exception as exc:  # a configuration ncu refuses is a result too
            rows = 0
            proc.stdout += f"\n==ERROR== {exc}"
        errors = [l for l in (proc.stdout + (csv.read_text() if csv.exists() else "")).splitlines()
                  if l.startswith("==ERROR==") or l.startswith("==WARNING==")][:3]
        results.append({"config": config, "runs": runs, "rows": rows, "seconds": round(seconds, 1),
                        "rows_per_second": round(rows / seconds, 2), "exit": proc.returncode,
                        "messages": errors} | ({"passes": passes} if passes is not None else {}))
        print(json.dumps(results[-1]), flush=True)
    if args.report:
        args.report.write_text(json.dumps(results, indent=2) + "\n")
    return 0


def replay_passes(command: list[str], plan: Path, timeout: float | None) -> dict:
    """Replay passes per kernel, from ncu's progress lines (which ``--csv`` suppresses).

    Also the seconds this one-shape run took: against the full run, that separates the
    fixed cost of starting ncu and the worker from the cost per kernel.
    """
    command = list(command)
    command[command.index("--plan") + 1] = str(plan)
    for flag, has_value in (("--csv", False), ("--page", True), ("--log-file", True)):
        i = command.index(flag)
        del command[i: i + 1 + has_value]
    started = time.monotonic()
    try:
        proc = subprocess.run(command, env=child_env(), capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"seconds": f"> {timeout}"}
    passes = [int(n) for n in re.findall(r"100% - (\d+) pass", proc.stdout)]
    return {"kernels": len(passes), "seconds": round(time.monotonic() - started, 1),
            "min": min(passes, default=None), "max": max(passes, default=None)}


if __name__ == "__main__":
    sys.exit(run())
