"""PyTorch convolutions that run a chosen algorithm, cuDNN's or seer's own (GPU hosts).

PyTorch lets cuDNN choose (its heuristics, or ``cudnn.benchmark``'s trial runs); it has no
way to ask for one algorithm. :class:`SeerConv1d`/``2d``/``3d`` are ``nn.Conv*`` modules
that run the chosen algorithm themselves, on the module's own tensors, PyTorch's current
stream and outputs from PyTorch's caching allocator, through a runner built once per
layer (:func:`_runner`): a plan of cuDNN's graph API for an engine that launches the
algorithm's kernels (:mod:`seer.gpu.cudnn_graph`), the legacy ``cudnnConvolutionForward``
where there is none, or one of seer's own kernels through CuPy. Which algorithm runs is
asked of the module's :class:`Choice` once per kind of input (input sizes may change
between calls): :class:`Fixed` for one algorithm everywhere, :class:`Predicted` for seer's
predicted fastest, guarded. Warmed up, the modules capture in CUDA graphs, and under
``torch.compile`` each becomes ``torch.ops.seer.convolution``.

Tensors may be contiguous NC[D]HW or channels-last (``torch.channels_last``/``_3d``, input
and weight alike): cuDNN gets descriptors of that layout, seer's implicit GEMMs run their
channels-last kernel, and the output keeps the input's layout.
Where the chosen algorithm cannot run (cuDNN does not support it for the layer, seer's
kernel plan refuses it, CuPy is missing, a tensor is not fp32, not on a GPU, or in neither
layout), PyTorch's own convolution runs instead and the module warns once per reason;
:attr:`SeerConv2d.fallbacks` keeps the reasons.
Gradients, where asked for, come from PyTorch's own backward operator
(``aten.convolution_backward``, all three in one call, as ``nn.Conv2d``'s own), or, for a
module given backward choices (``apply(..., training=True)``: :class:`PredictedPass` per
backward pass), from the chosen cuDNN backward-data and backward-filter algorithms through
graph-API plans built once (:class:`_BackwardRunner`), on PyTorch's stream and allocator.

:func:`apply` and :func:`force` swap every ``nn.Conv1d/2d/3d`` of a model (exact types: a
subclass may override ``forward``) for one of these, sharing the parameters, so
``state_dict`` keys stay the same; :func:`restore` swaps them back.
"""

from __future__ import annotations

import operator
import threading
import warnings
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F
from torch import nn

from seer.algorithms import SPARSE_SOURCE, Algorithm, get_algorithm, select_algorithms
from seer.errors import InputError
from seer.hardware.kernel_plans import SPLITS_ALWAYS, aligned_bytes
from seer.layers.shapes import ConvShape, ShapeError
from seer.schema import PYTORCH_CHOICE, STEP_OPTIMIZERS, get_math_mode
from seer.torch.layers import CHANNELS_LAST as _CHANNELS_LAST
from seer.torch.layers import layer_of_call

#: What runs a layer where no algorithm is chosen, or the chosen one cannot run.
PYTORCH = "pytorch"

_FUNCTIONAL = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}
_GRADIENTS = {1: (torch.nn.grad.conv1d_input, torch.nn.grad.conv1d_weight),
              2: (torch.nn.grad.conv2d_input, torch.nn.grad.conv2d_weight),
              3: (torch.nn.grad.conv3d_input, torch.nn.grad.conv3d_weight)}


# -- which algorithm ------------------------------------------------------------------------
class Choice:
    """Names the algorithm to run on a layer, or None for PyTorch's own convolution."""

    math: str = "default"
    guard: bool = False  # a guarded choice leaves layers its models do not describe to PyTorch

    def algorithm(self, layer: ConvShape) -> str | None:
        raise NotImplementedError

    def algorithm_in(self, layer: ConvShape, layout: str) -> str | None:
        """The algorithm for ``layer`` with tensors in ``layout``: none where a guarded choice's
        models do not describe that layout (:func:`unmodelled_layout`)."""
        if self.guard and unmodelled_layout(layer, layout):
            return None
        return self.algorithm(layer)

    def describe(self) -> str:
        return type(self).__name__


@dataclass
class Fixed(Choice):
    """One algorithm, cuDNN's or seer's own, on every layer (``seer.torch.force``)."""

    name: str
    math: str = "default"
    pass_: str = "fwd"

    def __post_init__(self) -> None:
        algo = _algorithm(self.name)
        if algo.pass_ != self.pass_:
            raise InputError(f"{algo.name} computes {algo.pass_}, not {self.pass_}", field="algo")
        self.name = algo.name
        self.math = get_math_mode(self.math).name

    def algorithm(self, layer: ConvShape) -> str | None:
        return self.name

    def describe(self) -> str:
        return self.name


#: The guard's model of one convolution in an eager pass: it takes the longer of its host time
#: and its GPU time (the GPU waits for a host slower than itself; a busy GPU hides the host).
#: PyTorch's host time per call (an ``nn.Conv2d`` with a bias) is :data:`GUARD_PYTORCH_HOST_MS`.
#: A seer convolution costs more (:func:`extra_host_ms`): :data:`GUARD_HOST_MS` through a graph
#: plan, :data:`GUARD_LEGACY_HOST_MS` through cuDNN's legacy call (GEMM), :data:`GUARD_OWN_HOST_MS`
#: through seer's own kernel, and :data:`GUARD_LAUNCH_MS` per kernel launched beyond the first
#: (:attr:`seer.algorithms.Algorithm.launches`: some algorithms loop over a layer's groups), and
#: :data:`GUARD_DEPTHWISE_HOST_MS` more on a depthwise layer through cuDNN.
#: PyTorch's own call is taken to launch one kernel: which engine PyTorch runs, and so how
#: many kernels, cannot be told before it runs, and the guard errs toward PyTorch. PyTorch's
#: figure was measured on the H100 machine by benchmarks/host_cost.py
#: (benchmarks/results/h100-host-cost.json); seer's are what a swapped call adds to the host
#: time of a whole pass on the H200 machine (benchmarks/network_host_cost.py, every algorithm
#: forced on three networks, benchmarks/results/h200-network-host-cost/): inside a network a
#: call costs more than called alone in a loop, the more the more kernels it launches, and
#: slows the modules around it (FFT_TILING: about 100 us in passes, 46 us alone).
#: On the GPU the rule is ``seer predict``'s (:mod:`seer.predict.guard`): a pick replaces
#: PyTorch's convolution only where its predicted time x e^margin (its layer kind's calibrated
#: margin) lies below PyTorch's own choice's predicted time; with a model calibrated before the
#: margins, where the upper bound of its 80% interval lies below the lower bound of PyTorch's
#: choice's. The sparse kernels' guard compares the intervals (:class:`SparseInput`). A model run captured in CUDA graphs has no host time per
#: call (``seer.torch.apply(..., cuda_graphs=True)``); ``guard=False`` turns the guard off.
GUARD_PYTORCH_HOST_MS = 0.03
GUARD_HOST_MS = 0.015
GUARD_LEGACY_HOST_MS = 0.075
GUARD_LAUNCH_MS = 0.013
#: On a depthwise layer (``groups == in_ch > 1``) PyTorch runs fp32 through its own kernel, the
#: bias inside, for less host time than its cuDNN calls take (median 21 against 38 us on
#: EfficientNet-V2-S's layers), while a seer call costs the same on both (46 us): a pick there
#: costs this much more (the H200 machine, benchmarks/results/h200-network-host-cost/).
GUARD_DEPTHWISE_HOST_MS = 0.017
#: seer's own kernels (launch arguments prepared once, the bias added inside) cost the host
#: about what PyTorch's convolution costs: inside whole passes at batch 1 with every layer
#: forced, SEER_IMPLICIT_GEMM added a median of -5 us per call in eight passes of seven networks
#: (-12 to +8 us; +30 on ConvNeXt-T, where it ran 4 of 22 layers: 0.12 ms of a 5.1 ms pass) and
#: SEER_DIRECT -6 us in six (-27 to -3), depthwise layers included, so no depthwise extra (H200,
#: benchmarks/network_host_cost.py; benchmarks/results/h200-network-host-cost/,
#: h200-host-cost-bias/ and h200-network-host-cost-own/). The guard counts more than all but those two.
GUARD_OWN_HOST_MS = 0.005
#: One of seer's sparse kernels (:class:`SparseInput`) costs this much more host time per call
#: than PyTorch's: CuPy arrays over PyTorch's tensors, the lists' buffers (from PyTorch's
#: allocator), and its launches; the median over three layers on the H200 machine
#: (``benchmarks/host_cost.py --sparse``, benchmarks/results/h200-sparse-host-cost-torch-allocator.json;
#: 0.10 ms while the buffers came from CuPy's pool).
GUARD_SPARSE_HOST_MS = 0.09
#: In an eager training step (:func:`decide_step`), a swapped module costs
#: :data:`GUARD_STEP_MODULE_MS` more host time per call than PyTorch's ``nn.Conv2d`` (forward and
#: backward: its autograd function and PyTorch's gradients), and each backward pass that runs a
#: chosen algorithm :data:`GUARD_BACKWARD_HOST_MS` more (what cuDNN's legacy call cost; through a
#: graph plan about 0.11 ms on dense layers, 2026-11-29/ there, not yet refitted), with
#: :data:`GUARD_LAUNCH_MS` per launch beyond the first. Medians over four layers and both math
#: modes on the H200 machine, measured by benchmarks/training_host_cost.py
#: (benchmarks/results/h200-training-host-cost/; PyTorch's own module took 0.185 ms). Timed again
#: once :func:`_backward` asked for PyTorch's gradients in one call: the module's median stayed
#: 0.25 ms, and both passes chosen cost 0.67 ms beyond PyTorch's (2026-11-28/ there).
GUARD_STEP_MODULE_MS = 0.25
GUARD_BACKWARD_HOST_MS = 0.25
#: An eager pass whose GPU time (:func:`pass_gpu_ms`) is below this share of its wall time is
#: host-bound: its GPU waits on the host, so a pick's GPU gain may not shorten it while its
#: host time does lengthen it (:meth:`PassTimes.bounds`). On the H200, the batch-32 passes of 15
#: networks under strict FP32 measured 0.97-1.0 of their eager time in GPU time (bursts), the
#: batch-1 passes whose picks made them slower (ResNet-50 and -101, GoogLeNet) 0.58-0.85
#: (benchmarks/results/h200-network-wall-ratio-guard/, forward_ms over eager_ms).
GPU_BOUND_SHARE = 0.9
#: The eager pass with the picks :meth:`Predicted.decide_pass` took must measure at most this
#: share of PyTorch's pass, or every layer goes back to PyTorch's path (:meth:`Predicted.confirm`).
#: The guard's per-call host costs are a model, and passes judged GPU-bound became host-bound
#: and up to 27% slower on quiet H200 hosts (benchmarks/results/h200-network-wall-quiet/). Below
#: 1, so that timing noise rarely keeps a pick that loses.
CONFIRM_SHARE = 0.99
#: The two passes are timed taking turns (:func:`paired_ratio`): :data:`CONFIRM_ROUNDS` rounds of
#: a window of each, of at least :data:`CONFIRM_WINDOW_MS` ms, and the median of the rounds'
#: ratios is taken. Measured minutes apart instead, the host's drift on lent H200 machines
#: passed picks that then measured 4% slower (benchmarks/results/h200-network-wall-confirm-unpaired/).
CONFIRM_ROUNDS = 5
CONFIRM_WINDOW_MS = 50.0


@dataclass(frozen=True)
class LayerGuess:
    """What the guard weighs on one layer: the pick's predicted ms and the upper bound of its
    guard interval, PyTorch's own choice's predicted ms and lower bound (NaN where the model
    has no interval, or no model of PyTorch's choice), and the layer's guard margin
    (:func:`seer.predict.uncertainty.guard_margin`; NaN where the model has none, or where the
    pick is compared with another than PyTorch's choice)."""

    pick: str
    pick_ms: float
    pick_high: float = float("nan")
    pytorch_ms: float = float("nan")
    pytorch_low: float = float("nan")
    margin: float = float("nan")

    @property
    def pick_slowest(self) -> float:
        """The pick's time as the guard takes it: with a margin, its point x e^margin (the margin
        bounds the error of the two times' ratio); else its interval's upper bound, else its point."""
        if self.margin == self.margin:
            return float(self.pick_ms * np.exp(self.margin))
        return self.pick_high if self.pick_high == self.pick_high else self.pick_ms

    @property
    def pytorch_fastest(self) -> float:
        """PyTorch's time as the guard takes it: with a margin, its point (the margin covers both
        times' errors); else its interval's lower bound, else its point."""
        if self.margin == self.margin:
            return self.pytorch_ms
        return self.pytorch_low if self.pytorch_low == self.pytorch_low else self.pytorch_ms


