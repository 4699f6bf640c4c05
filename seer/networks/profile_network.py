"""Profile whole PyTorch networks on the GPU: each convolution layer and the forward pass, per
input size and policy, with proof of the algorithm that ran (``seer profile-network``); or
whole training steps (``--training``).

A policy says who picks each layer's algorithm: ``seer`` (seer's predicted fastest,
:func:`seer.torch.apply`), ``seer-graph`` (the same, guarded for a model run in CUDA
graphs), ``seer-all`` (``seer`` among seer's own kernels too), ``heuristic`` (PyTorch's own
choice, cuDNN's heuristics), ``benchmark`` (PyTorch with ``cudnn.benchmark=True``: trial runs pick), or a cuDNN
algorithm forced on every layer (:func:`seer.torch.force`). Times are taken as the collector
takes them (:class:`seer.gpu.timing.BurstTimer`: warm-up, then bursts behind a spinning
kernel, median over repetitions), so host dispatch stays out:

- the forward pass (``torch.no_grad``), repeated bursts of whole passes;
- each distinct convolution (layer and algorithm), on the input it got in the pass.

The kernels of each distinct convolution (without bias) are traced with CUPTI and checked
against the algorithm forced there (:mod:`seer.networks.kernel_evidence`); under PyTorch's policies
they name the algorithms PyTorch may have run.

A training step (train mode: forward, a loss, backward, and an optimizer step where asked,
which costs every policy the same) is timed as a user runs it: eager wall time of back-to-back steps and
replays of the step captured in a CUDA graph (``step_times`` records, ``steps.csv``); then each
distinct convolution's three passes (forward, backward-data, backward-filter), each timed in
bursts and traced as above on the input the layer got in the step (``step_layer_times``,
``step_layers.csv``; their sums per pass, measured and predicted, join the step's record).
seer's policies there run its forward, backward-data and backward-filter picks
(``seer.torch.apply(..., training=True)``), so they need the GPU's backward models.

Results are records in ``OUT/raw/`` (``layer_times``, ``pass_times``, ``step_times``,
``step_layer_times``, one file per shard, appended and fsync'ed as each (network, input, math,
policy) finishes; a rerun skips what is recorded), from which :func:`write_tables` builds
``layers.csv``, ``overall.csv`` (``steps.csv`` and ``step_layers.csv`` for training steps) and
the plots.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pandas as pd

from seer.algorithms import PASSES, algorithm_names, get_algorithm
from seer.collect.claims import JobClaims
from seer.collect.records import spread, steadiest
from seer.collect.store import RunStore, default_tag
from seer.errors import InputError, one_line
from seer.gpu.pytorch_policy import pytorch_flags
from seer.layers.shapes import LAYER_FIELDS

#: Policies that are not a forced algorithm.
OWN_POLICIES = ("seer", "seer-graph", "seer-all", "heuristic", "benchmark")


class SeerPolicy(NamedTuple):
    """One of seer's policies: what it picks among (``Predicted.algorithms``), and whether its
    picks are guarded for a model run captured in CUDA graphs (no host time per call)."""

    algorithms: str
    captured: bool


#: seer's policies: its picks among cuDNN's algorithms, guarded for an eager model (``seer``) or
#: for one captured in CUDA graphs (``seer-graph``: ``seer.torch.apply(..., cuda_graphs=True)``),
#: and ``seer``'s among seer's own kernels too (``seer-all``: ``apply(..., algorithms="all")``).
SEER_POLICIES = {"seer": SeerPolicy("cudnn", False), "seer-graph": SeerPolicy("cudnn", True),
                 "seer-all": SeerPolicy("all", False)}
#: PyTorch's own policies: ``torch.backends.cudnn.benchmark`` under each.
PYTORCH_POLICIES = {"heuristic": False, "benchmark": True}
#: What a job times: the forward pass (eval mode, ``torch.no_grad``), or a training step.
STEPS = ("forward", "training")
#: Record kinds of a profile's ``raw/`` folder: forward passes, their layers, training steps,
#: and the three passes of each layer of a training step.
KINDS = ("layer_times", "pass_times", "step_times", "step_layer_times")
#: What makes a record of each kind one measurement.
PASS_KEY = ("network", "input", "math", "policy")
LAYER_KEY = (*PASS_KEY, "name")
STEP_LAYER_KEY = (*LAYER_KEY, "pass")
#: What a user sees, beside the burst-timed GPU time: plain wall time per pass of back-to-back
#: eager passes, and per replay of the pass captured in a CUDA graph, with the spread of their
#: windows (profiles before 0.8 lack them).
WALL_COLUMNS = ("eager_ms", "eager_spread", "graph_ms", "graph_spread")
#: With ``compiled``: wall time per pass of the model under ``torch.compile(mode=...)``, the
#: spread of its windows, the seconds its first call took (compilation), the mode, and whether
#: inductor's layout optimisation was on (seer's policies compile through seer.torch.compile,
#: with it off); after the other columns, in profiles that have them (those before 0.8.1 lack
#: the last two: reduce-overhead, on).
COMPILED_COLUMNS = ("compiled_ms", "compiled_spread", "compile_s", "compile_mode", "layout_optimization")
#: Modes of ``torch.compile`` a profile may time: inductor with its passes replayed from CUDA
#: graphs (the first, the default), or launching its kernels from the host on every pass.
COMPILE_MODES = ("reduce-overhead", "default", "max-autotune-no-cudagraphs")
#: Rounds of the policies' turns, and the GPU-and-host time of one turn's window of passes
#: (each after an untimed pass).
WALL_ROUNDS = 7
WALL_WINDOW_S = 0.25
#: Columns of overall.csv, in order (one row per network, input, math and policy).
OVERALL_COLUMNS = (*PASS_KEY, "size", "batch", "status", "forward_ms", "forward_mean_ms", "forward_std_ms",
                   "forward_reps", "conv_ms", "predicted_conv_ms", "conv_layers", "conv_calls",
                   "verified_layers", "fallback_layers", "collected_at", *WALL_COLUMNS)
#: Columns of steps.csv, in order (one row per network, input, math and policy): wall times of a
#: training step, and how many layers' forward and backward picks replaced PyTorch's.
STEPS_COLUMNS = (*PASS_KEY, "size", "batch", "status", *WALL_COLUMNS, "fwd_picks", "bwd_data_picks",
                 "bwd_filter_picks", "conv_layers", "optimizer", "collected_at", "error")
#: Columns of layers.csv, in order (one row per network, input, math, policy and conv module).
LAYERS_COLUMNS = (*PASS_KEY, "size", "name", "calls", *LAYER_FIELDS, "algo", "predicted_ms", "measured_ms",
                  "spread", "reps", "verified", "candidates", "kernels", "fallback")
#: Columns of step_layers.csv (one row per network, input, math, policy, conv module and pass).
_ALGO_AT = LAYERS_COLUMNS.index("algo")
STEP_LAYERS_COLUMNS = (*LAYERS_COLUMNS[:_ALGO_AT], "pass", *LAYERS_COLUMNS[_ALGO_AT:])
#: What a training step's record adds where its layers' passes were timed: per pass and in all,
#: the calls' burst-timed GPU time summed over the step's convolutions, and seer's prediction
#: of the same (the chosen algorithm's time, or the model of PyTorch's own choice where the
#: policy leaves the pass to it; none under cudnn.benchmark, which no model predicts).
STEP_CONV_COLUMNS = (*(f"{p}_conv_ms" for p in PASSES), "conv_ms",
                     *(f"{p}_predicted_conv_ms" for p in PASSES), "predicted_conv_ms")


# -- what to run ------------------------------------------------------------------------
def parse_policies(text: str) -> list[str]:
    """``seer,heuristic,IMPLICIT_GEMM`` or ``all`` (the three own policies and every cuDNN algorithm)."""
    names = [t.strip() for t in text.split(",") if t.strip()]
    if not names:
        raise InputError("--algo names no policy", field="algo")
    out: list[str] = []
    for name in names:
        if name.lower() == "all":
            out.extend([*OWN_POLICIES, *algorithm_names("cudnn")])
        elif name.lower() in OWN_POLICIES:
            out.append(name.lower())
        else:
            try:
                algo = get_algorithm(name)
            except KeyError:
                raise InputError(f"{name!r} is not seer, seer-graph, seer-all, heuristic, benchmark, all or an "
                                 f"algorithm ({', '.join(algorithm_names('cudnn'))})", field="algo") from None
            if algo.source != "cudnn":
                raise InputError(f"{algo.name} is not a cuDNN algorithm", field="algo")
            out.append(algo.name)
    return list(dict.fromkeys(out))


def parse_sizes(text: str) -> list[int]:
    """``224:512:100`` (100 sizes spread evenly from 224 to 512, rounded) or ``224,320,512``."""
    try:
        if ":" in text:
            start, stop, count = (int(v) for v in text.split(":"))
            if count < 1 or start < 1 or stop < start:
                raise ValueError
            sizes = sorted({int(round(v)) for v in np.linspace(start, stop, count)})
        else:
            sizes = sorted({int(v) for v in text.split(",")})
    except ValueError:
        raise InputError(f"--sizes must be START:STOP:COUNT or a comma-separated list of sizes, got {text!r}",
                         field="sizes") from None
    if not sizes or sizes[0] < 1:
        raise InputError(f"--sizes must be positive, got {text!r}", field="sizes")
    return sizes


@dataclass(frozen=True)
class Job:
    """One (network, input, math) to profile under some policies."""

    network: str
    input_shape: tuple[int, ...]
    math: str
    policies: tuple[str, ...]
    step: str = "forward"  # STEPS

    @property
    def input(self) -> str:
        return "x".join(str(v) for v in self.input_shape)

    @property
    def key(self) -> str:
        """What names the job among processes sharing a list (:class:`JobClaims`)."""
        return f"{self.network} {self.input} {self.math} {self.step}"


def plan_jobs(networks: Sequence[str], input_shapes: Sequence[tuple[int, ...]], maths: Sequence[str],
              policies: Sequence[str], shard_index: int = 1, shard_count: int = 1, step: str = "forward") -> list[Job]:
    """Every (network, input, math) in order, this shard's share (every n-th)."""
    if step not in STEPS:
        raise ValueError(f"step must be one of {', '.join(STEPS)}, got {step!r}")
    jobs = [Job(n, tuple(s), m, tuple(policies), step) for n in networks for s in input_shapes for m in maths]
    return jobs[shard_index - 1::shard_count]


