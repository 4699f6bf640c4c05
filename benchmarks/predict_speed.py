"""Measure `seer predict` end to end on the CPU: process start to exit, peak memory, and where the time goes.

    python benchmarks/predict_speed.py --layers 10000 1000000 --math default,fma --repeat 3 \\
        --report benchmarks/results/h100-predict-speed.json
    python benchmarks/predict_speed.py --breakdown --layers 10000 1000000 --rows algorithm,layer \\
        --report benchmarks/results/h100-predict-speed-breakdown.json

For each size, a seeded sample of layers (SEER's ranges, the random grid and the training
networks' layers, drawn with replacement) is written to a file, and, for each math mode and
``--rows`` mode, ``seer predict FILE --math MATH --rows ROWS --out pred.csv`` runs as a fresh
process ``--repeat`` times: the wall time from process start to exit, and the process's peak
resident memory. Where numba walks the trees (an older checkout, or ``SEER_TREE_LOOP=numba``),
the first run of a fresh install also compiles the loop once (numba caches it); one untimed
warm-up run comes first so that every timed run starts as a user's second one does (Python's
bytecode cache written, the file in the OS's cache).

``--breakdown`` runs the same command inside a fresh process instead, its stages timed (wall
and CPU seconds, the CPU time of all its threads; Python's start is wall time only): Python's
own start (``python -c pass``), importing seer's command and the prediction stack (numpy,
the model classes; pandas too before 2026-11-29, when ``seer predict`` stopped needing it), building the tree loop (llvmlite; numba's loads from its cache), loading the
model, reading the layers, the shape features, the trees, the rest of the model's work (first-stage
glue, masks, seer's kernel plans), ranking into the tidy frame, the labels, writing, the summary,
and what is left (``other``: argument parsing, the progress line). Each stage counts its own
time only (the trees inside loading the model count as trees). Timers wrap seer's functions by
name, so the same script measures an older checkout (``PYTHONPATH=/path/to/checkout``).

Child processes run without ``PYTHONDONTWRITEBYTECODE``, as a user's do, so that Python's
bytecode cache makes imports as fast as they are after installation.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# numpy and seer are imported where they are used: a --breakdown child imports this module, and
# its stage "imports" must count them.

#: Stages of ``--breakdown``, in the order a run meets them.
STAGES = ("python start", "imports", "tree loop load", "model load", "reading", "features", "trees",
          "model other", "ranking", "labels", "writing", "summary", "other")


def sample_layers(count: int, seed: int = 0, distinct: bool = False) -> list:
    """``count`` layers drawn with replacement from SEER's ranges, the random grid and networks
    (about 9,600 distinct layers: draws repeat, as a network's layers do); with ``distinct``,
    every one different: the pool's layers in a seeded order at batch 1, then 2, and so on."""
    from dataclasses import replace

    import numpy as np

    from seer.layers.grids import networks_grid, random_grid, seer_grid

    pool = list(dict.fromkeys([*seer_grid(), *random_grid(), *networks_grid()]))
    rng = np.random.default_rng(seed)
    if distinct:
        order = rng.permutation(len(pool))
        return [replace(pool[order[i % len(pool)]], batch=1 + i // len(pool)) for i in range(count)]
    picks = rng.integers(0, len(pool), size=count)
    return [pool[i] for i in picks]


def _child_env() -> dict:
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def _measure(command: list[str]) -> tuple[float, int]:
    """Wall seconds and peak resident bytes of one child process."""
    runner = ("import resource, subprocess, sys, time; t = time.perf_counter(); "
              "code = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL).returncode; "
              "print(time.perf_counter() - t, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, code)")
    out = subprocess.run([sys.executable, "-c", runner, *command], capture_output=True, text=True, check=True,
                         env=_child_env())
    seconds, kib, code = out.stdout.split()
    if code != "0":
        raise RuntimeError(f"{' '.join(command)} exited with {code}: {out.stderr}")
    return float(seconds), int(kib) * 1024


# -- --breakdown: one run's stages, timed inside the process --------------------------------------
class _Clock:
    """Exclusive time per stage, wall and CPU (all threads): a timed call nested in another
    counts for its own stage only."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self.cpu_seconds: dict[str, float] = {}
        self._inner = [(0.0, 0.0)]  # per open call: the wall and CPU time its nested timed calls took

    def timed(self, stage: str, function):
        def wrapper(*args, **kwargs):
            self._inner.append((0.0, 0.0))
            started, cpu_started = time.perf_counter(), time.process_time()
            try:
                return function(*args, **kwargs)
            finally:
                elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu_started
                inner, inner_cpu = self._inner.pop()
                self.seconds[stage] = self.seconds.get(stage, 0.0) + elapsed - inner
                self.cpu_seconds[stage] = self.cpu_seconds.get(stage, 0.0) + cpu - inner_cpu
                outer, outer_cpu = self._inner[-1]
                self._inner[-1] = (outer + elapsed, outer_cpu + cpu)
        wrapper.__wrapped__ = function
        return wrapper

    def timed_iterator(self, stage: str, function):
        def wrapper(*args, **kwargs):
            iterator = self.timed(stage, function)(*args, **kwargs)
            step = self.timed(stage, lambda: next(iterator, _END))
            while (item := step()) is not _END:
                yield item
        return wrapper


_END = object()


def _stages(argv: list[str]) -> dict:
    """Run ``seer <argv>`` in this process with its stages timed (see the module docstring)."""
    started, cpu_started = time.perf_counter(), time.process_time()
    import seer.cli

    # What seer predict does before numpy loads (a checkout before 1.0 does nothing there).
    getattr(seer.cli, "_single_threaded_blas", lambda: None)()
    # The seer program pauses Python's garbage collector around its imports and the model's load,
    # and freezes what they made; seer.cli.main called from Python does not freeze (a checkout
    # before 2026-11-29 does neither).
    paused = getattr(seer.cli, "collector_paused", None)
    if paused is not None:
        seer.cli.collector_paused = lambda freeze: paused(freeze=True)
    with seer.cli.collector_paused(freeze=True) if paused is not None else contextlib.nullcontext():
        import numpy as np

        import seer.layers.files
        import seer.output
        import seer.predict.model
        import seer.predict.persist
        import seer.predict.predictors
        import seer.predict.trees as trees
    imported, cpu_imported = time.perf_counter(), time.process_time()
    # The compiled loop, built once (or loaded from numba's cache): in a plain run the first prediction does it.
    one = trees.TreeEnsemble(np.zeros(1, np.int32), np.zeros(1), np.full(1, -1, np.int32), np.zeros(1, bool),
                             np.zeros(1), np.zeros(1, np.int32), np.zeros(1, np.int32), np.zeros(1), 1)
    one.raw(np.zeros((1, 1)))
    loaded, cpu_loaded = time.perf_counter(), time.process_time()
    clock = _Clock()
    patches = [(seer.predict.persist, "load_model", "model load"), (seer.predict.predictors, "shape_features", "features"),
               (trees.TreeEnsemble, "raw", "trees"), (seer.predict.model.Model, "predict", "model other"),
               (seer.predict.model, "ranked", "ranking"), (seer.output, "with_labels", "labels"),
               (seer.output.PredictionWriter, "write", "writing"), (seer.output.PredictionWriter, "close", "writing"),
               (seer.output.PickSummary, "add", "summary")]
    # Since 2026-11-29 seer predict computes on tables of numpy arrays, without pandas (a checkout
    # before that has none of these).
    patches += [(owner, name, stage) for owner, name, stage in (
        (seer.predict.predictors, "feature_matrix", "features"), (seer.predict.model.Model, "predict_table", "model other"))
        if hasattr(owner, name)]
    for owner, name, stage in patches:
        setattr(owner, name, clock.timed(stage, getattr(owner, name)))
    seer.layers.files.iter_layer_chunks = clock.timed_iterator("reading", seer.layers.files.iter_layer_chunks)
    if hasattr(seer.layers.files, "iter_layer_tables"):
        seer.layers.files.iter_layer_tables = clock.timed_iterator("reading", seer.layers.files.iter_layer_tables)
    seer.output.iter_layer_chunks = seer.layers.files.iter_layer_chunks  # checked_layers reads through it
    code = clock.timed("other", seer.cli.main)(argv)
    if code != 0:
        raise RuntimeError(f"seer {' '.join(argv)} exited with {code}")
    seconds = {"imports": imported - started, "tree loop load": loaded - imported, **clock.seconds,
               "total in process": time.perf_counter() - started}
    cpu = {"imports": cpu_imported - cpu_started, "tree loop load": cpu_loaded - cpu_imported, **clock.cpu_seconds,
           "total in process": time.process_time() - cpu_started}
    return {"seconds": seconds, "cpu_seconds": cpu}


def _peak_mib() -> float:
    """This process's peak resident memory. Linux's ``VmHWM``, where there is one: ``ru_maxrss``
    also counts the parent's memory at the fork that made this process (this script's, holding
    a million layers, for --layers 1000000)."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _breakdown(source: Path, out: Path, math: str, rows: str) -> dict:
    """One run's stages in a fresh process, Python's start measured apart, and its peak memory."""
    python = min(_measure([sys.executable, "-c", "pass"])[0] for _ in range(5))
    argv = ["predict", str(source), "--math", math, "--out", str(out)] + (["--rows", rows] if rows != "algorithm" else [])
    runner = ("import json, sys; sys.path.insert(0, sys.argv[1]); import predict_speed; "
              "stages = predict_speed._stages(sys.argv[2:]); "
              "stages['peak_memory_mib'] = predict_speed._peak_mib(); print(json.dumps(stages))")
    done = subprocess.run([sys.executable, "-c", runner, str(Path(__file__).parent), *argv], capture_output=True,
                          text=True, env=_child_env())
    if done.returncode:
        raise RuntimeError(f"the breakdown run failed: {done.stderr[-2000:]}")
    measured = json.loads(done.stdout.splitlines()[-1])
    out = {"seconds_total": round(python + measured["seconds"]["total in process"], 3),
           "cpu_seconds_total": round(measured["cpu_seconds"]["total in process"], 3),
           "peak_memory_mib": round(measured["peak_memory_mib"], 1)}
    for kind in ("seconds", "cpu_seconds"):
        stages = {"python start": python if kind == "seconds" else 0.0, **measured[kind]}
        out[kind] = {stage: round(stages.get(stage, 0.0), 3) for stage in STAGES}
    return out


def run(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--layers", type=int, nargs="+", default=[10000, 1000000])
    p.add_argument("--math", default="default")
    p.add_argument("--rows", default="algorithm", help="--rows modes of seer predict, comma-separated")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--breakdown", action="store_true", help="time each stage of one run per repeat (see above)")
    p.add_argument("--distinct", action="store_true", help="every layer different (seer predicts each distinct "
                                                              "layer once: this is the worst case)")
    p.add_argument("--report", type=Path)
    args = p.parse_args(argv)
    from seer.layers.files import write_layers

    seer_command = [str(Path(sys.executable).with_name("seer"))]
    figures = {"command": "seer predict FILE --math MATH --rows ROWS --out pred.csv",
               "cpu": platform.processor() or platform.machine(), "cpus": os.cpu_count(),
               "python": platform.python_version(), "distinct_layers_only": args.distinct, "runs": []}
    if args.breakdown:
        figures["stages"] = list(STAGES)
    with tempfile.TemporaryDirectory() as scratch:
        for count in args.layers:
            started = time.perf_counter()
            source = Path(scratch) / f"layers-{count}.txt"
            layers = sample_layers(count, distinct=args.distinct)
            write_layers(source, layers)
            print(f"{count} layers written in {time.perf_counter() - started:.1f} s", file=sys.stderr)
            for math in args.math.split(","):
                for rows in args.rows.split(","):
                    out = Path(scratch) / "pred.csv"
                    command = [*seer_command, "predict", str(source), "--math", math, "--out", str(out)]
                    if rows != "algorithm":
                        command += ["--rows", rows]
                    _measure(command)  # warm-up: Python's bytecode cache, the OS's file cache (numba's cache)
                    run = {"layers": count, "distinct_layers": len(set(layers)), "math": math, "rows": rows}
                    if args.breakdown:
                        breakdowns = [_breakdown(source, out, math, rows) for _ in range(args.repeat)]
                        best = min(breakdowns, key=lambda b: b["seconds_total"])
                        run |= {"seconds_total": [b["seconds_total"] for b in breakdowns],
                                "cpu_seconds_total": [b["cpu_seconds_total"] for b in breakdowns], "fastest": best,
                                "stage_seconds_min": {s: min(b["seconds"][s] for b in breakdowns) for s in STAGES},
                                "peak_memory_mib": max(b["peak_memory_mib"] for b in breakdowns)}
                    else:
                        runs = [_measure(command) for _ in range(args.repeat)]
                        seconds = sorted(r[0] for r in runs)
                        run |= {"seconds": [round(s, 3) for s in seconds], "seconds_min": round(seconds[0], 3),
                                "seconds_median": round(seconds[len(seconds) // 2], 3),
                                "seconds_max": round(seconds[-1], 3),
                                "peak_memory_mib": round(max(r[1] for r in runs) / 2**20, 1)}
                    run["prediction_rows"] = sum(1 for _ in open(out)) - 1
                    figures["runs"].append(run)
                    print(json.dumps(run), file=sys.stderr)
    print(json.dumps(figures, indent=2))
    if args.report:
        args.report.write_text(json.dumps(figures, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(run())