@dataclass
class Predicted(Choice):
    """seer's predicted-fastest algorithm per layer among ``algorithms`` (names or groups, as
    ``seer predict --algo``; cuDNN's by default), predicted once per distinct layer.

    With ``guard`` (the default), a layer keeps PyTorch's own convolution unless the pick is
    surely faster than PyTorch's own choice, as ``seer predict``'s ``recommended`` column
    says, host time included (:func:`keeps_pick`); ``guarded`` lists the layers kept that
    way, with the pick's and PyTorch's predicted times.
    """

    model: object  # seer.predict.model.Model
    math: str = "default"
    picks: dict = field(default_factory=dict)
    algorithms: str = "cudnn"
    guard: bool = True
    captured: bool = False  # the model runs captured in CUDA graphs: no host time per call

    def __post_init__(self) -> None:
        self.math = get_math_mode(self.math).name
        try:
            ranked = select_algorithms(self.algorithms)
        except KeyError as exc:
            raise InputError(exc.args[0], field="algorithms") from None
        # seer's sparse kernels are ranked only for inputs known to hold zeros (SparseInput).
        self.sparse_kernels = tuple(a for a in ranked if get_algorithm(a).source == SPARSE_SOURCE)
        self._ranked = [a for a in ranked if a not in self.sparse_kernels]
        if not self._ranked:
            raise InputError("name at least one dense algorithm to pick among (the sparse kernels run only on "
                             "layers whose input sparsity is given)", field="algorithms")
        self._lock = threading.Lock()
        self.guesses: dict[ConvShape, LayerGuess] = {}
        self.guarded: dict[ConvShape, tuple[str, float, str, float]] = {}
        self._decided: dict[ConvShape, str | None] = {}
        self.weighed: PassTimes | None = None  # the eager pass (or step) the picks were weighed against
        self.confirmed: PassTimes | None = None  # the eager pass with the picks (confirm), where timed
        self.confirmed_ratio: float | None = None  # its wall time over PyTorch's, timed taking turns
        # decide_pass's candidates: (layer, GPU ms gained, host ms added) per layer weighed; decide_step's
        # are keyed (id of the pass's choice, layer), and the keys it took are kept apart.
        self._candidates: list[tuple[object, float, float]] = []
        self._step_chosen: set = set()

    def prepare(self, layers: Iterable[ConvShape]) -> None:
        """Predict every layer not yet seen, in one call to the model."""
        from seer.gpu.answers import cudnn_workspaces
        from seer.predict.guard import GUARD_LEVEL

        with self._lock:
            new = sorted({layer for layer in layers if layer not in self.picks})
            if not new:
                return
            # On a GPU cuDNN says which of its algorithms of the model's pass run each layer (and, for
            # a backward pass, their kernel paths), instead of the model's guess.
            answers = cudnn_workspaces(new, self.math, pass_=self.model.pass_) if torch.cuda.is_available() else None
            best = self.model.pick(new, self.math, algorithms=self._ranked, workspaces=answers)
            columns = ["best_algo", "best_ms", f"best_high{GUARD_LEVEL}", "pytorch_ms", f"pytorch_low{GUARD_LEVEL}"]
            margins = guard_margins(self.model, self.math, new)
            for layer, (algo, *times), margin in zip(new, best[columns].itertuples(index=False), margins):
                self.picks[layer] = None if pd.isna(algo) else str(algo)  # None: no algorithm predicted to run
                if self.picks[layer] is not None:
                    self.guesses[layer] = LayerGuess(self.picks[layer], *(float(v) for v in times), float(margin))

    def algorithm(self, layer: ConvShape) -> str | None:
        if layer not in self.picks:
            self.prepare([layer])
        pick = self.picks[layer]
        if not self.guard or pick is None:
            return pick
        if layer not in self._decided:
            self._decided[layer] = self._guarded(layer, pick)
        return self._decided[layer]

    def _keep(self, layer: ConvShape, wins: bool) -> str | None:
        """The decision on ``layer``: its pick where it ``wins``, else PyTorch's (recorded)."""
        guess = self.guesses[layer]
        if not wins:
            self.guarded[layer] = (guess.pick, guess.pick_ms, PYTORCH, guess.pytorch_ms)
        return guess.pick if wins else None

    def _guarded(self, layer: ConvShape, pick: str) -> str | None:
        """``pick``, or None where it is not surely faster than PyTorch's own choice."""
        return self._keep(layer, keeps_pick(self.guesses[layer], cudnn_heuristic_choice(layer, self.math),
                                            captured=self.captured, extra_ms=extra_host_ms(pick, layer, self.math)))

    def decide_pass(self, layers: Iterable[ConvShape], times: PassTimes) -> None:
        """Decide every layer of one eager forward pass at once (``layers``: one per call),
        given the pass under PyTorch's own convolutions (``times``: :func:`eager_pass_times`).
        The pass takes about the longer of its host and GPU times (:meth:`PassTimes.bounds`), so a
        pick's GPU gain (the least the intervals allow) counts only while the pass is GPU-bound,
        and its host cost only once it is host-bound (:func:`pass_picks`). Each pick must also be
        surely faster on the GPU."""
        calls = Counter(layers)
        self.prepare(calls)
        candidates, wins_on_gpu = [], {}
        for layer, count in calls.items():
            if self.picks[layer] is None:
                continue
            guess = self.guesses[layer]
            wins_on_gpu[layer] = keeps_pick(guess, cudnn_heuristic_choice(layer, self.math), captured=True)
            gain = guess.pytorch_fastest - guess.pick_slowest
            if wins_on_gpu[layer] and gain == gain:  # else lost on the GPU alone, or nothing to weigh it against (kept)
                candidates.append((layer, count * gain, count * extra_host_ms(guess.pick, layer, self.math)))
        weighed = {layer for layer, _, _ in candidates}
        self.weighed, self._candidates = times, candidates
        chosen = pass_picks(candidates, *times.bounds())
        for layer, wins in wins_on_gpu.items():
            self._decided[layer] = self._keep(layer, wins and (layer not in weighed or layer in chosen))

    def picked(self) -> bool:
        """Whether any layer decided so far runs its pick (not PyTorch's path)."""
        return any(pick is not None for pick in self._decided.values())

    def confirm(self, times: PassTimes, final: bool = True, ratio: float | None = None) -> bool:
        """Keep the picks :meth:`decide_pass` took only where the eager pass with them (``times``,
        recorded as ``confirmed``) takes at most :data:`CONFIRM_SHARE` of PyTorch's: ``ratio``,
        the two timed taking turns (:func:`paired_ratio`), else the wall time of the pass they
        were weighed against. The host costs the weighing counts are a model; this is the
        measurement. Else, unless ``final``, the picks are weighed again at the host cost per
        pick that the measurement implies (:meth:`_fewer_picks`), and where fewer of them
        would still shorten the pass, only those stay, to be timed again; otherwise every
        layer goes back to PyTorch's path (recorded in ``guarded``). Returns whether the picks
        stay as they were."""
        self.confirmed, self.confirmed_ratio = times, ratio
        if self.weighed is None:
            return True
        if ratio is None:
            ratio = times.wall_ms / self.weighed.wall_ms
        if ratio <= CONFIRM_SHARE:
            return True
        fewer = None if final else self._fewer_picks(ratio * self.weighed.wall_ms)
        weighed = {layer for layer, _, _ in self._candidates}
        for layer, pick in list(self._decided.items()):
            if pick is not None and (fewer is None or (layer in weighed and layer not in fewer)):
                self._decided[layer] = self._keep(layer, False)
        return False

    def confirm_step(self, ratio: float, backward: Iterable["PredictedPass | None"] = (), final: bool = True) -> bool:
        """Keep the picks of every pass that :func:`decide_step` took only where an eager training
        step with them takes at most :data:`CONFIRM_SHARE` of PyTorch's step (``ratio``, the two
        timed taking turns: :func:`paired_ratio`). Else, unless ``final``, they are weighed again
        at the host cost per pick that the measurement implies, as :meth:`confirm` does for a
        forward pass (:meth:`_fewer_picks`), and only those that would still shorten the step
        stay, to be timed again; otherwise every pass of every layer goes back to PyTorch's path
        (the forward's recorded in ``guarded``). Returns whether the picks stay as they were."""
        self.confirmed_ratio = ratio
        if ratio <= CONFIRM_SHARE:
            return True
        taken = [c for c in self._candidates if c[0] in self._step_chosen]
        fewer = None if final or self.weighed is None else self._fewer_picks(ratio * self.weighed.wall_ms, taken)
        self._step_chosen = fewer or set()
        for layer, pick in list(self._decided.items()):
            if pick is not None and (id(self), layer) not in self._step_chosen:
                self._decided[layer] = self._keep(layer, False)
        for pass_choice in backward:
            if pass_choice is not None:
                pass_choice.picks = {layer: pick if (id(pass_choice), layer) in self._step_chosen else None
                                     for layer, pick in pass_choice.picks.items()}
        return False

    def _fewer_picks(self, wall_ms: float, taken: Sequence[tuple] | None = None) -> set | None:
        """The picks taken (``taken``: :func:`pass_picks`'s candidates; by default those of the
        forward pass's layers still running their pick) that still shorten the pass or step
        (:func:`pass_picks`) once each one's host cost is scaled so that together they add what
        the measured one (``wall_ms``, taken as host-bound) shows beyond the host time they were
        weighed with; None where it is not slower than its GPU time was counted to be (so the
        host is not why), where the costs were not undercounted, or where no smaller set would
        shorten it."""
        if taken is None:
            taken = [c for c in self._candidates if self._decided.get(c[0]) is not None]
        host_ms, gpu_ms = self.weighed.bounds()
        added = sum(cost for _, _, cost in taken)
        if not taken or added <= 0 or wall_ms <= gpu_ms - sum(gain for _, gain, _ in taken):
            return None
        scale = (wall_ms - host_ms) / added
        if scale <= 1:
            return None
        fewer = pass_picks([(layer, gain, cost * scale) for layer, gain, cost in taken], host_ms, gpu_ms)
        return fewer if 0 < len(fewer) < len(taken) else None

    def describe(self) -> str:
        return "seer"


def unmodelled_layout(layer: ConvShape, layout: str) -> bool:
    """Whether the models' times, which are NC[D]HW's, do not hold for ``layer`` run in
    ``layout``, so that a guarded choice leaves every pass of it to PyTorch."""
    # Channels-last, PyTorch runs a depthwise layer in 0.30-0.90 of its NCHW time (median 0.67
    # over 70 layers of six networks), 1.9-4.4x faster than seer's direct kernel there (H200,
    # benchmarks/results/h200-direct-channels-last/), and in ConvNeXt-T's training step its wgrad
    # took 3.4x, its forward and dgrad 0.4-0.7x the NCHW prediction
    # (benchmarks/results/h200-training-steps-confirmed-20261129/): a gain predicted against
    # NCHW times is not there.
    return layout == "nhwc" and layer.is_depthwise


#: The sparse kernel seer.torch ranks unless told otherwise: the other two wait for the GPU in
#: every call (they count the non-zeros on the host), which stalls an eager network's pipeline.
DEFAULT_SPARSE_KERNELS = ("SEER_SPARSE_GATHER",)


@dataclass
class SparseInput(Choice):
    """The choice for a module whose input holds a known share of zeros (``sparsity``, as
    :func:`seer.torch.input_sparsity` measures it on a calibration batch): one of seer's
    sparse ``kernels`` where ``seer predict`` ranks it fastest at that sparsity and it is
    surely faster than what ``dense`` would run there (the upper bound of its interval below
    the lower bound of the dense pick's, or of PyTorch's own choice's where ``dense`` leaves
    the layer to PyTorch), its host time counted unless captured, its times predicted at the
    input's ``crowding`` (how crowded its non-zeros are on pixels, as
    :func:`seer.torch.input_sparsity` measures it; NaN: even), which must lie within what the
    sparse model learnt (:attr:`seer.predict.sparse.SparseTimeModel.max_crowding`); else
    ``dense``'s choice. ``guesses`` keeps, per layer, the sparse kernel's and the alternative's
    predicted times."""

    dense: Predicted
    sparsity: float
    kernels: tuple[str, ...] = DEFAULT_SPARSE_KERNELS
    crowding: float = float("nan")  # NaN: not measured (a share given by hand)

    def __post_init__(self) -> None:
        self.math = self.dense.math
        self.picks: dict[ConvShape, str | None] = {}
        self.guesses: dict[ConvShape, LayerGuess] = {}

    def algorithm(self, layer: ConvShape) -> str | None:
        if layer not in self.picks:
            self.picks[layer] = self._sparse_pick(layer)
        return self.picks[layer] or self.dense.algorithm(layer)

    def algorithm_in(self, layer: ConvShape, layout: str) -> str | None:
        # The sparse kernels take NC[D]HW tensors only.
        return self.algorithm(layer) if layout == "nchw" else self.dense.algorithm_in(layer, layout)

    def _sparse_pick(self, layer: ConvShape) -> str | None:
        from seer.gpu.answers import cudnn_workspaces
        from seer.layers.shapes import layer_frame
        from seer.predict.guard import GUARD_LEVEL

        sparse_model = self.dense.model.sparse
        if self.dense.guard and sparse_model is not None and self.crowding > sparse_model.max_crowding:
            return None  # more crowded than any input the sparse model learnt from
        frame = layer_frame([layer])
        frame["sparsity"] = self.sparsity
        frame["crowding"] = self.crowding
        answers = cudnn_workspaces([layer], self.math) if torch.cuda.is_available() else None
        rows = self.dense.model.predict(frame, self.math, algorithms=[*self.dense._ranked, *self.kernels],
                                        workspaces=answers)
        first = rows.iloc[0]
        if first["algo"] not in self.kernels:  # a dense algorithm is faster at this sparsity
            return None
        if not self.dense.guard:
            return str(first["algo"])
        before = self.dense.algorithm(layer)
        alternative = rows[rows["algo"] == before] if before is not None else rows.iloc[:0]
        if len(alternative):
            other_ms, other_low = alternative["predicted_ms"].iloc[0], alternative[f"predicted_ms_low{GUARD_LEVEL}"].iloc[0]
        else:
            other_ms, other_low = first["pytorch_ms"], first[f"pytorch_low{GUARD_LEVEL}"]
        # No margin: the guard's margins are calibrated on the dense pick's ratio to PyTorch's
        # choice, not on a sparse kernel's to a dense algorithm, so this stays on the interval rule.
        guess = LayerGuess(str(first["algo"]), float(first["predicted_ms"]),
                           float(first[f"predicted_ms_high{GUARD_LEVEL}"]), float(other_ms), float(other_low))
        self.guesses[layer] = guess
        wins = keeps_pick(guess, None, captured=self.dense.captured,
                          extra_ms=extra_host_ms(guess.pick, layer, self.math))
        return guess.pick if wins else None

    def describe(self) -> str:
        crowded = f", crowding {self.crowding:.3g}" if self.crowding == self.crowding else ""
        return f"seer, input {self.sparsity:.3g} zeros{crowded}"