# -- measuring --------------------------------------------------------------------------
@dataclass
class ProfileOptions:
    out_dir: Path
    gpu: str = "h100"
    models_dir: Path | None = None
    dataset_dir: Path | None = None  # the GPU's dataset, for the kernel evidence
    budget_ms: float = 5.0
    forward_budget_ms: float = 50.0
    retrace: bool = False  # measure again the passes recorded without a kernel tracer
    layer_times: bool = True  # time and trace each convolution too (not only whole passes)
    tag: str = field(default_factory=default_tag)
    argv: list[str] = field(default_factory=list)
    optimizer: str = "none"  # ends a training step (seer.torch.convolution.STEP_OPTIMIZERS)
    compiled: str | None = None  # a mode (COMPILE_MODES): also time each forward pass under torch.compile
    layout_optimization: bool = True  # PyTorch's policies compiled with inductor's layout optimisation


@contextmanager
def _without_bias(module):
    bias = module.bias
    module.bias = None
    try:
        yield
    finally:
        module.bias = bias


class NetworkProfiler:
    """Runs :class:`Job` s on the current GPU and appends their records to ``OUT/raw``."""

    def __init__(self, options: ProfileOptions, progress: Callable[[str], None] = lambda message: None) -> None:
        import torch

        from seer.gpu.timing import BurstTimer
        from seer.gpu.tracing import KernelTracer, available
        from seer.networks.kernel_evidence import KernelEvidence
        from seer.schema import DatasetDir

        if not torch.cuda.is_available():
            from seer.errors import EnvironmentProblem

            raise EnvironmentProblem("seer profile-network needs a CUDA GPU that PyTorch can use")
        self.torch = torch
        self.conv_types = (torch.nn.Conv1d, torch.nn.Conv2d, torch.nn.Conv3d)
        self.options = options
        self.progress = progress
        self.store = RunStore(options.out_dir, tag=options.tag, kinds=KINDS)
        self.timer = BurstTimer()
        reason = available()
        self.tracer = KernelTracer() if reason is None else None
        self.trace_problem = reason
        dataset = options.dataset_dir
        self.evidence = (KernelEvidence.from_dataset(dataset)
                         if dataset is not None and DatasetDir(dataset).traced_kernels.exists() else None)
        self._models: dict[tuple[str, str], object] = {}  # (math, pass) -> the GPU's model
        self._choices: dict[str, object] = {}  # seer's picks for the current job's layers, per seer policy
        self._backward: dict[str, tuple] = {}  # and its backward passes' picks, per seer policy of a training job
        self._pick_counts: dict[str, dict] = {}  # per seer policy of a training job: layers each pass swapped
        self._layouts: list[str] = []  # per row of the job's layers: the layout its calls' input came in
        self.measured = 0  # policies measured by run(), so far

    def seer_model(self, math: str, pass_: str = "fwd"):
        """The GPU's model of ``pass_`` under ``math``, loaded once per run."""
        if (math, pass_) not in self._models:
            from seer.predict.persist import load_model

            self._models[math, pass_] = load_model(self.options.gpu, math=math, models_dir=self.options.models_dir,
                                                   pass_=pass_)
        return self._models[math, pass_]

    def _backward_choices(self, job: Job, layers: pd.DataFrame, policy: str) -> tuple:
        """seer's backward-data and backward-filter choices for a training job's layers, as
        ``seer.torch.apply(..., training=True)`` makes them."""
        from seer.layers.shapes import ConvShape
        from seer.torch.convolution import PredictedPass

        choices = []
        for pass_ in ("bwd_data", "bwd_filter"):
            choice = PredictedPass(self.seer_model(job.math, pass_), job.math, captured=SEER_POLICIES[policy].captured,
                                   deterministic=self.torch.are_deterministic_algorithms_enabled())
            choice.prepare([ConvShape.from_mapping(r) for r in layers.to_dict("records")])
            choices.append(choice)
        return tuple(choices)

    def done_steps(self) -> set[tuple]:
        """Keys of the training steps recorded with this run's optimizer (a record without one, made
        before there was a choice, had none)."""
        steps = self.store.read("step_times", PASS_KEY)
        if steps.empty:
            return set()
        optimizer = steps["optimizer"].fillna("none") if "optimizer" in steps else pd.Series("none", index=steps.index)
        steps = steps[optimizer == self.options.optimizer]
        return set(steps[list(PASS_KEY)].itertuples(index=False, name=None))

    def done(self) -> set[tuple]:
        done = self.store.done_keys("pass_times", PASS_KEY)
        if self.options.retrace and self.tracer is not None:
            done -= untraced_passes(self.options.out_dir)
        return done

    def run(self, jobs: Sequence[Job], claims: JobClaims | None = None) -> int:
        """Profile every job's policies not yet recorded; returns how many were measured.
        ``claims``: the list is shared with other processes, and this one runs only the jobs it takes."""
        done = {"forward": self.done(), "training": self.done_steps()}
        self.measured = 0
        for job in jobs:
            todo = [p for p in job.policies if (job.network, job.input, job.math, p) not in done[job.step]]
            if not todo or (claims is not None and not claims.take(job.key)):
                continue
            self.progress(f"{job.network} {job.input} {job.math}{' training step' if job.step == 'training' else ''}: "
                          f"{', '.join(todo)}")
            run = self._run_training_job if job.step == "training" else self._run_job
            self.measured += run(job, todo)
            if claims is not None:
                claims.finish(job.key)
        self.store.close()
        return self.measured

    # -- one job ----------------------------------------------------------------------
    def _run_job(self, job: Job, policies: Sequence[str]) -> int:
        from seer.torch.convolution import restore

        torch = self.torch
        built = self._model_and_layers(job, policies)
        if built is None:
            return len(policies)
        model, layers = built
        predictions = self.seer_model(job.math).predict(layers, job.math) if len(layers) else None
        self._choices = {}
        x = torch.randn(job.input_shape, device="cuda")
        walls = self._walls(model, x, job, policies, layers)
        count = 0
        for policy in policies:
            started = time.perf_counter()
            try:
                passes, rows = self._run_policy(model, x, job, policy, layers, predictions, walls[policy])
            except torch.cuda.OutOfMemoryError as exc:
                passes, rows = self._failed(job, policy, "oom", exc), []
            except Exception as exc:  # noqa: BLE001 - one configuration fails; the others go on
                passes, rows = self._failed(job, policy, "error", exc), []
            finally:
                restore(model)
                torch.cuda.empty_cache()
            # Layer rows first: the pass record marks the policy done.
            self.store.append("layer_times", rows)
            self.store.append("pass_times", [passes])
            count += 1
            self.progress(f"  {policy}: {passes['status']} forward {passes.get('forward_ms', float('nan')):.3f} ms, "
                          f"conv {passes.get('conv_ms', float('nan')):.3f} ms"
                          + (f", compiled {passes['compiled_ms']:.3f} ms" if "compiled_ms" in passes else "")
                          + (f" ({passes['compiled_error']})" if "compiled_error" in passes else "") + " "
                          f"({time.perf_counter() - started:.1f} s)")
        del model, x
        torch.cuda.empty_cache()
        return count

    def _run_training_job(self, job: Job, policies: Sequence[str]) -> int:
        """A training step under each policy: wall times (eager and CUDA graph, in turns), then
        each distinct convolution's three passes in bursts (:meth:`_step_layer_rows`)."""
        torch = self.torch
        built = self._model_and_layers(job, policies)
        if built is None:
            return len(policies)
        model, layers = built
        self._choices, self._backward = {}, {}
        x = torch.randn(job.input_shape, device="cuda")
        walls = self._walls(model, x, job, policies, layers)
        predicted = self._step_predictions(job, layers) if self.options.layer_times and len(layers) else None
        measured: dict[tuple, dict] = {}  # (layer fields, pass, what ran) -> its timing and trace, once per job
        for policy in policies:
            stamp = datetime.now(timezone.utc).isoformat(timespec="seconds")
            wall = dict(walls[policy])
            problem = wall.pop("wall_error", None)
            record = {**self._pass_base(job, policy, stamp), "status": "error" if problem else "ok", **wall,
                      "conv_layers": int(len(layers)), "optimizer": self.options.optimizer}
            rows = []
            if predicted is not None and not problem:
                try:
                    rows = self._step_layer_rows(model, x, job, policy, layers, predicted, measured, stamp)
                except torch.cuda.OutOfMemoryError as exc:
                    record["layers_error"] = "oom: " + _why(exc)
                except Exception as exc:  # noqa: BLE001 - the step's record says why; its wall times stand
                    record["layers_error"] = _why(exc)
                record.update(step_conv_sums(rows))
            if problem:
                record["error"] = problem
            record.update(self._pick_counts.get(policy, {}))
            self.store.append("step_layer_times", rows)  # before the step's record, which marks the policy done
            self.store.append("step_times", [record])
            self.progress(f"  {policy}: {record['status']} eager {_ms(record.get('eager_ms'))} ms, "
                          f"graph {_ms(record.get('graph_ms'))} ms per step"
                          + (f", convolutions {_ms(record.get('conv_ms'))} ms GPU" if rows else "")
                          + (f" ({problem})" if problem else f" ({wall['graph_error']})" if "graph_error" in wall else "")
                          + (f" (layers: {record['layers_error']})" if "layers_error" in record else ""))
        del model, x
        self._pick_counts = {}
        torch.cuda.empty_cache()
        return len(policies)

    def _step_predictions(self, job: Job, layers: pd.DataFrame) -> dict[str, tuple[dict, np.ndarray]]:
        """Per pass: seer's predicted ms of each (layer index, algorithm) of ``layers``, and of
        PyTorch's own choice per layer."""
        from seer.predict.model import best_per_layer

        out = {}
        for pass_ in PASSES:
            predictions = self.seer_model(job.math, pass_).predict(layers, job.math)
            times = {(int(i), a): float(t) for i, a, t in predictions[["layer", "algo", "predicted_ms"]].itertuples(
                index=False)}
            out[pass_] = (times, best_per_layer(predictions)["pytorch_ms"].reindex(range(len(layers))).to_numpy())
        return out

    def _step_layer_rows(self, model, x, job: Job, policy: str, layers: pd.DataFrame, predicted: dict,
                         measured: dict, stamp: str) -> list[dict]:
        """Each distinct convolution's forward, backward-data and backward-filter under ``policy``,
        on the input the layer got in the step: the algorithm that ran (seer's pick, or PyTorch's
        where the policy leaves the pass to it), its burst-timed GPU time, its kernels and their
        verdict, and seer's prediction. A (layer, pass, algorithm) measured under another policy
        of the job is not measured again; PyTorch's path under seer's policies is the heuristic
        policy's (the same flags)."""
        import copy

        from seer.torch.convolution import PYTORCH, seer_convolutions

        torch = self.torch
        if policy in PYTORCH_POLICIES:
            swapped_model = model
        else:
            swapped_model = copy.deepcopy(model)
            self._set_policy(swapped_model, x, job, policy, layers)
        rows = []
        try:
            with self._flags(job, policy):
                with torch.no_grad():
                    inputs = self._conv_inputs(swapped_model, x)
                modules = dict(swapped_model.named_modules())
                swapped = seer_convolutions(swapped_model)
                for index, row in layers.iterrows():
                    name = row["name"]
                    module, x_in = modules.get(name), _input_for(inputs.get(name, {}), row)
                    if module is None or x_in is None or not isinstance(module, self.conv_types):
                        continue  # a functional call of the model's own code
                    fields = tuple(int(row[f]) for f in LAYER_FIELDS)
                    for pass_ in PASSES:
                        call, ran = self._pass_call(module, x_in, pass_, swapped.get(name))
                        algo = ran if ran not in (None, PYTORCH) else None  # None: PyTorch's own
                        what = algo or ("benchmark" if policy == "benchmark" else "heuristic")
                        if (fields, pass_, what) not in measured:
                            measured[(fields, pass_, what)] = self._measure_call(call, algo)
                        times, pytorch_ms = predicted[pass_]
                        guess = times.get((int(index), algo)) if algo else (
                            None if policy == "benchmark" else pytorch_ms[int(index)])
                        rows.append({**self._pass_base(job, policy, stamp), "name": name, "calls": int(row["calls"]),
                                     **dict(zip(LAYER_FIELDS, fields)), "pass": pass_, "algo": algo or PYTORCH,
                                     "predicted_ms": None if guess is None or guess != guess else float(guess),
                                     **measured[(fields, pass_, what)],
                                     "fallback": ";".join(swapped[name].fallbacks) if name in swapped else ""})
                        del call
        finally:
            del swapped_model
            torch.cuda.empty_cache()
        return rows

    def _pass_call(self, module, x_in, pass_: str, seer_module=None) -> tuple[Callable[[], object], str | None]:
        """A call that runs one pass of ``module`` on ``x_in`` (the forward without gradients, or
        one gradient of a forward made once: of the input for ``bwd_data``, of the weight for
        ``bwd_filter``, nothing else), and the algorithm a seer module runs there (None for a
        plain module)."""
        torch = self.torch
        if pass_ == "fwd":
            x = x_in.detach()

            def forward():
                with torch.no_grad():
                    return module(x)
            forward()
            return forward, None if seer_module is None else seer_module.last_algorithm
        # Only the wanted gradient: the other tensors ask for none while the forward is made.
        parameters = [p for p in (module.weight, module.bias) if p is not None]
        wanted = [p.requires_grad for p in parameters]
        try:
            for p in parameters:
                p.requires_grad_(p is module.weight and pass_ == "bwd_filter")
            x = x_in.detach().requires_grad_(pass_ == "bwd_data")
            with torch.enable_grad():
                y = module(x)
            grad_y = torch.randn_like(y)
        finally:
            for p, flag in zip(parameters, wanted):
                p.requires_grad_(flag)
        target = x if pass_ == "bwd_data" else module.weight
        ran = None if seer_module is None else seer_module.backward_algorithms[PASSES.index(pass_) - 1]
        return (lambda: torch.autograd.grad(y, target, grad_y, retain_graph=True)), ran

    def _model_and_layers(self, job: Job, policies: Sequence[str]):
        """The job's model on the GPU (in train mode for a training step) and its layers, found by a
        pass on the meta device (the layers as seer predicts them); or None, every policy's record
        saying why, where the model refuses the input (Inception-v3's auxiliary head in train mode
        needs 299x299), so that the next job goes on."""
        from seer.torch.layers import build_model, conv_calls

        try:
            model = build_model(job.network, device="cuda").train(job.step == "training")
            calls = conv_calls(model, job.input_shape)
            self._layouts = call_layouts(calls)
            return model, calls.layers.reset_index(drop=True)
        except InputError as exc:
            kind = "step_times" if job.step == "training" else "pass_times"
            for policy in policies:
                self.store.append(kind, [self._failed(job, policy, "error", exc)])
            self.progress(f"  error: {exc}")
            return None

    def _failed(self, job: Job, policy: str, status: str, exc: BaseException) -> dict:
        return {**self._pass_base(job, policy), "status": status,
                "error": _why(exc, 300)}

    def _pass_base(self, job: Job, policy: str, stamp: str | None = None) -> dict:
        """The key fields of a record; a pass and its layers share one ``collected_at``."""
        return {"network": job.network, "input": job.input, "math": job.math, "policy": policy,
                "size": int(job.input_shape[-1]), "batch": int(job.input_shape[0]),
                "collected_at": stamp or datetime.now(timezone.utc).isoformat(timespec="seconds")}

    def _set_policy(self, model, x, job: Job, policy: str, layers: pd.DataFrame):
        """Swap ``model``'s convolutions for the policy's (none for PyTorch's own policies) and
        return the context of PyTorch's flags under it (:meth:`_flags`). As
        ``seer.torch.apply`` does, the eager policy weighs its picks for the whole pass, from
        the pass under PyTorch's default policy timed on ``x``, and keeps them only where the
        swapped pass times faster there (``swap_in_confirmed``)."""
        from seer.torch.convolution import (Predicted, decide_step, eager_pass_times, eager_step_times, force,
                                           seer_convolutions, swap_in_confirmed)

        if policy in SEER_POLICIES:
            training = job.step == "training"
            choice = self._choices.get(policy)
            backward = ()
            if training:  # made once per job, as the choice is: the step decides both together (decide_step)
                backward = self._backward.get(policy) or self._backward.setdefault(
                    policy, self._backward_choices(job, layers, policy))
            confirm_on = None  # the input the eager pass was weighed on, where the swapped pass is to be timed
            if choice is None:
                from seer.layers.shapes import ConvShape

                choice = self._choices[policy] = Predicted(self.seer_model(job.math), job.math,
                                                           algorithms=SEER_POLICIES[policy].algorithms,
                                                           captured=SEER_POLICIES[policy].captured)
                shapes = [ConvShape.from_mapping(r) for r in layers.to_dict("records")]
                choice.prepare(shapes)
                if not SEER_POLICIES[policy].captured and not training:  # the pass model is of forward passes
                    with self._flags(job, "heuristic"):
                        choice.decide_pass(shapes, eager_pass_times(model, x))
                    confirm_on = x
                if training and not SEER_POLICIES[policy].captured:  # as apply(..., training=True) weighs an eager step
                    with self._flags(job, "heuristic"):
                        decide_step(choice, backward, shapes, eager_step_times(model, x))
                    confirm_on = x
            # As seer.torch.apply does: modules the guard leaves to PyTorch stay PyTorch's, and the
            # eager policy's picks stay only if the swapped pass is faster (timed under its own flags,
            # as a user runs it: without an NVTX range per call, which the traced passes then get).
            with self._flags(job, policy):
                swap_in_confirmed(model, choice, layers, confirm_on, backward=backward or (None, None),
                                  training=training)
            for module in seer_convolutions(model).values():
                module.set_nvtx(True)
            if training:
                self._pick_counts[policy] = {**pick_counts(choice, backward, layers, self._layouts),
                                             **weighed_fields(choice)}
        elif policy not in PYTORCH_POLICIES:
            force(model, policy, job.math, nvtx=True)
        return self._flags(job, policy)

    def _walls(self, model, x, job: Job, policies: Sequence[str], layers: pd.DataFrame) -> dict[str, dict]:
        """Wall time per pass as a user sees it, under each policy: eager back-to-back passes,
        and replays of the pass captured in a CUDA graph. The policies take turns, window by
        window (:data:`WALL_ROUNDS` rounds), so that the host's drift over the job (on a
        shared machine, eager times of host-bound networks moved by up to 2x between runs)
        falls on every policy alike; each window follows an untimed pass of its own policy, and
        each policy gets the median of its windows. A policy that
        swaps modules runs on its own copy of the model, swapped once, as a user's would be."""
        import copy

        from seer.torch.convolution import seer_convolutions, window_ms

        torch = self.torch
        walls = {p: {"eager_ms": None, "graph_ms": None} for p in policies}
        models, graphs, steps = {}, {}, {}
        eager, replays = {p: [] for p in policies}, {p: [] for p in policies}
        passes = None
        from seer.torch.convolution import training_step

        optimizer = self.options.optimizer
        run = (lambda m, x: training_step(m, x, optimizer)) if job.step == "training" else forward_pass
        with torch.no_grad() if job.step == "forward" else torch.enable_grad():
            for policy in policies:  # each policy's model, warm-up (plans, autotuning) and CUDA graph
                try:
                    if policy in PYTORCH_POLICIES:
                        models[policy] = model
                    else:
                        models[policy] = copy.deepcopy(model)
                        self._set_policy(models[policy], x, job, policy, layers)  # its flags: self._flags
                        for m in seer_convolutions(models[policy]).values():
                            m.set_nvtx(False)  # as a user runs it: no NVTX range per convolution
                    forward = steps[policy] = run(models[policy], x)
                    with self._flags(job, policy):
                        one = _pass_seconds(torch, forward)
                        passes = passes or max(3, int(WALL_WINDOW_S / one))
                        graphs[policy], problem = capture_graph(torch, forward)
                    if problem:
                        walls[policy]["graph_error"] = problem
                except Exception as exc:  # noqa: BLE001 - this policy's pass record says why
                    walls[policy]["wall_error"] = _why(exc)
            live = [p for p in policies if "wall_error" not in walls[p]]
            try:
                for _ in range(WALL_ROUNDS):
                    for policy in live:
                        with self._flags(job, policy):
                            # An untimed pass first: the window times this policy's model as it runs
                            # back to back, not its first pass after another policy's model and flags.
                            steps[policy]()
                            eager[policy].append(window_ms(steps[policy], passes))
                            if graphs.get(policy) is not None:
                                graphs[policy].replay()
                                replays[policy].append(window_ms(graphs[policy].replay, passes))
            except Exception as exc:  # noqa: BLE001 - the passes' records say why; burst times go on
                for policy in live:
                    walls[policy]["wall_error"] = _why(exc)
                live = []
        for policy in live:
            walls[policy].update(eager_ms=float(np.median(eager[policy])), eager_spread=spread(eager[policy]))
            if replays[policy]:
                walls[policy].update(graph_ms=float(np.median(replays[policy])), graph_spread=spread(replays[policy]))
        graphs.clear()
        if self.options.compiled and job.step == "forward":
            with torch.no_grad():
                for policy in live:
                    with self._flags(job, policy):
                        layout = self.options.layout_optimization and policy in PYTORCH_POLICIES
                        walls[policy].update(compiled_wall(torch, models[policy], x, passes, self.options.compiled,
                                                           layout_optimization=layout))
        models.clear()
        steps.clear()
        torch.cuda.empty_cache()
        return walls

    @staticmethod
    def _flags(job: Job, policy: str):
        """PyTorch's cuDNN flags under ``policy``: its own policy's, or, for the convolutions
        PyTorch runs beside seer's (fallbacks, guarded layers), no benchmark mode and the job's
        math mode."""
        return pytorch_flags(PYTORCH_POLICIES.get(policy, False), job.math)

    def _run_policy(self, model, x, job: Job, policy: str, layers: pd.DataFrame, predictions, wall: dict):
        torch = self.torch
        stamp = datetime.now(timezone.utc).isoformat(timespec="seconds")
        with self._set_policy(model, x, job, policy, layers), torch.no_grad():
            inputs = self._conv_inputs(model, x)
            forward = lambda: model(x)  # noqa: E731
            estimate = _one_call_ms(torch, forward)
            budget = max(self.options.forward_budget_ms, 5 * estimate)
            (times, _, _), _ = steadiest(lambda: self.timer.measure(forward, estimate, budget_ms=budget,
                                                                    min_reps=5, max_reps=30))
            rows = (self._layer_rows(model, job, policy, layers, predictions, inputs, stamp)
                    if self.options.layer_times else [])
        passes = {**self._pass_base(job, policy, stamp), "status": "ok", **wall,
                  "forward_ms": float(np.median(times)), "forward_mean_ms": float(np.mean(times)),
                  "forward_std_ms": float(np.std(times, ddof=1)), "forward_reps": int(len(times))}
        if policy in self._choices:
            passes["guarded_layers"] = len(self._choices[policy].guarded)
            passes.update(pick_counts(self._choices[policy], (), layers, self._layouts))
            passes.update(weighed_fields(self._choices[policy]))
        frame = pd.DataFrame(rows)
        if len(frame):
            passes["conv_ms"] = float((frame["calls"] * frame["measured_ms"]).sum())
            predicted = frame["calls"] * frame["predicted_ms"]
            passes["predicted_conv_ms"] = float(predicted.sum()) if predicted.notna().all() else None
            passes["conv_layers"] = int(len(frame))
            passes["conv_calls"] = int(frame["calls"].sum())
            passes["verified_layers"] = int((frame["verified"] == "verified").sum())
            passes["fallback_layers"] = int(frame["fallback"].astype(bool).sum())
        return passes, rows

    def _conv_inputs(self, model, x) -> dict[str, object]:
        """The inputs of each conv module in one forward pass, by module name and shape."""
        seen: dict[str, object] = {}
        handles = []
        for name, module in model.named_modules():
            if isinstance(module, self.conv_types):
                handles.append(module.register_forward_pre_hook(
                    lambda m, args, name=name: seen.setdefault(name, {}).setdefault(tuple(args[0].shape), args[0])))
        try:
            model(x)
        finally:
            for handle in handles:
                handle.remove()
        return seen

    def _layer_rows(self, model, job: Job, policy: str, layers: pd.DataFrame, predictions, inputs,
                    stamp: str) -> list[dict]:
        from seer.torch.convolution import PYTORCH, seer_convolutions

        modules = dict(model.named_modules())
        swapped = seer_convolutions(model)
        measured: dict[tuple, dict] = {}  # (layer fields, algorithm) -> timing and trace, measured once
        rows = []
        for index, row in layers.iterrows():
            name = row["name"]
            module, x_in = modules.get(name), _input_for(inputs.get(name, {}), row)
            if module is None or x_in is None or not isinstance(module, self.conv_types):
                continue  # a functional call of the model's own code: in the forward time only
            fields = tuple(int(row[f]) for f in LAYER_FIELDS)
            algo = policy if policy not in OWN_POLICIES else None
            if name in swapped:
                module(x_in)  # learns which algorithm this layer runs
                algo = swapped[name].last_algorithm
            key = (fields, algo if name in swapped else policy)
            if key not in measured:
                measured[key] = self._measure_layer(module, x_in, algo if algo != PYTORCH else None)
            m = measured[key]
            predicted = None
            if predictions is not None and algo not in (None, PYTORCH):
                hit = predictions[(predictions["layer"] == index) & (predictions["algo"] == algo)]
                predicted = float(hit["predicted_ms"].iloc[0]) if len(hit) else None
            fallback = ";".join(swapped[name].fallbacks) if name in swapped else ""
            rows.append({**self._pass_base(job, policy, stamp), "name": name, "calls": int(row["calls"]),
                         **dict(zip(LAYER_FIELDS, fields)), "algo": algo or PYTORCH,
                         "predicted_ms": predicted, **m, "fallback": fallback})
        return rows

    def _measure_layer(self, module, x_in, algo: str | None) -> dict:
        return self._measure_call(lambda: module(x_in), algo, lambda: _without_bias(module))

    def _measure_call(self, call: Callable[[], object], algo: str | None, tracing=nullcontext) -> dict:
        """``call``'s GPU time in bursts, its kernels (traced within ``tracing()``) and whether
        they are the ones ``algo`` launches (None: PyTorch's own choice, whose kernels name the
        algorithms it may have run)."""
        estimate = _one_call_ms(self.torch, call)
        (times, plan, _), _ = steadiest(lambda: self.timer.measure(call, estimate, budget_ms=self.options.budget_ms))
        out = {"measured_ms": float(np.median(times)), "spread": spread(times), "reps": int(plan.reps)}
        if self.tracer is None:
            return {**out, "verified": "untraced", "candidates": "", "kernels": self.trace_problem}
        with tracing():
            kernels = self.tracer.trace(call)
        names = [k.name for k in kernels]
        out["kernels"] = ";".join(dict.fromkeys(names))
        if self.evidence is None:
            return {**out, "verified": "no_evidence", "candidates": ""}
        if algo is None:  # PyTorch's policies: which algorithms the kernels allow
            candidates = self.evidence.candidates(names)
            return {**out, "verified": "pytorch", "candidates": ",".join(sorted(candidates or ()))}
        verdict, candidates = self.evidence.verify(names, algo)
        return {**out, "verified": verdict, "candidates": ",".join(sorted(candidates or ()))}


