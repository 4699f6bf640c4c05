"""Run a collection: probe the GPU, time every item, then profile the chosen shapes.

With ``census=True`` it instead asks cuDNN, for every shape, which algorithms it supports
and what workspace each needs (no kernel runs): labels for the models' first stage, cheap
enough to cover far more shapes than timing can.

The orchestrator never touches CUDA itself. It starts the GPU worker as a child process
(:mod:`seer.collect.children`), feeds it a plan file and reads the events it appends to
a results file, writing each finished record to the store at once. When a child dies or
hangs, the item it was on is recorded as an error and a fresh child takes the rest; when
the user presses Ctrl-C, everything finished is already on disk and a rerun resumes.
Profiling under ncu is :mod:`seer.collect.profiling`.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable, Sequence

from rich.console import Console

import seer
from seer.algorithms import PASSES, current_revision, get_algorithm
from seer.collect import ncu as ncu_mod
from seer.collect import children
from seer.collect.children import Deadline, run_child
from seer.collect.lock import CollectionLock
from seer.collect.plan import CollectOptions, build_plan, fits_in_memory, shard, shard_shape_ids, without
from seer.collect.profiling import Profiler
from seer.collect.protocol import ShapeWork, census_item, census_pass, finished_item, write_plan
from seer.collect.records import MAX_SPREAD, trace_totals
from seer.collect.scratch import scratch_folder
from seer.collect.store import RunStore, default_tag, first_grids, job_name, keys_done, latest_records
from seer.errors import EnvironmentProblem
from seer.hardware.gpus import GPUSpec, match_device
from seer.layers.grids import GridShape
from seer.progress import CollectionProgress
from seer.schema import CENSUS_KEY, RUN_KEY

#: ``--retry`` word that re-times successful runs whose repetitions spread too widely.
RETRY_UNSTABLE = "unstable"


def unstable_keys(timing, max_spread: float = MAX_SPREAD) -> set[tuple]:
    """Keys of successful runs whose interquartile range exceeds ``max_spread`` of the median
    (see :mod:`seer.gpu.timing`): what ``--retry unstable`` measures again."""
    if timing.empty or "time_ms_iqr" not in timing.columns:
        return set()
    ok = timing[timing["status"] == "ok"]
    wide = ok[ok["time_ms_iqr"] > max_spread * ok["time_ms"]]
    return set(wide[list(RUN_KEY)].itertuples(index=False, name=None))


#: ``--retry`` word that re-times successful runs without a kernel trace (timed before
#: tracing existed, or where it failed), so that they get one.
RETRY_UNTRACED = "untraced"


def untraced_keys(timing) -> set[tuple]:
    """Keys of successful runs whose record holds no successful kernel trace: what
    ``--retry untraced`` measures again."""
    if timing.empty:
        return set()
    ok = timing[timing["status"] == "ok"]
    if "trace_status" in ok.columns:
        ok = ok[ok["trace_status"] != "ok"]
    return set(ok[list(RUN_KEY)].itertuples(index=False, name=None))


#: ``--retry`` word that re-times successful runs without an energy reading (with ``--energy``).
RETRY_ENERGY = "energy"


def no_energy_keys(timing) -> set[tuple]:
    """Keys of successful runs whose record holds no energy reading: what ``--retry energy``
    measures again."""
    if timing.empty:
        return set()
    ok = timing[timing["status"] == "ok"]
    if "energy_mj" in ok.columns:
        ok = ok[ok["energy_mj"].isna()]
    return set(ok[list(RUN_KEY)].itertuples(index=False, name=None))


#: ``--retry`` word that re-times successful one-kernel runs whose timed time per call is
#: more than :data:`MAX_TRACE_RATIO` times their traced kernel's: the trace saw the kernel
#: run far faster than the bursts did, so the bursts timed something besides it. Their
#: spread can be small, so ``unstable`` does not catch them.
RETRY_TRACE_MISMATCH = "trace_mismatch"
#: Timed over traced time of a one-kernel run above which the two disagree. Launch gaps
#: between back-to-back calls put the 95th percentile of the ratio at 1.5 on the H100.
MAX_TRACE_RATIO = 2.0


def trace_mismatch_keys(timing, max_ratio: float = MAX_TRACE_RATIO) -> set[tuple]:
    """Keys of successful runs whose trace holds a single kernel launch and whose timed
    time exceeds ``max_ratio`` times that kernel's: what ``--retry trace_mismatch``
    measures again."""
    if timing.empty or "traced_kernels" not in timing.columns:
        return set()
    ok = timing[timing["status"] == "ok"]
    keys = set()
    for *key, time_ms, kernels in ok[[*RUN_KEY, "time_ms", "traced_kernels"]].itertuples(index=False, name=None):
        if not isinstance(kernels, list) or not kernels:
            continue
        launches, ns = trace_totals(kernels)
        if launches == 1 and time_ms > max_ratio * ns / 1e6:
            keys.add(tuple(key))
    return keys


#: Recorded with every session: rows are comparable only under the same protocol.
#: 1 = one call between two events, host work included (the first H100 collection);
#: 2 = bursts behind a spinning GPU (seer.gpu.timing).
TIMING_PROTOCOL = 2
#: How long the worker may take to report the device before the GPU counts as unusable.
PROBE_TIMEOUT_S = 300


def now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def census_passes(algos: Sequence[str]) -> list[str]:
    """The passes a census asks about: those of the algorithms ``--algo`` names, in
    :data:`seer.algorithms.PASSES` order. The census asks every cuDNN algorithm of a pass
    (seer's kernels and PyTorch's policies have no answers to ask for): ``--algo seer`` still
    asks the forward's."""
    named = {get_algorithm(a).pass_ for a in algos}
    return [p for p in PASSES if p in named]