@dataclass
class PredictedPass(Choice):
    """seer's recommendation for one backward pass of a layer (``seer predict --pass``'s
    ``recommended``: the pick where it is surely faster than PyTorch's own dgrad or wgrad,
    else None for PyTorch's), predicted once per distinct layer; ``deterministic`` leaves
    out the algorithms whose repeated calls may differ in their last bits. Unless
    ``captured`` (CUDA graphs), the pick must also win with its host time counted, as the
    forward's guard counts it (:func:`keeps_pick`): the backward calls go through cuDNN's
    graph-API plans (the legacy call where a plan cannot take the tensors), and some algorithms
    launch kernels per group of the layer."""

    model: object  # seer.predict.model.Model of a backward pass
    math: str = "default"
    guard: bool = True
    deterministic: bool = False
    captured: bool = False

    def __post_init__(self) -> None:
        self.math = get_math_mode(self.math).name
        self.pass_ = self.model.pass_
        if self.pass_ == "fwd":
            raise InputError("a backward choice needs a backward pass's model", field="pass")
        algorithms = self.model.predictor(self.math).algorithms
        self._ranked = [a for a in algorithms if get_algorithm(a).deterministic] if self.deterministic else None
        self._lock = threading.Lock()
        self.picks: dict[ConvShape, str | None] = {}
        self.guesses: dict[ConvShape, LayerGuess] = {}

    def prepare(self, layers: Iterable[ConvShape]) -> None:
        with self._lock:
            new = sorted({layer for layer in layers if layer not in self.picks})
            if not new:
                return
            from seer.predict.guard import GUARD_LEVEL

            best = self.model.pick(new, self.math, algorithms=self._ranked)
            columns = ["best_algo", "best_ms", f"best_high{GUARD_LEVEL}", "pytorch_ms", f"pytorch_low{GUARD_LEVEL}"]
            margins = guard_margins(self.model, self.math, new)
            for layer, (algo, *times), margin in zip(new, best[columns].itertuples(index=False), margins):
                algo = None if pd.isna(algo) or algo == PYTORCH_CHOICE else str(algo)
                if algo is not None:
                    self.guesses[layer] = guess = LayerGuess(algo, *(float(v) for v in times), float(margin))
                    if self.guard and not keeps_pick(guess, None, captured=self.captured,
                                                     extra_ms=extra_host_ms(algo, layer, self.math)):
                        algo = None
                self.picks[layer] = algo

    def algorithm(self, layer: ConvShape) -> str | None:
        if layer not in self.picks:
            self.prepare([layer])
        return self.picks[layer]

    def describe(self) -> str:
        return f"seer {self.pass_}"


def decide_step(choice: Predicted, backward: Sequence["PredictedPass | None"], layers: Iterable[ConvShape],
                times: PassTimes) -> None:
    """Decide every layer of an eager training step at once (``layers``: one per call): which of
    its passes (forward, dgrad, wgrad) run seer's pick, given the step under PyTorch's own
    convolutions (``times``: :func:`eager_step_times`). As :meth:`Predicted.decide_pass` does
    for a forward pass, the picks that surely beat PyTorch's own on the GPU (``seer predict``'s
    rule) are weighed for the whole step (:func:`pass_picks`), each costing its host time (:func:`extra_host_ms`, and
    :data:`GUARD_STEP_MODULE_MS` per swapped module, shared by its picks); the others stay
    PyTorch's. Overrides each choice's own per-pass guard."""
    passes = [c for c in backward if c is not None]
    calls = Counter(layers)
    choice.prepare(calls)
    for pass_choice in passes:
        pass_choice.prepare(calls)
    candidates = []
    for layer, count in calls.items():
        options = []
        guesses = [(choice, choice.guesses.get(layer), cudnn_heuristic_choice(layer, choice.math))]
        guesses += [(p, p.guesses.get(layer), None) for p in passes]
        for chooser, guess, heuristic in guesses:
            if guess is not None and keeps_pick(guess, heuristic, captured=True):
                gain = guess.pytorch_fastest - guess.pick_slowest
                if gain == gain:  # else nothing to weigh it against
                    options.append((chooser, gain, extra_host_ms(guess.pick, layer, chooser.math)))
        for chooser, gain, extra in options:
            candidates.append(((id(chooser), layer), count * gain,
                               count * (extra + GUARD_STEP_MODULE_MS / len(options))))
    choice.weighed, choice._candidates = times, candidates
    chosen = choice._step_chosen = pass_picks(candidates, *times.bounds())
    for layer in calls:
        if choice.picks.get(layer) is not None:
            choice._decided[layer] = choice._keep(layer, (id(choice), layer) in chosen)
        for pass_choice in passes:
            guess = pass_choice.guesses.get(layer)
            pass_choice.picks[layer] = guess.pick if guess is not None and (id(pass_choice), layer) in chosen else None


def pass_picks(candidates: Iterable[tuple[object, float, float]], host_ms: float, gpu_ms: float) -> set:
    """The keys of ``candidates`` (key, GPU ms gained, host ms added per pass) that shorten an
    eager pass modelled as the longer of its host time (``host_ms``, plus what the picks
    add) and its GPU time (``gpu_ms``, less what the picks gain; :meth:`PassTimes.bounds`): the
    cheapest in host time per GPU ms first, each taken while the pass gets shorter."""
    host, gpu, chosen = host_ms, gpu_ms, set()
    for key, gain, cost in sorted(candidates, key=lambda c: c[2] / c[1] if c[1] > 0 else float("inf")):
        if gain <= 0:
            continue
        if max(host + cost, gpu - gain) < max(host, gpu):
            host, gpu = host + cost, gpu - gain
            chosen.add(key)
    return chosen


class PassTimes(NamedTuple):
    """An eager pass (or training step) as :func:`decide_step` and :meth:`Predicted.decide_pass`
    weigh it: ms to enqueue one, ms per pass back to back, and ms of GPU time (NaN: unknown)."""

    host_ms: float
    wall_ms: float
    gpu_ms: float = float("nan")

    def bounds(self) -> tuple[float, float]:
        """The host and GPU ms that :func:`pass_picks` models the pass by. A pass whose GPU is
        busy for at least :data:`GPU_BOUND_SHARE` of its wall time (or of unknown GPU time) is
        GPU-bound: its GPU time is its wall time (which holds the launch gaps). Otherwise the
        GPU waits on the host for the rest, and the host, however long it takes to enqueue, is
        what the pass waits on: its host time is the wall time, so only a pick that adds no
        host time can shorten it."""
        if self.gpu_ms == self.gpu_ms and self.gpu_ms < GPU_BOUND_SHARE * self.wall_ms:
            return max(self.host_ms, self.wall_ms), self.gpu_ms
        return self.host_ms, self.wall_ms


def _pass_times(call, repeats: int, device: torch.device) -> PassTimes:
    """The host ms to enqueue one ``call`` (GPU idle at its start), the wall ms per call of
    ``repeats`` back to back, medians of a few repetitions after a warm-up, and its GPU ms
    (:func:`pass_gpu_ms`)."""
    from statistics import median
    from time import perf_counter

    for _ in range(3):
        call()
    torch.cuda.synchronize()
    hosts = []
    for _ in range(5):
        started = perf_counter()
        call()
        hosts.append(perf_counter() - started)
        torch.cuda.synchronize()
    wall_ms = median(window_ms(call, repeats) for _ in range(3))
    return PassTimes(median(hosts) * 1e3, wall_ms, pass_gpu_ms(call, wall_ms, device))


def pass_gpu_ms(call, wall_ms: float, device: torch.device) -> float:
    """GPU ms of one ``call`` (a pass on ``device`` that took ``wall_ms`` eager), as the collector
    times a layer: bursts behind a spinning kernel (:class:`seer.gpu.timing.BurstTimer`), which keep the
    host out and the launch gaps in; NaN without CuPy (seer's ``gpu`` extra), or where timing
    fails, and the pass is then taken as GPU-bound (:meth:`PassTimes.bounds`)."""
    import importlib.util

    if importlib.util.find_spec("cupy") is None:
        return float("nan")
    import cupy

    from seer.gpu.timing import BurstTimer

    index = torch.device(device).index or 0
    try:  # the spin and the events on PyTorch's current stream, where the pass runs
        with cupy.cuda.Device(index), _cupy_stream(cupy, torch.cuda.current_stream(index).cuda_stream, index):
            times, _, _ = BurstTimer().measure(call, wall_ms, budget_ms=max(10.0, 5 * wall_ms), min_reps=3,
                                               max_reps=5)
    except Exception:  # noqa: BLE001 - the pass is then weighed as before: GPU time its wall time
        torch.cuda.synchronize()
        return float("nan")
    return float(np.median(times))


def window_ms(call, passes: int) -> float:
    """Plain wall time (ms) per call of ``passes`` back-to-back ``call``s, host time included, as
    a user runs them: synchronize, the calls, synchronize."""
    from time import perf_counter

    torch.cuda.synchronize()
    started = perf_counter()
    for _ in range(passes):
        call()
    torch.cuda.synchronize()
    return (perf_counter() - started) / passes * 1e3


def paired_ratio(model: nn.Module, example: torch.Tensor, swap: Callable[[], object], wall_ms: float,
                 rounds: int = CONFIRM_ROUNDS, call: Callable[[], object] | None = None) -> float:
    """The eager forward pass of ``model`` on ``example`` (or ``call``, e.g. a training step of
    ``model``: :func:`training_step`) with seer's convolutions (``swap`` puts them in) over the
    same with PyTorch's own (:func:`restore`): the median over ``rounds`` rounds of the ratio
    of a window of each (enough passes of about ``wall_ms`` to fill :data:`CONFIRM_WINDOW_MS`),
    taking turns, so that the host's drift falls on both alike. Each window follows a warm-up
    pass. ``model`` ends swapped."""
    from contextlib import nullcontext
    from math import ceil
    from statistics import median

    passes = max(2, ceil(CONFIRM_WINDOW_MS / max(wall_ms, 1e-3)))
    run = call or (lambda: model(example))
    ratios = []
    with torch.no_grad() if call is None else nullcontext():
        for _ in range(rounds):
            restore(model)
            run()
            plain = window_ms(run, passes)
            swap()
            run()
            ratios.append(window_ms(run, passes) / plain)
    return median(ratios)


def eager_pass_times(model: nn.Module, example: torch.Tensor, passes: int = 10) -> PassTimes:
    """``model``'s eager forward pass on ``example`` under ``torch.no_grad()`` (:func:`_pass_times`)."""
    with torch.no_grad():
        return _pass_times(lambda: model(example), passes, example.device)


def training_step(model: nn.Module, x: torch.Tensor, optimizer: str = "none"):
    """One training step of ``model`` on ``x``, as a callable: the gradients cleared (set to
    None, as ``optimizer.zero_grad()`` does), the forward pass, the mean of its output as the
    loss, the backward pass, and, with ``optimizer="sgd"``, an SGD step with momentum (lr 1e-3,
    so that the weights barely move). The first output of a model that returns several
    (GoogLeNet's and Inception's auxiliary logits in train mode) makes the loss."""
    if optimizer not in STEP_OPTIMIZERS:
        raise InputError(f"unknown optimizer {optimizer!r}; choose one of: {', '.join(STEP_OPTIMIZERS)}",
                         field="optimizer")
    parameters = [p for p in model.parameters() if p.requires_grad]
    sgd = torch.optim.SGD(parameters, lr=1e-3, momentum=0.9) if optimizer == "sgd" else None

    def step() -> None:
        for parameter in parameters:
            parameter.grad = None
        output = model(x)
        if not hasattr(output, "backward"):
            output = output[0]
        output.float().mean().backward()
        if sgd is not None:
            sgd.step()

    return step


def eager_step_times(model: nn.Module, example: torch.Tensor, steps: int = 5) -> PassTimes:
    """An eager training step (:func:`training_step`) of a copy of ``model`` in train mode on
    ``example`` (the model's own state and gradients are left alone; :func:`_pass_times`)."""
    import copy

    return _pass_times(training_step(copy.deepcopy(model).train(), example), steps, example.device)


def keeps_pick(guess: LayerGuess, heuristic: str | None, captured: bool = False,
               extra_ms: float = GUARD_HOST_MS) -> bool:
    """Whether ``guess.pick`` should replace PyTorch's convolution, given the algorithm cuDNN's
    heuristic names (None: unknown, or none that runs): not where the heuristic names the pick
    itself (PyTorch runs it already); else where ``seer predict`` recommends it (with the guard's
    margin, the pick's time x e^margin below PyTorch's; without, the pick's interval below
    PyTorch's: :func:`seer.predict.guard.recommended`) and, in an eager pass, the pick's time
    (the longer of its host and GPU time, its host time ``extra_ms`` more than PyTorch's:
    :func:`extra_host_ms`; GPU time only when ``captured`` in CUDA graphs) is still shorter
    than PyTorch's, each GPU time as the guard takes it (:attr:`LayerGuess.pick_slowest`,
    :attr:`LayerGuess.pytorch_fastest`). Without a prediction of PyTorch's time the pick
    stands, as in ``seer predict``."""
    from seer.predict.guard import recommended

    if heuristic == guess.pick:
        return False
    surely = recommended([guess.pick], [guess.pick_ms], [guess.pick_high], [guess.pytorch_ms],
                         [guess.pytorch_low], [guess.margin])[0] == guess.pick
    if not surely or captured or guess.pytorch_ms != guess.pytorch_ms:
        return surely
    host = GUARD_PYTORCH_HOST_MS
    return max(host + extra_ms, guess.pick_slowest) < max(host, guess.pytorch_fastest)