def forward_pass(model, x) -> Callable[[], object]:
    """One forward pass of ``model`` on ``x`` (run under ``torch.no_grad``)."""
    return lambda: model(x)


def pick_counts(choice, backward: Sequence, layers: pd.DataFrame,
                layouts: Sequence[str] | None = None) -> dict[str, int]:
    """How many of ``layers`` (one row per call) each pass's choice gives an algorithm of
    seer's rather than PyTorch's own, each layer in its input's layout (``layouts``, per row:
    ``"nhwc"`` where it comes packed channels-last, which a guarded choice may leave to
    PyTorch; NCHW where not given), as the swapped modules decide when they run."""
    from seer.layers.shapes import ConvShape

    shapes = [ConvShape.from_mapping(r) for r in layers.to_dict("records")]
    layouts = ["nchw"] * len(shapes) if layouts is None else list(layouts)
    return {name: sum(pass_choice.algorithm_in(s, t) is not None for s, t in zip(shapes, layouts))
            for pass_choice, name in zip((choice, *backward), ("fwd_picks", "bwd_data_picks", "bwd_filter_picks"))}


def call_layouts(calls) -> list[str]:
    """Per row of ``calls.layers`` (:class:`seer.layers.calls.ConvCalls`): ``"nhwc"`` where a
    call got its input packed channels-last, else ``"nchw"``."""
    packed = calls.channels_last if calls.channels_last is not None else np.zeros(len(calls.layers), dtype=bool)
    return ["nhwc" if p else "nchw" for p in packed]