# -- probing ------------------------------------------------------------------------------
def probe_device(workdir: Path) -> dict:
    """Device facts from a worker child; EnvironmentProblem in one sentence if none."""
    out, log = workdir / "probe.json", workdir / "probe.log"
    try:
        children.run_to_end([*children.worker_command(), "probe", "--out", str(out)], log, PROBE_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise EnvironmentProblem(f"The GPU did not answer within {PROBE_TIMEOUT_S // 60} minutes "
                                 "(worker probe timed out).") from None
    if not out.exists():
        raise EnvironmentProblem(f"The GPU worker could not start: {' | '.join(children.tail(log, 3).splitlines())}")
    info = json.loads(out.read_text())
    error = info.get("error")
    if error:
        if "No module named 'cupy'" in error:
            raise EnvironmentProblem("CuPy is not installed: collection needs a GPU host with "
                                     "`pip install -e .[gpu]`.")
        if "cuDNN" in error:
            raise EnvironmentProblem(error.split(": ", 1)[-1])
        raise EnvironmentProblem(f"No usable NVIDIA GPU found ({error}).")
    return info


def check_device(spec: GPUSpec, info: dict) -> None:
    """Stop with a clear sentence if the detected device is not the one named by --gpu."""
    name, sms = info["device_name"], info["sm_count"]
    other = match_device(name, sms)
    if other is not None and other.name == spec.name:
        return
    hint = f"; use --gpu {other.name}" if other else "; add a spec for it to seer/data/gpus.toml"
    raise EnvironmentProblem(
        f"--gpu {spec.name} means {spec.display_name} ({spec.sm_count} SMs), but this machine has "
        f"{name} ({sms} SMs){hint}. Nothing was collected.")


# -- the session --------------------------------------------------------------------------
class Collector:
    """One ``seer collect`` session over a dataset directory."""

    def __init__(self, options: CollectOptions, console: Console | None = None) -> None:
        self.options = options
        self.console = console or Console(stderr=True)
        self.spec = options.gpu
        # Named by the grids, so that collections of other grids write their own files beside it.
        self.job = job_name(s.grid for s in options.shapes)
        self.store = RunStore(options.dataset_dir,
                              tag=default_tag(options.shard_index, options.shard_count, self.job))
        self.info: dict = {}
        self.counts = {"timing_rows": 0, "profiled_runs": 0, "kernels": 0, "profile_errors": 0,
                       "census_records": 0, "worker_restarts": 0}
        self.timing_seconds = 0.0
        self.census_seconds = 0.0
        self.deadline = Deadline()
        # The run's scratch folder (plan, results, logs, stop file): it exists only while
        # run() does.
        self.scratch: Path | None = None
        self.profiler: Profiler | None = None

    @property
    def out_of_time(self) -> bool:
        return self.deadline.passed

    @property
    def stop_file(self) -> Path:
        """Created once the time limit passes: asks the worker to stop after its shape."""
        assert self.scratch is not None, "only while run() runs"
        return self.scratch / "stop"

    def _row_extras(self) -> dict:
        return {"gpu": self.spec.name, "cudnn_version": self.info.get("cudnn_version"),
                "collected_at": now()}

    def my_shapes(self) -> list[GridShape]:
        o = self.options
        return shard(o.shapes, o.shard_index, o.shard_count)

    def run(self) -> dict:
        """Probe, time, profile; log the session; return the session record.

        The scratch folder is removed when this returns or raises, Ctrl-C included.
        """
        o = self.options
        holder = {"started_at": now(), "command": "seer " + shlex.join(o.argv)}
        job = f"{self.job}-census" if o.census else self.job
        with CollectionLock(self.store.raw_dir, (o.shard_index, o.shard_count), holder, job), \
                scratch_folder() as folder:
            self.scratch = folder
            try:
                return self._run()
            finally:
                self.scratch = None

    def _run(self) -> dict:
        o = self.options
        started = now()
        self.deadline = Deadline.after(o.stop_after_s)
        self.info = probe_device(self.scratch)
        check_device(self.spec, self.info)
        ncu_path = ncu_version = None
        if o.profile_shapes != 0 and not o.census:
            ncu_path = ncu_mod.find_ncu(o.ncu)
            ncu_version = ncu_mod.ncu_version(ncu_path)
        self.console.log(f"{self.info['device_name']} ({self.info['sm_count']} SMs), driver "
                         f"{self.info.get('driver_version')}, CUDA {self.info['cuda_runtime_version']}, "
                         f"cuDNN {self.info['cudnn_version']}" + (f", ncu {ncu_version}" if ncu_version else ""))
        self.profiler = Profiler(o, self.store, workdir=self.scratch, deadline=self.deadline,
                                 row_extras=self._row_extras, counts=self.counts, console=self.console)
        interrupted = False
        try:
            if o.census:
                self.census_all()
            else:
                self.time_all()
            if o.profile_shapes != 0 and not o.census and not self.out_of_time:
                self.profiler.run(ncu_path)
        except KeyboardInterrupt:
            interrupted = True
        finally:
            self.store.close()
            session = {
                "started_at": started, "finished_at": now(), "command": "seer " + shlex.join(o.argv),
                "gpu": self.spec.name, "probe": self.info, "ncu": ncu_path, "ncu_version": ncu_version,
                "maths": o.maths, "algos": o.algos, "shard": f"{o.shard_index}/{o.shard_count}",
                "shapes_in_grid": len(o.shapes), "shapes_in_shard": len(self.my_shapes()),
                "workspace_cap_bytes": o.workspace_cap_bytes, "budget_ms": o.budget_ms,
                "min_reps": o.min_reps, "max_reps": o.max_reps, "min_burst_ms": o.min_burst_ms,
                "energy_s": o.energy_s,
                "timing_protocol": TIMING_PROTOCOL, "seed": o.seed,
                "sparsity": list(o.sparsity), "sparsity_patterns": list(o.sparsity_patterns),
                "counts": self.counts, "timing_seconds": round(self.timing_seconds, 1),
                "profiling_seconds": round(self.profiler.seconds, 1),
                "census": o.census, "census_seconds": round(self.census_seconds, 1),
                **({"census_passes": census_passes(o.algos)} if o.census else {}),
                "ncu_metric_set": o.ncu_metric_set, "ncu_replay": o.ncu_replay,
                "max_profile_kernels": o.max_profile_kernels,
                "ncu_cache_control": o.ncu_cache_control,
                "ncu_groups": self.profiler.group_stats, "interrupted": interrupted,
                "stopped_at_time_limit": self.out_of_time,
                "seer_version": seer.__version__,
            }
            self.store.log_session(session)
        if interrupted:
            raise KeyboardInterrupt
        return session

    # -- timing -------------------------------------------------------------------------
    def time_all(self) -> None:
        o = self.options
        shapes = self.my_shapes()
        # Oldest first; read once, the shard's shapes only.
        history = self.store.read("timing", shape_ids=shard_shape_ids(o))
        latest = latest_records(history, RUN_KEY)
        # Every key recorded under this timing protocol is done, except those whose status
        # the user asked to retry; rows of an older protocol, or of an earlier revision of
        # seer's kernels, are measured again.
        latest = latest[current_revision(latest)] if not latest.empty else latest
        done = keys_done(latest, RUN_KEY, skip_status=o.retry or None,
                         require={"timing_protocol": TIMING_PROTOCOL})
        if RETRY_UNSTABLE in o.retry:
            done -= unstable_keys(latest)
        if RETRY_UNTRACED in o.retry:
            done -= untraced_keys(latest)
        if RETRY_TRACE_MISMATCH in o.retry:
            done -= trace_mismatch_keys(latest)
        if RETRY_ENERGY in o.retry:
            done -= no_energy_keys(latest)
        memory = self.info.get("memory_bytes") or self.spec.memory_bytes
        plan = build_plan(shapes, o.maths, o.algos, done, o.sparsity, o.sparsity_patterns)
        # A shape keeps the grid that first timed it (seer.collect.store.first_grids),
        # whichever grid's command times it again.
        timed_in = first_grids(history)
        for work in plan:
            # A sparse shape goes with its layer's grid, and so with its split.
            work.grid = timed_in.get(work.shape_id, timed_in.get(work.dense_shape_id, work.grid))
        too_large = [w for w in plan if not fits_in_memory(w.shape, memory)]
        for work in too_large:
            self._record_rows(work, "too_large",
                              f"input, filter and output need {work.shape.tensor_bytes} bytes; "
                              f"the GPU has {memory}")
        plan = [w for w in plan if fits_in_memory(w.shape, memory)]
        total = sum(len(w.items) for w in plan)
        if not total:
            self.console.log("timing: nothing to do (all items already recorded)")
            return
        started = time.monotonic()
        try:  # an interrupted session still reports the time it spent
            with CollectionProgress("timing", total, self.console) as progress:
                pending = plan
                while pending and not self.out_of_time:
                    pending = self._time_once(pending, progress)
        finally:
            self.timing_seconds += time.monotonic() - started

    def _record_rows(self, work: ShapeWork, status: str, detail: str) -> None:
        rows = [{"shape_id": work.shape_id, "math": m, "algo": a, "grid": work.grid,
                 **work.shape.as_dict(), **work.sparse_fields(), "status": status, "status_detail": detail,
                 **self._row_extras(), "timing_protocol": TIMING_PROTOCOL} for m, a in work.items]
        self.counts["timing_rows"] += self.store.append("timing", rows)

    def _time_once(self, pending: list[ShapeWork], progress: CollectionProgress) -> list[ShapeWork]:
        o = self.options

        def rows(event: dict) -> list[dict]:
            return [event["row"] | self._row_extras() | {"timing_protocol": TIMING_PROTOCOL}]

        def failed(work: ShapeWork, math_mode: str, algo: str, detail: str) -> None:
            self._record_rows(work.with_items([(math_mode, algo)]), "error", detail)

        return self._run_worker("time", ["--seed", str(o.seed), "--budget-ms", str(o.budget_ms),
                                         "--min-burst-ms", str(o.min_burst_ms), "--min-reps", str(o.min_reps),
                                         "--max-reps", str(o.max_reps), "--energy-s", str(o.energy_s)],
                                pending, "timing", "timing_rows", rows, failed, progress)

    def _run_worker(self, command_name: str, arguments: list[str], pending: list[ShapeWork], kind: str,
                    counter: str, records_of: Callable[[dict], list[dict]],
                    record_failure: Callable[[ShapeWork, str, str, str], None],
                    progress: CollectionProgress) -> list[ShapeWork]:
        """One worker child over ``pending``; returns the items still to do.

        Each event's records (``records_of``) go to the store under ``kind`` at once and are
        counted in ``self.counts[counter]``. If the child dies or hangs, the item it was on
        is recorded through ``record_failure`` and skipped, and the caller starts a fresh
        child for the rest.
        """
        o = self.options
        plan_file, results, log = (self.scratch / n for n in ("plan.jsonl", "results.jsonl", "worker.log"))
        write_plan(plan_file, pending)
        finished_keys: set[tuple] = set()

        def on_event(event: dict) -> None:
            records = records_of(event)
            self.counts[counter] += self.store.append(kind, records)
            # A census record stands for its (shape, math) item of its pass (protocol.census_item).
            finished_keys.update(finished_item(r) for r in records)
            progress.advance(len(records))

        command = [*children.worker_command(), command_name, "--plan", str(plan_file), "--results", str(results),
                   "--workspace-cap", str(o.workspace_cap_bytes), *arguments, "--stop-file", str(self.stop_file)]
        outcome = run_child(command, results, log, on_event, o.item_timeout_s,
                            stop_file=self.stop_file, deadline=self.deadline)
        remaining = without(pending, finished_keys)
        if outcome.finished or not remaining:
            return remaining
        self.counts["worker_restarts"] += 1
        if outcome.current is None:
            if not finished_keys:
                raise EnvironmentProblem(f"The GPU worker failed before {progress.description} anything: "
                                         f"{outcome.describe()}")
            return remaining
        # The item the child was on when it died is recorded as an error, then skipped.
        sid, math_mode, algo = outcome.current
        work = next(w for w in remaining if w.shape_id == sid)
        record_failure(work, math_mode, algo, outcome.describe())
        progress.advance()
        self.console.log(f"{command_name}: {sid} {math_mode} {algo}: {outcome.describe()}; continuing")
        return without(remaining, {outcome.current})

    # -- census -------------------------------------------------------------------------
    def census_all(self) -> None:
        """cuDNN's answers for every (shape, math) of the shard, for each pass whose algorithms
        ``--algo`` names (:func:`census_passes`): see ``seer.gpu.worker.census_plan``.

        Unlike timing, shapes too large for the device are asked about too: only
        descriptors are made.
        """
        o = self.options
        recorded = self.store.done_keys("census", CENSUS_KEY, skip_status=o.retry or None)
        done = {(sid, math_mode, census_item(pass_)) for sid, math_mode, pass_ in recorded}
        plan = build_plan(self.my_shapes(), o.maths, [census_item(p) for p in census_passes(o.algos)], done)
        total = sum(len(w.items) for w in plan)
        if not total:
            self.console.log("census: nothing to do (all shapes already recorded)")
            return

        def records(event: dict) -> list[dict]:
            extras = self._row_extras()
            return [r | extras for r in event["records"]]

        def failed(work: ShapeWork, math_mode: str, algo: str, detail: str) -> None:
            self.counts["census_records"] += self.store.append("census", [
                work.head(math_mode) | {"pass": census_pass(algo), "status": "error", "status_detail": detail}
                | self._row_extras()])

        started = time.monotonic()
        try:  # an interrupted session still reports the time it spent
            with CollectionProgress("asking cuDNN", total, self.console, unit="shape-math pairs") as progress:
                pending = plan
                while pending and not self.out_of_time:
                    pending = self._run_worker("census", [], pending, "census", "census_records", records,
                                               failed, progress)
        finally:
            self.census_seconds += time.monotonic() - started