def guard_margins(model, math: str, layers: Sequence[ConvShape]) -> np.ndarray:
    """Per layer, the guard margin of ``model``'s ``math`` predictor for the layer's kind (NaN
    where the model has none: the guard then compares the intervals)."""
    from seer.layers.shapes import layer_frame
    from seer.predict.uncertainty import interval_kind

    return model.predictor(math).guard_margin(interval_kind(layer_frame(list(layers))))


def extra_host_ms(algorithm: str, layer: ConvShape, math: str) -> float:
    """Host ms per call that running ``algorithm`` on ``layer`` costs beyond PyTorch's own call
    (the guard's model: :data:`GUARD_HOST_MS` and kin)."""
    algo = get_algorithm(algorithm)
    if algo.source == SPARSE_SOURCE:  # its launches are in the measured figure
        return GUARD_SPARSE_HOST_MS
    if algo.pass_ != "fwd":
        path = GUARD_BACKWARD_HOST_MS
    elif algo.source == "cupy":  # a split reduction's output is zeroed first: a launch more
        path = GUARD_OWN_HOST_MS + GUARD_LAUNCH_MS * (algo.name in SPLITS_ALWAYS)
    else:
        path = GUARD_LEGACY_HOST_MS if algo.engines is None else GUARD_HOST_MS
        if layer.is_depthwise:
            path += GUARD_DEPTHWISE_HOST_MS
    return path + GUARD_LAUNCH_MS * (algo.launches.of(layer, math) - 1)


def cudnn_heuristic_choice(layer: ConvShape, math: str) -> str | None:
    """The algorithm cuDNN's heuristic (``cudnnGetConvolutionForwardAlgorithm_v7``) ranks first
    among those that run ``layer``, asked on the current GPU; None where it names none."""
    from seer.algorithms import ALGORITHMS

    state = _device_state(torch.device("cuda", torch.cuda.current_device()))
    names = {a.enum: a.name for a in ALGORITHMS if a.source == "cudnn"}
    with state.cudnn.ConvolutionProblem(state.legacy_handle, layer, math) as problem:
        for choice in problem.heuristic():
            if choice.status == 0 and choice.algo in names:
                return names[choice.algo]
    return None


def _algorithm(name: str, source: str | None = None) -> Algorithm:
    try:
        algo = get_algorithm(name)
    except KeyError as exc:
        raise InputError(exc.args[0], field="algo") from None
    if source is not None and algo.source != source:
        raise InputError(f"{algo.name} is not a cuDNN algorithm", field="algo")
    if algo.family == "policy":  # measured beside the algorithms, but nothing seer can run
        raise InputError(f"{algo.name} is PyTorch's own choice, not an algorithm to force: a plain nn.Conv*d runs it",
                         field="algo")
    return algo