def _why(exc: BaseException, limit: int = 200) -> str:
    """What a record says of a failure: the exception's type and its message on one line."""
    return f"{type(exc).__name__}: {one_line(exc, limit)}"


def _ms(value) -> str:
    return "-" if value is None or value != value else f"{value:.3f}"


def _input_for(inputs: dict[tuple, object], layer: pd.Series):
    """The input a module got for this layer: the one of its shape, else its only one (an
    input that ``padding_mode`` pads has the unpadded shape)."""
    dims = 3 if int(layer["dims"]) == 3 else 2
    axes = ("in_d", "in_h", "in_w")[3 - dims:]
    expected = (int(layer["batch"]), int(layer["in_ch"]), *(int(layer[a]) for a in axes))
    for shape, tensor in inputs.items():
        if shape == expected or (len(shape) == 3 and shape == (expected[0], expected[1], expected[-1])):
            return tensor
    return next(iter(inputs.values())) if len(inputs) == 1 else None


def _one_call_ms(torch, fn: Callable[[], object]) -> float:
    """A first estimate of one call's GPU time (events around a warm call)."""
    fn()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    fn()
    end.record()
    end.synchronize()
    return max(start.elapsed_time(end), 1e-3)


def _pass_seconds(torch, forward: Callable[[], object]) -> float:
    """Seconds of one pass, host and GPU, after a warm-up pass."""
    forward()
    torch.cuda.synchronize()
    started = time.perf_counter()
    forward()
    torch.cuda.synchronize()
    return max(time.perf_counter() - started, 1e-6)


def compiled_wall(torch, model, x, passes: int, mode: str = COMPILE_MODES[0], *,
                  layout_optimization: bool = True) -> dict:
    """``model`` under ``torch.compile(mode=mode)`` (without inductor's layout optimisation:
    ``seer.torch.compile``): wall time per pass (median of :data:`WALL_ROUNDS` windows of
    ``passes``), its spread, the first call's seconds, the mode and the layout switch; or why
    it failed. Each model is compiled alone between resets, so no earlier compilation counts
    against dynamo's recompile limit, and timed after the others' turns: replays of
    captured passes repeat within a fraction of a percent, so they need no turns (without CUDA
    graphs, the spread of the windows says how far the host moved)."""
    from seer.torch.convolution import window_ms

    torch.compiler.reset()
    try:
        if layout_optimization:
            compiled = torch.compile(model, mode=mode)
        else:
            from seer.torch.convolution import compile as compile_without_layout

            compiled = compile_without_layout(model, mode)
        torch.cuda.synchronize()
        started = time.perf_counter()
        compiled(x)
        torch.cuda.synchronize()
        compile_s = time.perf_counter() - started
        for _ in range(3):  # inductor's CUDA graphs are recorded on the calls after the first
            compiled(x)
        windows = [window_ms(lambda: compiled(x), passes) for _ in range(WALL_ROUNDS)]
    except Exception as exc:  # noqa: BLE001 - recorded with the pass; the other timings stand
        torch.cuda.synchronize()
        return {"compiled_error": _why(exc), "compile_mode": mode, "layout_optimization": layout_optimization}
    finally:
        torch.compiler.reset()
    return {"compiled_ms": float(np.median(windows)), "compiled_spread": spread(windows), "compile_s": compile_s,
            "compile_mode": mode, "layout_optimization": layout_optimization}