# -- running one layer: a runner per (layer, algorithm, math, layout, device), built once --
class _Runner:
    """Runs one layer by one algorithm on tensors packed in ``layout``; built once, so a call
    is an output allocation, the launch, and the bias.

    ``path`` says what runs it: ``graph`` (a plan of cuDNN's graph API, built once),
    ``legacy`` (``cudnnConvolutionForward``, which builds a plan per call: about 200 us of
    host time), or ``cupy`` (seer's own kernel, arguments prepared once).
    """

    path = ""
    #: Bytes (a power of two) that the input's and the weight's addresses must be a multiple of (0: any).
    alignment = 0

    def __init__(self, layer: ConvShape, layout: str, device: torch.device, dims: int) -> None:
        self.layer, self.layout, self.device, self.dims = layer, layout, device, dims
        self.device_index = device.index
        self.out_dims = layer.output_dims
        memory_format = _CHANNELS_LAST[len(self.out_dims) - 2] if layout == "nhwc" else torch.contiguous_format
        self.out_strides = torch.empty(self.out_dims, device="meta", memory_format=memory_format).stride()
        self.bias_shape = (1, -1, *([1] * dims))
        self.zero_output = False
        self.state = _device_state(device)

    def misaligned(self, x: torch.Tensor, w: torch.Tensor) -> bool:
        """Whether ``x`` or ``w`` lies off the :attr:`alignment` this runner needs."""
        return bool(self.alignment) and bool((x.data_ptr() | w.data_ptr()) % self.alignment)

    def shaped(self, bias: torch.Tensor | None) -> torch.Tensor | None:
        """``bias`` as the view the output adds (what :meth:`__call__` takes)."""
        return None if bias is None else bias.view(self.bias_shape)

    def launch(self, x: torch.Tensor, w: torch.Tensor, y: torch.Tensor, bias: torch.Tensor | None = None) -> bool:
        """Enqueue the convolution into ``y``; whether it also added ``bias`` (:meth:`shaped`)."""
        raise NotImplementedError

    def __call__(self, x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        """The convolution of ``x`` by ``w``, plus ``bias`` already :meth:`shaped`."""
        if torch.cuda.current_device() != self.device_index:  # as PyTorch's own ops, on the tensors' GPU
            with torch.cuda.device(self.device_index):
                return self(x, w, bias)
        if self.dims == 1:  # a 1D convolution is a 2D one of height 1, as PyTorch hands it to cuDNN
            x, w = x.unsqueeze(-2), w.unsqueeze(-2)
        y = x.new_empty_strided(self.out_dims, self.out_strides)
        if self.zero_output:
            y.zero_()
        added = self.launch(x, w, y, bias)
        if self.dims == 1:
            y = y.squeeze(-2)
        if bias is not None and not added:
            y.add_(bias)
        return y


class _GraphRunner(_Runner):
    path = "graph"

    def __init__(self, layer, layout, device, dims, algo: Algorithm, math: str) -> None:
        from seer.gpu.cudnn_graph import POINTER_ALIGNMENT, GraphConvolution

        super().__init__(layer, layout, device, dims)
        self.alignment = POINTER_ALIGNMENT
        self.plan = GraphConvolution.realising(self.state.graph_handle, layer, math, algo.engines.of(layer, math),
                                               layout)
        self.workspace_bytes = self.plan.workspace_bytes
        self._run = self.plan.run

    def launch(self, x, w, y, bias=None) -> bool:
        state = self.state
        stream = state.graph_on(torch.cuda.current_stream(self.device_index).cuda_stream)
        size = self.workspace_bytes
        self._run(x.data_ptr(), w.data_ptr(), y.data_ptr(), state.workspace(stream, size) if size else 0)
        return False


class _LegacyRunner(_Runner):
    path = "legacy"

    def __init__(self, layer, layout, device, dims, algo: Algorithm, math: str) -> None:
        super().__init__(layer, layout, device, dims)
        self.problem = self.state.cudnn.ConvolutionProblem(self.state.legacy_handle, layer, math, layout)
        self.algo = algo.enum
        self.workspace_bytes = self.problem.workspace_size(self.algo)

    def launch(self, x, w, y, bias=None) -> bool:
        stream = torch.cuda.current_stream(self.device_index).cuda_stream
        self.state.legacy_handle.set_stream(stream)
        size = self.workspace_bytes
        workspace = self.state.workspace(stream, size) if size else 0
        self.problem.forward(self.algo, x.data_ptr(), w.data_ptr(), y.data_ptr(), workspace, size)
        return False


class _OwnRunner(_Runner):
    """seer's kernel; a bias is added in the kernel's epilogue (the kernel's bias instance,
    built at the first call with a bias), which spares the bias's own kernel and its host time."""

    path = "cupy"

    def __init__(self, layer, layout, device, dims, algo: Algorithm, math: str) -> None:
        from seer.gpu import kernels

        super().__init__(layer, layout, device, dims)
        self._kernels, self._algo = kernels, algo.name
        self._launch = kernels.Launch(algo.name, layer, device.index, layout=layout)
        self._bias_launch = None
        self.zero_output = self._launch.zero_output
        self.alignment = aligned_bytes(algo.name, layout)

    def launch(self, x, w, y, bias=None) -> bool:
        stream = torch.cuda.current_stream(self.device_index).cuda_stream
        # The kernel reads K floats from the bias's pointer: any other bias is added after it.
        if bias is not None and bias.is_contiguous() and bias.dtype == torch.float32 \
                and bias.get_device() == self.device_index:
            if self._bias_launch is None and not torch.cuda.is_current_stream_capturing():  # nothing compiles in one
                self._bias_launch = self._kernels.Launch(self._algo, self.layer, self.device_index,
                                                         layout=self.layout, bias=True)
            if self._bias_launch is not None:
                self._bias_launch.enqueue(x.data_ptr(), w.data_ptr(), y.data_ptr(), stream, bias.data_ptr())
                return True
        self._launch.enqueue(x.data_ptr(), w.data_ptr(), y.data_ptr(), stream)
        return False


class _SparseRunner(_Runner):
    """One of seer's sparse kernels (:mod:`seer.gpu.sparse_kernels`) through CuPy, on PyTorch's
    tensors (no copy) and current stream. ``gather`` lists the input's non-zeros in every call
    into buffers from PyTorch's allocator (ordered on the stream; under CUDA-graph capture, the
    graph's own pool), so it can be captured; ``scatter`` and ``pointwise`` wait for the GPU
    (they count the non-zeros on the host) and cannot (:attr:`Algorithm.capturable`)."""

    path = "cupy"

    def __init__(self, layer, layout, device, dims, algo: Algorithm, math: str) -> None:
        import cupy

        from seer.gpu import sparse_kernels

        super().__init__(layer, layout, device, dims)
        self.algo = algo
        kind = algo.name.removeprefix("SEER_SPARSE_").lower()
        self._cupy, self._kernels, self._kernel = cupy, sparse_kernels, getattr(sparse_kernels, kind)
        self._gather = kind == "gather"
        with cupy.cuda.Device(self.device_index):
            sparse_kernels.compile_for(kind, layer)  # no call waits for the compiler
        self._streams: dict[int, object] = {}

    def _array(self, t: torch.Tensor):
        cp = self._cupy
        memory = cp.cuda.UnownedMemory(t.data_ptr(), t.numel() * t.element_size(), t, self.device_index)
        dtype = cp.int32 if t.dtype == torch.int32 else cp.float32
        return cp.ndarray(tuple(t.shape), dtype, cp.cuda.MemoryPointer(memory, 0))

    def _gather_scratch(self, w: torch.Tensor):
        """gather's buffers and channel-last filter, from PyTorch's allocator and kernels."""
        layer, device = self.layer, self.device
        entries, listed = self._kernels.gather_scratch_sizes(layer)
        g = layer.groups
        wt = w.reshape(g, layer.out_ch // g, layer.in_ch // g, -1).permute(0, 2, 3, 1).contiguous()
        return self._kernels.GatherScratch(
            self._array(torch.empty(entries, dtype=torch.int32, device=device)),
            self._array(torch.empty(entries, dtype=torch.float32, device=device)),
            self._array(torch.empty(listed, dtype=torch.int32, device=device)), self._array(wt))

    def launch(self, x, w, y, bias=None) -> bool:
        if not self.algo.capturable and torch.cuda.is_current_stream_capturing():
            raise RuntimeError(f"{self.algo.name} cannot be captured in a CUDA graph: each call counts the "
                               "input's non-zeros on the host (SEER_SPARSE_GATHER can be)")
        pointer = torch.cuda.current_stream(self.device_index).cuda_stream
        stream = self._streams.get(pointer)
        if stream is None:
            stream = self._streams[pointer] = _cupy_stream(self._cupy, pointer, self.device_index)
        extra = (self._gather_scratch(w),) if self._gather else ()
        with self._cupy.cuda.Device(self.device_index), stream:
            self._kernel(self.layer, self._array(x), self._array(w), self._array(y), *extra)
        return False


class _StreamHandle:
    """A CUDA stream by its handle, as the CUDA stream protocol hands it over."""

    def __init__(self, pointer: int) -> None:
        self.pointer = pointer

    def __cuda_stream__(self) -> tuple[int, int]:
        return 0, self.pointer


def _cupy_stream(cupy, pointer: int, device: int):
    """CuPy's view of PyTorch's stream ``pointer``: through the CUDA stream protocol where CuPy
    takes it (``ExternalStream`` is deprecated there), else as an external stream."""
    if hasattr(cupy.cuda.Stream, "from_external"):
        with cupy.cuda.Device(device):
            return cupy.cuda.Stream.from_external(_StreamHandle(pointer))
    return cupy.cuda.ExternalStream(pointer, device)


class _BackwardRunner:
    """Runs one layer's backward-data (dx from w and dy) or backward-filter (dw from x and dy)
    pass by one cuDNN algorithm, built once: through a graph-API plan of an engine that
    realises it (:attr:`Algorithm.engines`) where cudnn-frontend is installed, else through
    cuDNN's legacy call, which builds a plan on every call (host time: :data:`GUARD_BACKWARD_HOST_MS`).
    A call whose tensors lie off the plan's alignment takes the legacy call."""

    def __init__(self, layer: ConvShape, layout: str, device: torch.device, dims: int, algo: Algorithm,
                 math: str) -> None:
        self.layer, self.math, self.layout, self.device, self.dims = layer, math, layout, device, dims
        self.pass_, self.algo = algo.pass_, algo.enum
        self.device_index = device.index
        self.state = _device_state(device)
        self.plan, self._legacy, problem, self.alignment = None, None, None, 1
        if algo.engines is not None:
            from seer.errors import EnvironmentProblem
            from seer.gpu.cudnn_graph import POINTER_ALIGNMENT, GraphConvolution, GraphNotSupported

            self.alignment = POINTER_ALIGNMENT
            try:
                self.plan = GraphConvolution.realising(self.state.graph_handle, layer, math,
                                                       algo.engines.of(layer, math), layout, algo.pass_)
            except (EnvironmentProblem, GraphNotSupported) as exc:
                problem = exc
        if self.plan is None:
            # Raises CudnnError where cuDNN has not the algorithm for this layer at all.
            self.workspace_bytes = self.legacy[1]
            if problem is not None:
                warnings.warn(f"seer: {algo.name} runs through cuDNN's legacy call, about 250 us of host time "
                              f"per call, for want of a graph-API plan ({problem})", stacklevel=2)
        else:
            self.workspace_bytes = self.plan.workspace_bytes
        self.path = "legacy" if self.plan is None else "graph"

    @property
    def legacy(self) -> tuple:
        """cuDNN's legacy call of this pass (its descriptors) and the workspace bytes it asks
        for, made at first use."""
        if self._legacy is None:
            problem = self.state.cudnn.ConvolutionProblem(self.state.legacy_handle, self.layer, self.math,
                                                          self.layout)
            self._legacy = problem, problem.backward_workspace_size(self.pass_, self.algo)
        return self._legacy

    def __call__(self, known: torch.Tensor, grad_y: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
        """The gradient of ``like`` (the input for dgrad, the filter for wgrad: its shape and
        strides) from ``known`` (the filter for dgrad, the input for wgrad) and ``grad_y``."""
        if torch.cuda.current_device() != self.device_index:
            with torch.cuda.device(self.device_index):
                return self(known, grad_y, like)
        if self.dims == 1:  # as the forward: a 1D convolution is a 2D one of height 1
            known, grad_y, like = known.unsqueeze(-2), grad_y.unsqueeze(-2), like.unsqueeze(-2)
        # dy must be packed as the descriptors say: autograd may hand over any strides.
        grad_y = grad_y.contiguous(memory_format=_CHANNELS_LAST[grad_y.dim() - 2] if self.layout == "nhwc"
                                   else torch.contiguous_format)
        out = like.new_empty_strided(like.shape, like.stride())
        state = self.state
        stream = torch.cuda.current_stream(self.device_index).cuda_stream
        known_ptr, grad_y_ptr = known.data_ptr(), grad_y.data_ptr()
        if self.plan is not None and not (known_ptr | grad_y_ptr) % self.alignment:
            state.graph_on(stream)
            size = self.workspace_bytes
            workspace = state.workspace(stream, size) if size else 0
            if self.pass_ == "bwd_data":  # the plan takes its pointers by role: x, w, y
                self.plan.run(out.data_ptr(), known_ptr, grad_y_ptr, workspace)
            else:
                self.plan.run(known_ptr, out.data_ptr(), grad_y_ptr, workspace)
        else:
            problem, size = self.legacy
            state.legacy_handle.set_stream(stream)
            workspace = state.workspace(stream, size) if size else 0
            problem.backward(self.pass_, self.algo, known_ptr, grad_y_ptr, out.data_ptr(), workspace, size)
        return out.squeeze(-2) if self.dims == 1 else out


class _PyTorchForward:
    """PyTorch's own forward convolution as a runner: for a layer whose forward stays
    PyTorch's while a backward pass runs a chosen algorithm."""

    path = "pytorch"

    def __init__(self, call: "_Call") -> None:
        self.call = call

    def shaped(self, bias: torch.Tensor | None) -> torch.Tensor | None:
        return bias

    def misaligned(self, x: torch.Tensor, w: torch.Tensor) -> bool:
        return False

    def __call__(self, x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        c = self.call
        return _FUNCTIONAL[c.dims](x, w, bias, c.stride, c.padding, c.dilation, c.groups)


#: Workspaces up to this size are kept between calls, one per stream (a call then costs no
#: allocation); larger ones come from PyTorch's caching allocator per call, as PyTorch's own.
KEPT_WORKSPACE_BYTES = 64 << 20


class _DeviceState:
    """What the runners of one device and thread share: cuDNN's handles and the streams they
    are on, and the workspace kept for each stream."""

    def __init__(self, device: torch.device) -> None:
        from seer.gpu import cudnn

        self.device, self.cudnn = device, cudnn
        with torch.cuda.device(device):
            self.legacy_handle = cudnn.Handle(torch.cuda.current_stream(device).cuda_stream)
        self._graph_handle = None
        self.graph_stream = None
        self._workspaces: dict[int, torch.Tensor] = {}

    @property
    def frontend(self):
        from seer.gpu.cudnn_graph import frontend

        return frontend()

    @property
    def graph_handle(self):
        if self._graph_handle is None:
            with torch.cuda.device(self.device):
                self._graph_handle = self.frontend.create_handle()
        return self._graph_handle

    def graph_on(self, stream: int) -> int:
        """Put the graph handle on ``stream`` (a call to cuDNN only when it moves); ``stream``."""
        if stream != self.graph_stream:
            self.frontend.set_stream(self.graph_handle, stream)
            self.graph_stream = stream
        return stream

    def workspace(self, stream: int, size: int) -> int:
        """A pointer to ``size`` bytes of workspace for a launch on ``stream``. Calls on one
        stream run in its order, so they share one kept workspace. While a CUDA graph is being
        captured, each call takes its own from the caching allocator (from the graph's pool,
        freed when the call returns): a graph never reads a workspace that eager calls use. So
        does every call of the compiled operator: inductor's CUDA graphs (``reduce-overhead``)
        run their first passes with the graph's memory pool, and a workspace kept from there
        would be memory the graph does not own."""
        capturing = torch.cuda.is_current_stream_capturing() or getattr(_local, "compiled_call", False)
        kept = self._workspaces.get(stream)
        if kept is not None and kept.numel() >= size and not capturing:
            return kept.data_ptr()
        fresh = torch.empty(size, dtype=torch.uint8, device=self.device)
        if size <= KEPT_WORKSPACE_BYTES and not capturing:
            self._workspaces[stream] = fresh
        return fresh.data_ptr()


_local = threading.local()


def _device_state(device: torch.device) -> _DeviceState:
    states = _local.__dict__.setdefault("states", {})
    if device not in states:
        states[device] = _DeviceState(device)
    return states[device]


def _runner(layer: ConvShape, algo: Algorithm, math: str, layout: str, device: torch.device, dims: int) -> _Runner:
    """The runner of ``layer`` by ``algo``, built at first use (per thread): seer's kernels
    through CuPy; cuDNN's through a graph-API plan where the algorithm has engines
    (:attr:`Algorithm.engines`) and cudnn-frontend is installed, else the legacy call.
    Raises CudnnError where cuDNN cannot run it, ImportError where CuPy is missing."""
    runners = _local.__dict__.setdefault("runners", {})
    key = (layer, algo.name, math, layout, device, dims)
    runner = runners.get(key)
    if runner is None:
        if algo.source == "cupy":
            runner = _OwnRunner(layer, layout, device, dims, algo, math)
        elif algo.source == SPARSE_SOURCE:
            runner = _SparseRunner(layer, layout, device, dims, algo, math)
        else:
            runner, problem = None, None
            if algo.engines is not None:
                from seer.errors import EnvironmentProblem
                from seer.gpu.cudnn_graph import GraphNotSupported

                try:
                    runner = _GraphRunner(layer, layout, device, dims, algo, math)
                except (EnvironmentProblem, GraphNotSupported) as exc:
                    problem = exc
            if runner is None:
                # Raises CudnnError where cuDNN has not the algorithm for this layer at all.
                runner = _LegacyRunner(layer, layout, device, dims, algo, math)
                if problem is not None:
                    warnings.warn(f"seer: {algo.name} runs through cuDNN's legacy call, about 200 us of host time "
                                  f"per call, for want of a graph-API plan ({problem})", stacklevel=2)
        runners[key] = runner
    return runner


def _backward_runner(layer: ConvShape, algo: Algorithm, math: str, layout: str, device: torch.device,
                     dims: int) -> _BackwardRunner:
    """The runner of ``layer``'s backward pass by ``algo``, built at first use (per thread);
    CudnnError where cuDNN cannot run it."""
    runners = _local.__dict__.setdefault("runners", {})
    key = (layer, algo.name, math, layout, device, dims)
    if key not in runners:
        runners[key] = _BackwardRunner(layer, layout, device, dims, algo, math)
    return runners[key]


@dataclass(frozen=True)
class _Call:
    """The arguments of one convolution call besides its tensors."""

    dims: int
    stride: tuple[int, ...]
    padding: tuple[int, ...]
    dilation: tuple[int, ...]
    groups: int


def _input_kind(x: torch.Tensor, weight: torch.Tensor) -> tuple:
    """What a module's fast path keys its runners by: the tensors' shape, strides, dtype and device."""
    return x.shape, x.stride(), x.dtype, x.device, weight.dtype, weight.stride()


def _layout(x: torch.Tensor, weight: torch.Tensor, dims: int) -> str | None:
    """The layout (:data:`seer.layers.shapes.LAYOUTS`) both tensors are packed in, else None."""
    if x.is_contiguous() and weight.is_contiguous():
        return "nchw"
    channels_last = _CHANNELS_LAST.get(dims)
    if channels_last is not None and x.is_contiguous(memory_format=channels_last) \
            and weight.is_contiguous(memory_format=channels_last):
        return "nhwc"
    return None


def _backward(call: _Call, x, weight, grad_y, needs_input_grad, has_bias, runners=(None, None)):
    """The gradients of input, weight and bias: by the backward ``runners`` (dgrad, wgrad)
    where given, else by PyTorch's own functions."""
    dgrad, wgrad = runners
    if dgrad is None and wgrad is None:
        # All three from PyTorch's one backward operator, as its own nn.Conv does: one dispatch
        # instead of one per gradient, which counts in an eager step's host time.
        wanted = [bool(needs_input_grad[0]), bool(needs_input_grad[1]), has_bias and bool(needs_input_grad[2])]
        return tuple(torch.ops.aten.convolution_backward(
            grad_y, x, weight, [weight.shape[0]] if wanted[2] else None, list(call.stride), list(call.padding),
            list(call.dilation), False, [0] * call.dims, call.groups, wanted))
    grad_input_fn, grad_weight_fn = _GRADIENTS[call.dims]
    args = (call.stride, call.padding, call.dilation, call.groups)
    grad_x = grad_w = None
    if needs_input_grad[0]:
        grad_x = dgrad(weight, grad_y, x) if dgrad is not None else grad_input_fn(x.shape, weight, grad_y, *args)
    if needs_input_grad[1]:
        grad_w = wgrad(x, grad_y, weight) if wgrad is not None else grad_weight_fn(x, weight.shape, grad_y, *args)
    grad_b = grad_y.sum(dim=[0, *range(2, grad_y.dim())]) if has_bias and needs_input_grad[2] else None
    return grad_x, grad_w, grad_b


class _Convolution(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, call: _Call, runner: _Runner, backward=(None, None)):
        y = runner(x, weight, runner.shaped(bias))
        ctx.save_for_backward(x, weight)
        ctx.call, ctx.has_bias, ctx.runners = call, bias is not None, backward
        return y

    @staticmethod
    def backward(ctx, grad_y):
        x, weight = ctx.saved_tensors
        return (*_backward(ctx.call, x, weight, grad_y, ctx.needs_input_grad, ctx.has_bias, ctx.runners),
                None, None, None)


def _needs_grad(x, weight, bias) -> bool:
    return torch.is_grad_enabled() and (x.requires_grad or weight.requires_grad
                                        or (bias is not None and bias.requires_grad))


def _run(x, weight, bias, call: _Call, runner: _Runner, backward=(None, None)) -> torch.Tensor:
    if _needs_grad(x, weight, bias):
        return _Convolution.apply(x, weight, bias, call, runner, backward)
    return runner(x, weight, runner.shaped(bias))


def _call_layer(x: torch.Tensor, weight: torch.Tensor, call: _Call) -> ConvShape:
    return ConvShape(**layer_of_call({"input": x, "weight": weight, "stride": call.stride, "padding": call.padding,
                                      "dilation": call.dilation, "groups": call.groups}, call.dims))


def cudnn_convolution(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, *,
                      stride: Sequence[int], padding: Sequence[int], dilation: Sequence[int], groups: int,
                      algorithm: str, math: str = "default") -> torch.Tensor:
    """``F.conv{1,2,3}d`` run by the named cuDNN algorithm (no fallback: raises CudnnError
    where cuDNN cannot run it). Tensors must be fp32 on a GPU, both contiguous or both
    channels-last."""
    dims = weight.dim() - 2
    layout = _layout(x, weight, dims)
    if layout is None:
        raise InputError("input and weight are neither both contiguous NC[D]HW nor both channels-last",
                         field="input")
    call = _Call(dims, tuple(stride), tuple(padding), tuple(dilation), int(groups))
    algo = _algorithm(algorithm, "cudnn")
    runner = _runner(_call_layer(x, weight, call), algo, get_math_mode(math).name, layout, x.device, dims)
    if runner.misaligned(x, weight):
        raise InputError(f"{algo.name} ({runner.path}) needs tensors on {runner.alignment}-byte boundaries",
                         field="input")
    return _run(x, weight, bias, call, runner)


# -- torch.compile: one custom operator, with a fake implementation for tracing -------------
def _op_convolution(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, stride: list[int],
                    padding: list[int], dilation: list[int], groups: int, algorithm: str, math: str) -> torch.Tensor:
    # A compiled graph calls this on every pass, so its runner is looked up by what the call
    # gives, as the module's fast path does, not by a ConvShape made again (about 30 us). A
    # compiled graph cannot fall back at trace time: where cuDNN refuses, PyTorch's runs here.
    key = (_input_kind(x, weight), weight.shape, tuple(stride), tuple(padding), tuple(dilation), groups, algorithm,
           math)
    runners = _local.__dict__.setdefault("op_runners", {})
    runner = runners.get(key, _UNBUILT)
    try:
        if runner is _UNBUILT:
            dims = weight.dim() - 2
            call = _Call(dims, tuple(stride), tuple(padding), tuple(dilation), groups)
            runner = runners[key] = _runner(_call_layer(x, weight, call), get_algorithm(algorithm), math,
                                            _layout(x, weight, dims), x.device, dims)
        if runner is not None and not runner.misaligned(x, weight):
            _local.compiled_call = True  # its workspace is its own (_DeviceState.workspace)
            try:
                return runner(x, weight, runner.shaped(bias))
            finally:
                _local.compiled_call = False
    except Exception as exc:  # noqa: BLE001 - only cuDNN's refusal and a missing CuPy fall back
        from seer.gpu.cudnn import CudnnError

        if not isinstance(exc, (CudnnError, ImportError)):
            raise
        warnings.warn(f"seer: {algorithm} cannot run a compiled convolution ({exc}); PyTorch's runs instead")
        runners[key] = None
    return _FUNCTIONAL[weight.dim() - 2](x, weight, bias, stride, padding, dilation, groups)


#: A compiled call whose runner is not looked for yet (None: PyTorch's convolution runs it).
_UNBUILT = object()


def _op_fake(x, weight, bias, stride, padding, dilation, groups, algorithm, math):
    from seer.layers.shapes import conv_out_width

    dims = weight.dim() - 2
    spatial = [conv_out_width(x.shape[2 + i], weight.shape[2 + i], stride[i], padding[i], dilation[i])
               for i in range(dims)]
    layout = _layout(x, weight, dims)
    out = x.new_empty((x.shape[0], weight.shape[0], *spatial))
    return out.contiguous(memory_format=_CHANNELS_LAST[dims]) if layout == "nhwc" else out


def _op_setup(ctx, inputs, output) -> None:
    x, weight, bias, stride, padding, dilation, groups, _, _ = inputs
    ctx.save_for_backward(x, weight)
    ctx.call = _Call(weight.dim() - 2, tuple(stride), tuple(padding), tuple(dilation), groups)
    ctx.has_bias = bias is not None


def _op_backward(ctx, grad_y):
    x, weight = ctx.saved_tensors
    return (*_backward(ctx.call, x, weight, grad_y, ctx.needs_input_grad, ctx.has_bias),
            None, None, None, None, None, None)


def _register_operator():
    """``torch.ops.seer.convolution``, where this PyTorch has ``torch.library.custom_op`` (2.4 on)."""
    if not hasattr(torch.library, "custom_op"):
        return None
    op = torch.library.custom_op(
        "seer::convolution", _op_convolution, mutates_args=(),
        schema="(Tensor x, Tensor weight, Tensor? bias, int[] stride, int[] padding, int[] dilation, int groups, "
               "str algorithm, str math) -> Tensor")
    op.register_fake(_op_fake)
    op.register_autograd(_op_backward, setup_context=_op_setup)
    return op


#: The custom operator a compiled model calls (None on a PyTorch without custom_op).
convolution_op = _register_operator()
_compiling = getattr(getattr(torch, "compiler", None), "is_compiling", lambda: False)


# -- the modules --------------------------------------------------------------------------
class _SeerConv:
    """What SeerConv1d/2d/3d add to their ``nn.Conv*`` base: the choice and the fallback.

    ``fallbacks`` counts the calls that PyTorch ran, by reason; ``last_algorithm`` is the
    algorithm of the last call (``"pytorch"`` where PyTorch's own convolution ran); ``paths``
    says, per kind of input, what ran the chosen algorithm (:class:`_Runner`'s ``path``).
    """

    @classmethod
    def from_conv(cls, conv: nn.Module, choice: Choice, name: str = "", nvtx: bool = False,
                  backward: tuple = (None, None)):
        """``conv`` itself, made a module of this class: its class is changed in place (as
        ``torch.nn.utils.parametrize`` does), so its parameters, hooks and attributes stay; with
        ``nvtx``, each call is an NVTX range named ``seer:<name>:<algorithm>``; ``backward``: the
        choices of the backward-data and backward-filter passes (None: PyTorch's own gradients)."""
        conv.__class__ = cls
        conv.seer_choice, conv.seer_name, conv.seer_nvtx = choice, name, nvtx
        conv.seer_backward = tuple(backward)
        conv.backward_algorithms = (None, None)  # of the last call that asked for gradients
        conv.fallbacks = {}
        conv._last = [None]  # the last call's algorithm; a list, so a call sets it cheaply
        conv._plans = {}  # input shape -> _Plan; a choice is fixed per layer
        conv._set_runners_aside()
        return conv

    def _set_runners_aside(self) -> None:
        """Empty what the module builds at its first calls and keeps for the next: runners
        (cuDNN plans, CuPy arguments) and views of its tensors."""
        self._bias_view = (None, 0, None)  # (bias, its data pointer, its view as the output adds it)
        self.paths = {}  # input kind -> the runner's path (graph, legacy, cupy)
        self._fast = {}  # input kind -> (algorithm name, runner, whether the weight is repacked)
        self._fast_grad = {}  # input kind -> (algorithm name, runner, _Call, backward runners, their names)
        self._weight_copy = (None, 0, 0, None)  # (weight, its version, its data pointer, channels-last copy)

    def __reduce_ex__(self, protocol):
        """Pickled (``torch.save(model)``) as the plain ``nn.Conv*`` it was, with its parameters,
        hooks and attributes: seer's choices are left out (they hold a whole seer model, and a
        checkpoint should load without seer), so after loading, apply seer again."""
        base = _BASES[type(self)]
        return base.__new__, (base,), {k: v for k, v in self.__dict__.items() if k not in _SEER_ATTRIBUTES}

    def __copy__(self):
        """A shallow copy that stays seer's (pickling's reduction, which ``copy.copy`` would use
        otherwise, gives the plain module)."""
        copied = type(self).__new__(type(self))
        copied.__dict__.update(self.__dict__)
        return copied

    def __deepcopy__(self, memo):
        """A copy (``copy.deepcopy`` of a model, as for an EMA or a twin to time) that shares the
        module's choices, so what they decided holds for it, and fills its own caches at its first
        calls: they hold views of this module's tensors (the runners in them, a layer's cuDNN plans
        and no tensor, are one per layer and thread, shared as by two equal layers of one model)."""
        import copy

        for choice in (self.seer_choice, *self.seer_backward):
            if choice is not None:
                memo[id(choice)] = choice
        copied = type(self).__new__(type(self))
        memo[id(self)] = copied
        copied.__setstate__(copy.deepcopy({k: v for k, v in self.__dict__.items() if k not in _BUILT_ATTRIBUTES},
                                          memo))
        copied._set_runners_aside()
        return copied

    def make_plain(self) -> nn.Module:
        """This module made the plain ``nn.Conv*`` again, in place (what :meth:`from_conv` set is
        dropped; parameters, hooks and attributes stay)."""
        for attribute in _SEER_ATTRIBUTES:
            delattr(self, attribute)
        self.__class__ = _BASES[type(self)]
        return self

    @property
    def last_algorithm(self) -> str | None:
        return self._last[0]

    def set_nvtx(self, on: bool) -> None:
        """Make each later call an NVTX range (``on``) or not. The fast path, which has no
        range, is kept only for calls without one, so its runners are forgotten."""
        self.seer_nvtx = on
        self._fast, self._fast_grad = {}, {}

    def to_conv(self) -> nn.Module:
        """The plain ``nn.Conv*`` module with this one's configuration and parameters."""
        return _configured_like(_BASES[type(self)], self)

    def _numeric_padding(self) -> tuple[int, ...] | None:
        """Padding per axis; None for 'same' padding that is uneven on some axis."""
        if not isinstance(self.padding, str):
            return tuple(self.padding)
        if self.padding == "valid":
            return (0,) * len(self.kernel_size)
        totals = [d * (k - 1) for d, k in zip(self.dilation, self.kernel_size)]
        return None if any(t % 2 for t in totals) else tuple(t // 2 for t in totals)

    def _unrunnable(self, x: torch.Tensor) -> str | None:
        if not x.is_cuda:
            return "the input is not on a GPU"
        if x.dtype != torch.float32 or self.weight.dtype != torch.float32:
            return f"seer runs fp32 tensors only, not {x.dtype}"
        if _layout(x, self.weight, len(self.kernel_size)) is None and not self._repacks(x):
            return "input and weight are neither both contiguous NC[D]HW nor both channels-last"
        if self._numeric_padding() is None:
            return "'same' padding that pads one side more is left to PyTorch"
        return None

    def _fall_back(self, reason: str) -> None:
        if reason not in self.fallbacks:
            warnings.warn(f"seer: {self.seer_name or type(self).__name__}: {reason}; "
                          "PyTorch's own convolution runs instead", stacklevel=4)
        self.fallbacks[reason] = self.fallbacks.get(reason, 0) + 1

    def _plan(self, x: torch.Tensor, layout: str) -> "_Plan":
        """What runs an input of x's shape and layout (already padded by padding_mode)."""
        key = (tuple(x.shape), layout)
        if key not in self._plans:
            dims = len(self.kernel_size)
            padding = (0,) * dims if self.padding_mode != "zeros" else self._numeric_padding()
            try:
                layer = ConvShape(**layer_of_call({"input": x, "weight": self.weight, "stride": self.stride,
                                                   "padding": padding, "dilation": self.dilation,
                                                   "groups": self.groups}, dims))
            except ShapeError as exc:
                self._plans[key] = _Plan(padding, problem=f"not a layer seer describes ({exc})")
            else:
                name = self.seer_choice.algorithm_in(layer, layout)
                algo = None if name is None else get_algorithm(name)
                backward = tuple(None if choice is None or (n := choice.algorithm_in(layer, layout)) is None
                                 else get_algorithm(n) for choice in self.seer_backward)
                refused = _refusal(algo, layer, layout)
                self._plans[key] = (_Plan(padding, layer, algo, backward=backward) if refused is None else
                                    _Plan(padding, problem=f"{algo.name} cannot run this layer ({refused})"))
        return self._plans[key]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # The fast path: an input of a kind already seen, whose runner is built; nothing to
        # check again, nothing to record but the algorithm. Parameters are read from their
        # dict once (nn.Module's attribute lookup of each costs more). Under torch.compile the
        # checked path is traced instead: it calls the custom operator, which the fast path's
        # Python (pointers, streams) would otherwise break into pieces or fail to trace.
        if _compiling():
            return self._forward(x)
        parameters = self._parameters
        weight, bias = parameters["weight"], parameters["bias"]
        kind = _input_kind(x, weight)
        fast = self._fast.get(kind)
        if fast is not None and fast[1] is None:  # the choice leaves this input to PyTorch: its own module's path
            self._last[0] = PYTORCH
            return self._conv_forward(x, weight, bias)
        if _needs_grad(x, weight, bias):
            # A training call: the forward's runner and the backward passes' runners, as the
            # checked path left them for this kind of input.
            grad = self._fast_grad.get(kind)
            if grad is not None:
                name, runner, call, backward, ran = grad
                if not runner.misaligned(x, weight):
                    self._last[0] = name
                    self.backward_algorithms = ran
                    return _Convolution.apply(x, weight, bias, call, runner, backward)
        elif fast is not None:
            name, runner, repacked = fast
            if repacked:
                weight = self._channels_last_weight(weight)
            if not runner.misaligned(x, weight):
                self._last[0] = name
                return runner(x, weight, self._shaped_bias(bias, runner))
        return self._forward(x)

    def _channels_last_weight(self, weight: torch.Tensor) -> torch.Tensor:
        """A channels-last copy of the NC[D]HW ``weight``, for a channels-last input (as
        ConvNeXt's LayerNorm hands its downsampling layers); made again only when the weight
        changed (its version counter or storage), where PyTorch copies it on every call."""
        kept, version, pointer, packed = self._weight_copy
        if kept is not weight or version != weight._version or pointer != weight.data_ptr():
            packed = weight.detach().contiguous(memory_format=_CHANNELS_LAST[weight.dim() - 2])
            self._weight_copy = (weight, weight._version, weight.data_ptr(), packed)
        return packed

    def _repacks(self, x: torch.Tensor) -> bool:
        """Whether seer runs ``x`` with :meth:`_channels_last_weight`: x channels-last, the weight
        NC[D]HW, and neither gradients nor torch.compile (which trace the weight itself)."""
        channels_last = _CHANNELS_LAST.get(len(self.kernel_size))
        return (channels_last is not None and x.is_contiguous(memory_format=channels_last)
                and self.weight.is_contiguous() and not _needs_grad(x, self.weight, self.bias) and not _compiling())

    def _shaped_bias(self, bias: torch.Tensor | None, runner: _Runner) -> torch.Tensor | None:
        """The bias's view that the runner adds, made again only when the bias's storage
        changed (``module.to``, ``param.data = ...``)."""
        if bias is None:
            return None
        kept, pointer, view = self._bias_view
        if kept is not bias or pointer != bias.data_ptr():
            view = runner.shaped(bias)
            self._bias_view = (bias, bias.data_ptr(), view)
        return view

    def _forward(self, x: torch.Tensor) -> torch.Tensor:
        reason = self._unrunnable(x)
        if reason is not None:
            self._fall_back(reason)
            return self._pytorch(x)
        key = _input_kind(x, self.weight)
        if self.padding_mode != "zeros":  # PyTorch pads the input itself, then convolves unpadded
            padding = self._numeric_padding()
            x = F.pad(x, [p for p in reversed(padding) for _ in range(2)], mode=self.padding_mode)
        weight = self.weight
        training = _needs_grad(x, weight, self.bias)
        layout = _layout(x, weight, len(self.kernel_size))
        # Later training calls with this input go straight to the runners, unless each call is
        # an NVTX range, or the input or the weight is packed anew first.
        fast_grad = training and layout is not None and not self.seer_nvtx and self.padding_mode == "zeros"
        if layout is None:  # padding_mode's padding changed the input's layout, or the weight is NC[D]HW
            channels_last = _CHANNELS_LAST[len(self.kernel_size)]
            x = x.contiguous(memory_format=channels_last)
            layout = "nhwc"
            if not weight.is_contiguous(memory_format=channels_last):  # never in training: _unrunnable
                weight = self._channels_last_weight(weight)
        plan = self._plan(x, layout)
        if plan.problem is not None:
            self._fall_back(plan.problem)
            return self._pytorch(x, plan.padding)
        algo = plan.algorithm
        backward = plan.backward if training else (None, None)
        if algo is None and backward == (None, None):  # the choice leaves this layer to PyTorch
            if self.padding_mode == "zeros" and not isinstance(self.padding, str) and not self.seer_nvtx \
                    and plan.backward == (None, None):
                self._fast[key] = (PYTORCH, None, False)
            return self._pytorch(x, plan.padding)
        dims = len(self.kernel_size)
        if algo is None:  # PyTorch's forward, a chosen algorithm's backward
            call = _Call(dims, tuple(self.stride), plan.padding, tuple(self.dilation), self.groups)
            runner, runners = _PyTorchForward(call), self._backward_runners(plan, layout, x.device, dims)
            y = _run(x, self.weight, self.bias, call, runner, runners)
            self._last[0] = PYTORCH
            if fast_grad:
                self._fast_grad[key] = (PYTORCH, runner, call, runners, self.backward_algorithms)
            return y
        call = _Call(dims, tuple(self.stride), plan.padding, tuple(self.dilation), self.groups)
        if convolution_op is not None and _compiling():
            self._last[0] = algo.name
            return convolution_op(x, self.weight, self.bias, list(call.stride), list(call.padding),
                                  list(call.dilation), call.groups, algo.name, self.seer_choice.math)
        if self.seer_nvtx:
            torch.cuda.nvtx.range_push(f"seer:{self.seer_name}:{algo.name}")
        try:
            runner = _runner(plan.layer, algo, self.seer_choice.math, layout, x.device, dims)
            if runner.misaligned(x, weight):
                self._fall_back(f"{algo.name} ({runner.path}) needs tensors on {runner.alignment}-byte boundaries")
                return self._pytorch(x, plan.padding)
            runners = self._backward_runners(plan, layout, x.device, dims) if backward != (None, None) \
                else (None, None)
            y = _run(x, weight, self.bias, call, runner, runners)
        except ImportError as exc:  # CuPy, which seer's own kernels need, is not installed
            self._fall_back(f"{algo.name} needs CuPy ({exc})")
            return self._pytorch(x, plan.padding)
        except Exception as exc:
            from seer.gpu.cudnn import CudnnError

            if not isinstance(exc, CudnnError):
                raise
            self._fall_back(f"{algo.name} cannot run this layer ({exc})")
            return self._pytorch(x, plan.padding)
        finally:
            if self.seer_nvtx:
                torch.cuda.nvtx.range_pop()
        self._last[0] = algo.name
        self.paths[key] = runner.path
        # Later calls with this input go straight to the runner (after the alignment check),
        # unless each call is an NVTX range, or the input is padded by padding_mode first.
        if not self.seer_nvtx and self.padding_mode == "zeros":
            self._fast[key] = (algo.name, runner, weight is not self.weight)
        if fast_grad:
            self._fast_grad[key] = (algo.name, runner, call, runners, self.backward_algorithms)
        return y

    def _backward_runners(self, plan: "_Plan", layout: str, device: torch.device, dims: int) -> tuple:
        """The runners of the plan's backward algorithms; PyTorch's gradient (None) for a pass
        whose algorithm cuDNN cannot run here (recorded as a fallback)."""
        from seer.gpu.cudnn import CudnnError

        runners, ran = [], []
        for algo, choice in zip(plan.backward, self.seer_backward):
            runner = None
            if algo is not None:  # under the pass's own choice's math mode, which may not be the forward's
                try:
                    runner = _backward_runner(plan.layer, algo, choice.math, layout, device, dims)
                except CudnnError as exc:
                    self._fall_back(f"{algo.name} cannot run this layer's {algo.pass_} ({exc})")
            runners.append(runner)
            ran.append(algo.name if runner is not None else PYTORCH)
        self.backward_algorithms = tuple(ran)
        return tuple(runners)

    def _pytorch(self, x: torch.Tensor, padding=None) -> torch.Tensor:
        """PyTorch's own convolution; with ``padding``, x is already padded by padding_mode."""
        self._last[0] = PYTORCH
        if padding is None:
            return super().forward(x)
        return _FUNCTIONAL[len(self.kernel_size)](x, self.weight, self.bias, self.stride, padding,
                                                  self.dilation, self.groups)

    def extra_repr(self) -> str:
        backward = "".join(f", {name}={c.describe()}" for name, c in zip(("dgrad", "wgrad"), self.seer_backward)
                           if c is not None)
        return f"{super().extra_repr()}, algorithm={self.seer_choice.describe()}{backward}, math={self.seer_choice.math}"


def _refusal(algo: Algorithm | None, layer: ConvShape, layout: str) -> str | None:
    """Why seer's own kernel ``algo`` cannot run ``layer`` in ``layout`` (its launch plan's
    rule), else None."""
    if algo is not None and algo.source == SPARSE_SOURCE:
        if layout != "nchw":
            return "seer's sparse kernels take contiguous NC[D]HW tensors only"
        if algo.name == "SEER_SPARSE_POINTWISE":
            try:
                from seer.gpu.sparse_kernels import pointwise_refusal
            except ImportError:  # no CuPy: the runner says so
                return None
            return pointwise_refusal(layer)
        return None
    if algo is None or algo.source != "cupy":
        return None
    from seer.hardware.kernel_plans import unsupported_reason

    return unsupported_reason(algo.name, layer, layout)


@dataclass(frozen=True)
class _Plan:
    """How a seer convolution runs one input shape: the padding cuDNN gets, the layer and the
    algorithm (None: PyTorch's own), or the problem that leaves the input to PyTorch."""

    padding: tuple[int, ...]
    layer: ConvShape | None = None
    algorithm: object = None  # seer.algorithms.Algorithm
    problem: str | None = None
    backward: tuple = (None, None)  # the backward-data and backward-filter algorithms (None: PyTorch's)


def _configured_like(cls, conv: nn.Module) -> nn.Module:
    """A ``cls`` module with ``conv``'s configuration, its very parameters and its mode."""
    new = cls(conv.in_channels, conv.out_channels, conv.kernel_size, stride=conv.stride, padding=conv.padding,
              dilation=conv.dilation, groups=conv.groups, bias=conv.bias is not None,
              padding_mode=conv.padding_mode, device="meta")
    new.weight, new.bias = conv.weight, conv.bias
    return new.train(conv.training)


class SeerConv1d(_SeerConv, nn.Conv1d):
    """``nn.Conv1d`` that runs the algorithm its choice names."""


class SeerConv2d(_SeerConv, nn.Conv2d):
    """``nn.Conv2d`` that runs the algorithm its choice names."""


class SeerConv3d(_SeerConv, nn.Conv3d):
    """``nn.Conv3d`` that runs the algorithm its choice names."""


#: What a seer module builds at its first calls (:meth:`_SeerConv._set_runners_aside`).
_BUILT_ATTRIBUTES = ("_bias_view", "paths", "_fast", "_fast_grad", "_weight_copy")
#: What :meth:`_SeerConv.from_conv` adds to a convolution module.
_SEER_ATTRIBUTES = ("seer_choice", "seer_name", "seer_nvtx", "seer_backward", "backward_algorithms", "fallbacks",
                    "_last", "_plans", *_BUILT_ATTRIBUTES)

#: Exact module types swapped, and what they become.
SWAPS = {nn.Conv1d: SeerConv1d, nn.Conv2d: SeerConv2d, nn.Conv3d: SeerConv3d}
_BASES = {seer: base for base, seer in SWAPS.items()}


# -- whole models -------------------------------------------------------------------------
def swap_in(model: nn.Module, choice: Choice, nvtx: bool = False, keep: Iterable[str] = (),
            backward: tuple = (None, None), per_module: Mapping[str, Choice] | None = None) -> nn.Module:
    """Run what ``choice`` names on every ``nn.Conv1d/2d/3d`` of ``model`` but those named in
    ``keep``, which stay PyTorch's own modules (swapped in place; returned); ``backward``:
    the choices of the backward-data and backward-filter passes (None: PyTorch's gradients);
    ``per_module``: a module's own forward choice instead of ``choice``, by module name."""
    if type(model) in SWAPS:
        raise InputError("give the model that holds the convolution, not the convolution itself", field="model")
    lazy = [name for name, module in model.named_modules()
            if isinstance(module, (nn.LazyConv1d, nn.LazyConv2d, nn.LazyConv3d))]
    if lazy:  # they become nn.Conv*d at their first call, and would stay PyTorch's without a word
        raise InputError(f"the model's lazy convolutions ({', '.join(lazy[:3])}{', ...' if len(lazy) > 3 else ''}) "
                         "have no shape yet: run one forward pass first", field="model")
    keep, per_module = set(keep), per_module or {}
    # Each module is changed in place, so its parent needs no new child; a module shared by
    # two parents is met under each name, and the first name not kept changes it. A module
    # swapped before (an earlier apply or force) takes this choice, or is kept plain, as a
    # plain one would: the model then runs what this call says.
    swapped = set()
    for name, module in list(model.named_modules(remove_duplicate=False)):
        if isinstance(module, _SeerConv) and id(module) not in swapped:
            module.make_plain()
        if type(module) in SWAPS and name not in keep:
            SWAPS[type(module)].from_conv(module, per_module.get(name, choice), name, nvtx, backward)
            swapped.add(id(module))
    return model


def left_to_pytorch(choice: Choice, calls: pd.DataFrame, backward: Iterable[Choice | None] = (),
                    per_module: Mapping[str, Choice] | None = None) -> set[str]:
    """Names of the modules all of whose calls (``conv_calls(...).layers``: a ``name`` and the
    layer fields per call) ``choice`` (or the module's own in ``per_module``) and the
    ``backward`` choices leave to PyTorch: they need not be swapped at all. A name may be a
    module whose own code calls ``F.conv*d``, which is never swapped anyway."""
    backward, per_module = [c for c in backward if c is not None], per_module or {}
    decided: dict[str, set] = {}
    for row in calls.to_dict("records"):
        layer = ConvShape.from_mapping(row)
        choices = [per_module.get(row["name"], choice), *backward]
        decided.setdefault(row["name"], set()).update(c.algorithm(layer) for c in choices)
    return {name for name, picks in decided.items() if picks == {None}}


def _any_backward(backward: Iterable["PredictedPass | None"]) -> bool:
    """Whether any layer runs a backward pass's pick."""
    return any(p is not None and any(a is not None for a in p.picks.values()) for p in backward)


def swap_in_confirmed(model: nn.Module, choice: Predicted, calls: pd.DataFrame, example: torch.Tensor | None,
                      nvtx: bool = False, backward: tuple = (None, None),
                      per_module: Mapping[str, Choice] | None = None, training: bool = False) -> nn.Module:
    """:func:`swap_in` with the modules :func:`left_to_pytorch` names kept. Given ``example``
    (the input ``choice``'s eager forward pass was weighed on, :meth:`Predicted.decide_pass`),
    the swapped model's eager pass is timed there, taking turns with PyTorch's (:func:`paired_ratio`),
    and, where :meth:`Predicted.confirm` turns the picks down, the swap is undone and done again
    with what it leaves: fewer picks, timed once more, or every layer of ``choice`` left to
    PyTorch (``per_module``'s own choices stay). With ``training`` (``example``: the input the
    eager training step was weighed on, :func:`decide_step`), training steps of a copy of the
    model are timed instead, and :meth:`Predicted.confirm_step` keeps the picks of every pass,
    fewer of them (timed once more), or none."""
    def swap(target: nn.Module = model) -> None:
        swap_in(target, choice, nvtx, left_to_pytorch(choice, calls, backward, per_module), backward, per_module)

    if training:
        if example is not None and choice.weighed is not None and (choice.picked() or _any_backward(backward)):
            import copy

            twin = copy.deepcopy(model).train()  # the user's model keeps its state and gradients
            for final in (False, True):  # as the forward's: fewer picks are timed once more
                ratio = paired_ratio(twin, example, lambda: swap(twin), choice.weighed.wall_ms,
                                     call=training_step(twin, example))
                if choice.confirm_step(ratio, backward, final) or not (choice.picked() or _any_backward(backward)):
                    break
            del twin
        swap()
        return model
    swap()
    for final in (False, True):
        if example is None or not choice.picked() or choice.weighed is None:
            break
        ratio = paired_ratio(model, example, swap, choice.weighed.wall_ms)
        if choice.confirm(eager_pass_times(model, example), final, ratio):
            break
        restore(model)
        swap()
    return model


def module_sparsity(sparsity) -> dict[str, float]:
    """Each module's input sparsity from what ``apply(..., sparsity=)`` takes: a mapping of
    module name to share of zeros, or :func:`seer.torch.input_sparsity`'s calls (or their
    ``layers`` frame: ``name`` and ``sparsity`` columns), where a module seen on several
    inputs takes the least of its shares. Each share must lie in [0, 1)."""
    from seer.layers.calls import ConvCalls

    if isinstance(sparsity, ConvCalls):
        sparsity = sparsity.layers
    if isinstance(sparsity, pd.DataFrame):
        missing = {"name", "sparsity"} - set(sparsity.columns)
        if missing:
            raise InputError(f"the sparsity frame needs columns name and sparsity; it lacks {', '.join(sorted(missing))}",
                             field="sparsity")
        pairs = list(zip(sparsity["name"], sparsity["sparsity"]))
    elif isinstance(sparsity, Mapping):
        pairs = list(sparsity.items())
    else:
        raise InputError(f"sparsity must map module names to shares of zeros (or be input_sparsity's calls), "
                         f"not {type(sparsity).__name__}", field="sparsity")
    levels: dict[str, float] = {}
    for name, value in pairs:
        try:
            value = float(value)
        except (TypeError, ValueError):
            value = float("nan")
        if not 0 <= value < 1:
            raise InputError(f"module {name}: sparsity must be a number in [0, 1), got {value!r}", field="sparsity")
        levels[str(name)] = min(value, levels.get(str(name), value))
    return levels


def force(model: nn.Module, algorithm: str, math: str = "default", nvtx: bool = False, *,
          dgrad: str | None = None, wgrad: str | None = None) -> nn.Module:
    """Run ``algorithm`` (cuDNN's, or one of seer's own kernels, which need CuPy) on every
    ``nn.Conv1d/2d/3d`` of ``model`` (swapped in place; returned); ``dgrad`` and ``wgrad``
    name cuDNN's backward-data and backward-filter algorithms for the gradients (None:
    PyTorch's own)."""
    backward = tuple(None if name is None else Fixed(name, math, pass_)
                     for name, pass_ in ((dgrad, "bwd_data"), (wgrad, "bwd_filter")))
    return swap_in(model, Fixed(algorithm, math), nvtx, backward=backward)


def apply(model: nn.Module, gpu: str = "h100", math: str = "default", *, input_shape: Sequence[int] | None = None,
          models_dir=None, seer_model=None, nvtx: bool = False, algorithms: str = "cudnn",
          guard: bool = True, cuda_graphs: bool = False, training: bool = False,
          deterministic: bool | None = None, sparsity=None, calibration: torch.Tensor | None = None) -> nn.Module:
    """Run seer's predicted-fastest algorithm on every ``nn.Conv1d/2d/3d`` of ``model``.

    The pick is among ``algorithms``: cuDNN's by default (what PyTorch itself runs), or
    ``"all"`` to rank seer's own kernels too (they need CuPy). Each distinct layer is
    predicted when first seen; ``input_shape`` predicts the layers of that input in
    advance, in one call (on the CPU, from a meta-device pass). With ``guard``, a layer
    keeps PyTorch's convolution unless the pick is predicted to beat cuDNN's heuristic
    choice by a margin (:class:`Predicted`). Given ``input_shape``, a model in eval mode on
    a GPU is first timed as it is (a few eager passes on random input): the picks are then
    weighed for the whole pass, host time against GPU time (:meth:`Predicted.decide_pass`),
    and a module all of whose layers stay PyTorch's is not swapped at all; the swapped model's
    pass is then timed too, and unless it is faster, fewer picks are timed once more, and
    failing that every layer keeps PyTorch's path (:meth:`Predicted.confirm`). With
    ``cuda_graphs`` (the model will run captured, by ``torch.cuda.graph`` or
    ``torch.compile(mode="reduce-overhead")``), the guard leaves out host time. With
    ``training``, the gradients too run seer's recommended backward-data and backward-filter
    algorithms (:class:`PredictedPass`, the models of ``gpu``'s backward passes), through
    cuDNN's graph-API plans; ``deterministic`` (default: what
    ``torch.are_deterministic_algorithms_enabled()`` says) leaves out those whose repeated
    calls may differ. Given ``input_shape`` on a GPU, a training step of a copy of the model is
    timed first and the three passes' picks are weighed for the whole step (:func:`decide_step`);
    then a copy's step with them is timed taking turns with PyTorch's, and unless it is faster,
    fewer picks are weighed and timed once more, else every pass of every layer keeps PyTorch's
    path (:meth:`Predicted.confirm_step`).

    ``calibration`` (a batch of real inputs) or ``sparsity`` (what :func:`module_sparsity`
    takes) gives each module's share of zero input values: a module above 0 then runs one of
    seer's sparse kernels (``SEER_SPARSE_GATHER``, or those ``algorithms`` names) where it is
    surely faster at that share (:class:`SparseInput`; ``gpu`` needs a sparse model). The
    share is measured once, on the calibration batch: the choice stays when later inputs
    hold fewer zeros. The calibration batch also says how crowded each input's non-zeros are
    on pixels, which the sparse kernels' times are predicted at; beyond the most crowded input
    the sparse model learnt from, the dense choice stays. With
    ``cuda_graphs``, only ``SEER_SPARSE_GATHER`` can be captured.
    """
    input_shape = _input_shape(input_shape)
    if seer_model is None:
        from seer.predict.persist import load_model

        # On a GPU, cuDNN answers for the layers (Predicted asks it): the models of its answers load too.
        seer_model = load_model(gpu, math=math, models_dir=models_dir, cudnn_answers=torch.cuda.is_available())
    choice = Predicted(seer_model, math, algorithms=algorithms, guard=guard, captured=cuda_graphs)
    per_module = _sparse_choices(model, choice, gpu, sparsity, calibration)
    backward: tuple = (None, None)
    if training:
        from seer.predict.persist import load_model

        if deterministic is None:
            deterministic = torch.are_deterministic_algorithms_enabled()
        backward = tuple(PredictedPass(load_model(gpu, math=math, models_dir=models_dir, pass_=pass_), math,
                                       guard=guard, deterministic=deterministic, captured=cuda_graphs)
                         for pass_ in ("bwd_data", "bwd_filter"))
    keep: set[str] = set()
    # A model swapped before (an earlier apply or force) is first made PyTorch's own again: its
    # layers and the passes the picks are weighed against are PyTorch's, as they would be the first time.
    restore(model)
    if input_shape is not None:
        from seer.torch.layers import conv_calls

        calls = conv_calls(model, input_shape).layers
        layers = [ConvShape.from_mapping(row) for row in calls.to_dict("records")]
        choice.prepare(layers)
        for pass_choice in backward:
            if pass_choice is not None:
                pass_choice.prepare(layers)
        if guard and torch.cuda.is_available():  # the guard asks cuDNN, on the GPU
            example = _example(model, input_shape)
            if training and not cuda_graphs:
                step_example = _example(model, input_shape, training=True)
                if step_example is not None:
                    decide_step(choice, backward, layers, eager_step_times(model, step_example))
                    return swap_in_confirmed(model, choice, calls, step_example, nvtx, backward, per_module,
                                             training=True)
            elif example is not None and not cuda_graphs:
                choice.decide_pass(layers, eager_pass_times(model, example))
                return swap_in_confirmed(model, choice, calls, example, nvtx, backward, per_module)
            keep = left_to_pytorch(choice, calls, backward, per_module)
    return swap_in(model, choice, nvtx, keep, backward, per_module)


def module_crowding(sparsity) -> dict[str, float]:
    """Each module's crowding of non-zeros (the most over its inputs) where ``sparsity`` is
    :func:`seer.torch.input_sparsity`'s calls or a frame with ``name`` and ``crowding`` columns;
    empty for a mapping of shares, which says nothing of it."""
    from seer.layers.calls import ConvCalls

    if isinstance(sparsity, ConvCalls):
        sparsity = sparsity.layers
    if not isinstance(sparsity, pd.DataFrame) or "crowding" not in sparsity.columns:
        return {}
    return {str(k): float(v) for k, v in sparsity.groupby("name")["crowding"].max().items()}


def _sparse_choices(model: nn.Module, choice: Predicted, gpu: str, sparsity, calibration) -> dict[str, Choice]:
    """:class:`SparseInput` choices of the modules whose input holds zeros (``apply``'s
    ``sparsity`` or ``calibration``), by module name."""
    if calibration is not None:
        if sparsity is not None:
            raise InputError("give apply a calibration batch or each module's sparsity, not both", field="sparsity")
        from seer.torch.layers import input_sparsity

        sparsity = input_sparsity(model, calibration)
    if sparsity is None:
        return {}
    levels = module_sparsity(sparsity)
    # A name given by hand that is no convolution of the model (a typo, a renamed module) would
    # leave that layer dense without a word. (Measured calls may name a module whose own code
    # calls F.conv2d, which is never swapped.)
    convolutions = {name for name, module in model.named_modules(remove_duplicate=False) if type(module) in SWAPS
                    or isinstance(module, _SeerConv)}
    unknown = sorted(set(levels) - convolutions) if isinstance(sparsity, Mapping) else []
    if unknown:
        shown = ", ".join(repr(name) for name in unknown[:3]) + (f" and {len(unknown) - 3} more" if len(unknown) > 3
                                                                 else "")
        raise InputError(f"sparsity names {shown}, which {'is' if len(unknown) == 1 else 'are'} not an nn.Conv1d/2d/3d "
                         "of the model (its names are those of named_modules)", field="sparsity")
    if choice.model.sparse is None:
        raise InputError(f"the {gpu} models have no model of seer's sparse kernels (models/<gpu>/sparse.json): "
                         f"leave out sparsity and calibration, or use a GPU that has one", field="sparsity")
    kernels = choice.sparse_kernels or DEFAULT_SPARSE_KERNELS
    uncapturable = [name for name in kernels if not get_algorithm(name).capturable]
    if choice.captured and uncapturable:
        raise InputError(f"{' and '.join(uncapturable)} cannot be captured in CUDA graphs (each call counts the "
                         "input's non-zeros on the host): leave them out of algorithms, or leave out cuda_graphs",
                         field="algorithms")
    crowding = module_crowding(sparsity)
    return {name: SparseInput(choice, level, kernels, crowding.get(name, float("nan")))
            for name, level in levels.items() if level > 0}


def _input_shape(input_shape) -> tuple[int, ...] | None:
    """``apply``'s ``input_shape`` as a tuple of sizes: a sequence of positive ints, or text as
    the command line takes it (``"32x3x224x224"``); InputError otherwise."""
    if input_shape is None:
        return None
    if isinstance(input_shape, str):
        from seer.layers.calls import parse_input_shape

        return parse_input_shape(input_shape, any_rank=True)
    try:
        shape = tuple(operator.index(size) for size in input_shape)
    except TypeError:
        shape = ()
    if not shape or min(shape) < 1:
        raise InputError(f"expected the input's sizes, positive integers such as (32, 3, 224, 224), got {input_shape!r}",
                         field="input_shape")
    return shape


def _example(model: nn.Module, input_shape: Sequence[int], training: bool = False) -> torch.Tensor | None:
    """A random input of ``input_shape`` for timing ``model`` as it is: where the model is in
    eval mode (a pass then changes no state; ``training``: any mode, since a copy is timed) with
    fp32 parameters on a GPU, else None. Its own generator leaves the global random state alone."""
    parameter = next(model.parameters(), None)
    if (model.training and not training) or parameter is None or not parameter.is_cuda \
            or parameter.dtype != torch.float32:
        return None
    generator = torch.Generator(device=parameter.device).manual_seed(0)
    return torch.randn(tuple(input_shape), generator=generator, device=parameter.device)


def compile(model: nn.Module, mode: str = "reduce-overhead", *, layout_optimization: bool = False, **kwargs):
    """``torch.compile(model, mode=mode, **kwargs)`` for a model seer's convolutions run in, with
    inductor's layout optimisation off: inductor runs the convolutions it can see channels-last,
    and the tensors around each of seer's (an opaque operator, NCHW as picked) change layout
    twice. docs/networks.md has what that costs, and what turning it off costs PyTorch's own."""
    # What each mode sets, as torch.compile's documentation points to: a mode and options
    # cannot both be given, so the mode is given as its options.
    from torch._inductor import list_mode_options

    options = {**list_mode_options(mode), "layout_optimization": layout_optimization}
    return torch.compile(model, options=options, **kwargs)


def restore(model: nn.Module) -> nn.Module:
    """Make every seer convolution of ``model`` the plain PyTorch module again (in place)."""
    for module in list(model.modules()):
        if isinstance(module, _SeerConv):
            module.make_plain()
    return model


def seer_convolutions(model: nn.Module) -> dict[str, _SeerConv]:
    """The seer convolutions of ``model`` by module name."""
    return {name: m for name, m in model.named_modules() if isinstance(m, _SeerConv)}