def weighed_fields(choice) -> dict[str, float]:
    """What a seer policy's picks were weighed against when the policy was set, as a record's
    ``weighed_host_ms``, ``weighed_wall_ms`` and ``weighed_gpu_ms`` (the eager pass or step
    under PyTorch's convolutions, ``seer.torch.convolution.PassTimes``), and the eager pass with
    the picks that confirmed or turned them down, as ``confirmed_host_ms``, ``confirmed_wall_ms``
    and ``confirmed_gpu_ms``, with ``confirmed_ratio`` (its wall time over PyTorch's, the two
    timed taking turns); none of either where not timed."""
    fields = {}
    for prefix, times in (("weighed", choice.weighed), ("confirmed", choice.confirmed)):
        if times is not None:
            fields.update({f"{prefix}_{name}": float(value) for name, value in times._asdict().items()})
    if getattr(choice, "confirmed_ratio", None) is not None:
        fields["confirmed_ratio"] = float(choice.confirmed_ratio)
    return fields


def capture_graph(torch, forward: Callable[[], object]):
    """``forward`` captured in a CUDA graph (after warm-up passes on a side stream, as PyTorch's
    documentation asks), and None; or None and why it could not be captured."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            forward()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(graph):
            forward()
    except Exception as exc:  # noqa: BLE001 - recorded with the pass; the other timings stand
        torch.cuda.synchronize()
        return None, _why(exc)
    return graph, None


def log_session(out_dir: Path, options: ProfileOptions, jobs: Sequence[Job], started: float, measured: int) -> None:
    """One line about this run: machine, software and command, for the provenance."""
    import torch

    from seer.gpu.worker import probe

    info = probe()
    from seer.gpu.cudnn_graph import frontend_version

    info.update({"torch_version": torch.__version__, "torch_cudnn_version": torch.backends.cudnn.version(),
                 "cudnn_frontend_version": frontend_version(),
                 "argv": options.argv, "tag": options.tag, "jobs": len(jobs), "measured": measured,
                 "seconds": round(time.perf_counter() - started, 1),
                 "finished_at": datetime.now(timezone.utc).isoformat(timespec="seconds")})
    RunStore(out_dir, tag=options.tag, kinds=KINDS).log_session(info)


# -- tables and plots -------------------------------------------------------------------
@dataclass
class ProfileTables:
    overall: Path | None  # None where only training steps were profiled
    layers: Path | None
    plots: list[Path]
    passes: pd.DataFrame  # what overall.csv holds
    steps: Path | None = None  # steps.csv, where training steps were profiled
    step_layers: Path | None = None  # step_layers.csv, where their layers' passes were timed too


def of_latest(rows: pd.DataFrame, records: pd.DataFrame) -> pd.DataFrame:
    """``rows`` (a pass's or a step's layers) whose ``collected_at`` is their record's in
    ``records`` (the latest per :data:`PASS_KEY`): those of a pass or step recorded again
    belong to the newer record only."""
    if rows.empty:
        return rows
    stamps = records.set_index(list(PASS_KEY))["collected_at"] if len(records) else pd.Series(dtype=object)
    keep = [stamps.get(tuple(k)) == c for k, c in zip(rows[list(PASS_KEY)].itertuples(index=False),
                                                        rows["collected_at"])]
    return rows[np.asarray(keep, dtype=bool)]


def read_profile(out_dir: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The latest record of every pass and layer in ``OUT/raw`` (every shard's files)."""
    store = RunStore(out_dir, kinds=KINDS)
    passes = store.read("pass_times", PASS_KEY)
    layers = store.read("layer_times", LAYER_KEY)
    if len(passes):
        layers = of_latest(layers, passes)
    passes = passes.reindex(columns=[*OVERALL_COLUMNS, *(c for c in passes.columns if c not in OVERALL_COLUMNS)])
    layers = layers.reindex(columns=list(LAYERS_COLUMNS))
    order = ["network", "math", "size", "policy"]
    return (passes.sort_values(order, kind="stable").reset_index(drop=True),
            layers.sort_values([*order], kind="stable").reset_index(drop=True))


def step_conv_sums(rows: Sequence[dict]) -> dict[str, float | None]:
    """:data:`STEP_CONV_COLUMNS` of a training step from its layers' pass rows: per pass and in
    all, the sum over rows of calls x measured ms, and of calls x predicted ms (None where a
    row has no prediction). Empty without rows."""
    if not rows:
        return {}
    frame = pd.DataFrame(rows)
    measured = frame["calls"] * frame["measured_ms"]
    predicted = frame["calls"] * pd.to_numeric(frame["predicted_ms"], errors="coerce")
    out: dict[str, float | None] = {}
    for pass_ in PASSES:
        at = frame["pass"] == pass_
        out[f"{pass_}_conv_ms"] = float(measured[at].sum())
        out[f"{pass_}_predicted_conv_ms"] = float(predicted[at].sum()) if predicted[at].notna().all() else None
    out["conv_ms"] = float(measured.sum())
    out["predicted_conv_ms"] = float(predicted.sum()) if predicted.notna().all() else None
    return {c: out[c] for c in STEP_CONV_COLUMNS}


def read_step_layers(out_dir: Path) -> pd.DataFrame:
    """The latest pass rows of every training step's layers in ``OUT/raw`` (``step_layers.csv``'s
    rows): those of a step recorded again belong to its newer record only."""
    store = RunStore(out_dir, kinds=KINDS)
    rows = store.read("step_layer_times", STEP_LAYER_KEY)
    if rows.empty:
        return rows
    rows = of_latest(rows, store.read("step_times", PASS_KEY)).reindex(columns=list(STEP_LAYERS_COLUMNS))
    return rows.sort_values(["network", "math", "size", "policy"], kind="stable").reset_index(drop=True)


def read_steps(out_dir: Path) -> pd.DataFrame:
    """The latest record of every training step in ``OUT/raw`` (``steps.csv``'s rows)."""
    steps = RunStore(out_dir, kinds=KINDS).read("step_times", PASS_KEY)
    if steps.empty:
        return steps
    steps = steps.reindex(columns=[*STEPS_COLUMNS, *(c for c in steps.columns if c not in STEPS_COLUMNS)])
    return steps.sort_values(["network", "math", "size", "policy"], kind="stable").reset_index(drop=True)


def untraced_passes(out_dir: Path) -> set[tuple]:
    """Keys of the passes whose latest layer rows were measured without a kernel tracer."""
    _, layers = read_profile(out_dir)
    untraced = layers[layers["verified"] == "untraced"]
    return set(untraced[list(PASS_KEY)].itertuples(index=False, name=None))


def write_tables(out_dir: Path) -> ProfileTables:
    """Write ``overall.csv``, ``layers.csv`` and the plots of ``out_dir`` from its records."""
    from seer.output import AtomicOutput

    out_dir = Path(out_dir)
    if not (out_dir / "raw").is_dir():
        raise InputError("no profile records here; run `seer profile-network ... --out` first", path=out_dir / "raw")
    passes, layers = read_profile(out_dir)
    steps = read_steps(out_dir)
    tables = [("overall.csv", passes), ("layers.csv", layers)] if len(passes) or not len(steps) else []
    if len(steps):
        tables.append(("steps.csv", steps))
        step_layers = read_step_layers(out_dir)
        if len(step_layers):
            tables.append(("step_layers.csv", step_layers))
    written = {}
    for name, frame in tables:
        with AtomicOutput(out_dir / name) as handle:
            frame.to_csv(handle, index=False, float_format="%.6g")
        written[name] = out_dir / name
    plots = plot_profile(passes, layers, out_dir) if len(passes) else []
    return ProfileTables(written.get("overall.csv"), written.get("layers.csv"), plots, passes, written.get("steps.csv"),
                         written.get("step_layers.csv"))


def plot_profile(passes: pd.DataFrame, layers: pd.DataFrame, out_dir: Path) -> list[Path]:
    """Per network, batch and math: convolution time against input size per policy (measured, and
    seer's prediction dashed), and the slowest layers under each policy at the largest input."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from seer.output import AtomicOutput

    paths: list[Path] = []
    ok = passes[passes["status"] == "ok"] if len(passes) else passes
    for (network, batch, math), group in ok.groupby(["network", "batch", "math"], sort=True):
        stem = f"{network}-b{batch}-{math}"
        if group["size"].nunique() > 1:
            fig, axes = plt.subplots(1, 2, figsize=(12, 4.5), constrained_layout=True)
            for policy, runs in group.groupby("policy", sort=False):
                runs = runs.sort_values("size")
                line, = axes[0].plot(runs["size"], runs["conv_ms"], label=policy, lw=1.2)
                if runs["predicted_conv_ms"].notna().any():
                    axes[0].plot(runs["size"], runs["predicted_conv_ms"], ls="--", lw=1, color=line.get_color())
                axes[1].plot(runs["size"], runs["forward_ms"], label=policy, lw=1.2)
            axes[0].set(title=f"{network}, batch {batch}, {math}: convolutions (solid measured, dashed predicted)",
                        xlabel="input size (pixels)", ylabel="ms per forward pass")
            axes[1].set(title=f"{network}, batch {batch}, {math}: whole forward pass", xlabel="input size (pixels)",
                        ylabel="ms")
            for ax in axes:
                ax.grid(alpha=0.3)
            axes[1].legend(fontsize=8)
            path = out_dir / f"{stem}-sizes.png"
            with AtomicOutput(path, binary=True) as handle:
                fig.savefig(handle, dpi=110, format="png")
            plt.close(fig)
            paths.append(path)
        subset = layers[(layers["network"] == network) & (layers["batch"] == batch) & (layers["math"] == math)
                        & (layers["size"] == group["size"].max())] if len(layers) else layers
        if len(subset):
            subset = subset.assign(total_ms=subset["calls"] * subset["measured_ms"])
            top = subset.groupby("name")["total_ms"].max().nlargest(12).index
            table = subset[subset["name"].isin(top)].pivot_table(index="name", columns="policy", values="total_ms")
            table = table.loc[top[::-1]]
            fig, ax = plt.subplots(figsize=(9, 0.35 * len(table) + 1.5), constrained_layout=True)
            table.plot.barh(ax=ax, width=0.8)
            ax.set(title=f"{network}, {math}, input {subset['input'].iloc[0]}: slowest convolution layers",
                   xlabel="ms per forward pass (calls x measured time)", ylabel="")
            ax.grid(axis="x", alpha=0.3)
            path = out_dir / f"{stem}-slowest.png"
            with AtomicOutput(path, binary=True) as handle:
                fig.savefig(handle, dpi=110, format="png")
            plt.close(fig)
            paths.append(path)
    return paths


def mape_over_sizes(passes: pd.DataFrame) -> pd.DataFrame:
    """Per network, batch, math and policy: mean absolute percentage error of the predicted
    convolution time against the measured one, over input sizes."""
    ok = passes[(passes["status"] == "ok") & passes["predicted_conv_ms"].notna() & passes["conv_ms"].notna()]
    error = (ok["predicted_conv_ms"] / ok["conv_ms"] - 1).abs() * 100
    return (ok.assign(ape=error).groupby(["network", "batch", "math", "policy"], sort=False)
            .agg(sizes=("size", "nunique"), mape_pct=("ape", "mean"), max_ape_pct=("ape", "max"))
            .reset_index())

