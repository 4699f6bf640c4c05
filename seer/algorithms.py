"""The algorithm registry and the kernel-name rules: the only place that names algorithms.

An :class:`Algorithm` is one way of computing a convolution pass (:data:`PASSES`): a cuDNN
algorithm of the forward or of a backward pass, seer's own CuPy kernels (``source="cupy"``),
seer's sparse kernels (``source="sparse"``, measured on sparse inputs only), or PyTorch's own
choice, measured as a policy (``source="pytorch"``).
:data:`KERNEL_RULES` is the one table that maps a GPU kernel's (demangled) name to its
role inside an algorithm and to the variant (tile size, data type) that the name encodes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # numpy is imported where records are read, not with the registry
    import numpy as np


@dataclass(frozen=True)
class Launches:
    """Kernel launches of one call, the median over seer's traces of each kind of layer
    (``data/<gpu>/traced_kernels/``; ``tests/test_algorithms.py`` checks the table on
    them): ``fma`` and ``default`` on a layer of one group, by math mode; on grouped and
    depthwise layers, ``grouped`` and ``depthwise`` kernels per group where the algorithm
    loops over the groups, else one. Each launch costs host time, which seer's guard counts."""

    fma: int
    default: int
    grouped: int = 0
    depthwise: int = 0
    grouped_default: int | None = None  # per group on grouped layers under default math, where it differs

    def of(self, layer, math: str) -> int:
        """Launches of one call on ``layer`` (a :class:`seer.layers.shapes.ConvShape`)."""
        if layer.groups == 1:
            return self.fma if math == "fma" else self.default
        if layer.is_depthwise:
            per_group = self.depthwise
        else:
            per_group = self.grouped if math == "fma" or self.grouped_default is None else self.grouped_default
        return max(1, per_group * layer.groups)


@dataclass(frozen=True)
class Algorithm:
    """One convolution algorithm (or policy) of one pass.

    Parameters
    ----------
    name : str
        Registry key; for cuDNN's forward the enum name without ``CUDNN_CONVOLUTION_FWD_ALGO_``.
    source : {"cudnn", "cupy", "sparse", "pytorch"}
        Who implements it; ``pytorch`` is PyTorch's own choice, a policy measured beside the
        algorithms (seer never picks it as an algorithm); ``sparse``: seer's kernels that skip
        the input's zeros (:data:`SPARSE_ALGORITHMS`).
    enum : int or None
        The library's own id (cudnnConvolutionFwdAlgo_t value) where there is one.
    short : str
        A short tag for Excel sheet names (31-character limit).
    seer_index : int or None
        The algorithm's number in SEER's data format, which differs from cuDNN's enum.
    one_math : str or None
        The math mode whose runs stand for every math mode, for an algorithm with one code
        path whatever the mode asks (seer's kernels compute in FP32 FMA only); None for an
        algorithm whose kernels depend on the math mode (cuDNN's).
    revision : int
        The revision of seer's own kernel code and launch plans (cuDNN's algorithms are
        versioned by ``cudnn_version``). A run recorded under an earlier revision measured
        other code: ``seer collect`` measures it again, and the tables leave it out.
    engines : GraphEngines or None
        The engines of cuDNN's graph API that launch the same kernels as this legacy
        algorithm (:mod:`seer.gpu.cudnn_graph` runs them); None where none is known, and the
        legacy call runs the algorithm.
    launches : Launches
        How many kernels one call launches, per kind of layer (one, unless told).
    family : str
        How it computes the convolution (:data:`FAMILIES`): SEER's model, for one, treats the
        FFT and Winograd families apart.
    pass_ : str
        The convolution it computes (:data:`PASSES`): the forward, or the gradient of the
        input or of the filter. ``enum`` is then a ``cudnnConvolutionBwd{Data,Filter}Algo_t``.
    deterministic : bool
        False where cuDNN documents (and reports, in its heuristic's answer) that repeated
        calls may sum in another order: those accumulate with atomic adds.
    capturable : bool
        False where a call waits for the GPU (it counts the input's non-zeros on the host),
        so that it cannot run inside a CUDA-graph capture.
    """

    name: str
    source: str
    enum: int | None
    short: str
    seer_index: int | None
    description: str
    one_math: str | None = None
    revision: int = 1
    engines: "GraphEngines | None" = None
    launches: Launches = Launches(1, 1)
    family: str = "implicit_gemm"
    pass_: str = "fwd"
    deterministic: bool = True
    capturable: bool = True

    def __post_init__(self) -> None:
        if self.family not in FAMILIES:
            raise ValueError(f"{self.name}: family {self.family!r} is not one of {FAMILIES}")
        if self.pass_ not in PASSES:
            raise ValueError(f"{self.name}: pass {self.pass_!r} is not one of {PASSES}")


@dataclass(frozen=True)
class GraphEngines:
    """Engines of cuDNN's graph API that realise a legacy algorithm, under ``fma`` math and
    under ``default`` math.

    The plan that runs is cuDNN's first ranked plan among these engines (the legacy call
    makes the same choice), else the first of them with its default knobs. Found by
    ``benchmarks/cudnn_engines.py``, which compares the kernels each plan launches with the
    legacy call's (``benchmarks/results/cudnn-engines.md``).
    """

    fma: tuple[int, ...]
    default: tuple[int, ...]
    #: The engines of a depthwise layer under either math, where the legacy call runs others there.
    depthwise: tuple[int, ...] | None = None

    def for_math(self, math: str) -> tuple[int, ...]:
        return self.fma if math == "fma" else self.default

    def of(self, layer, math: str) -> tuple[int, ...]:
        """The engines for ``layer`` (a :class:`seer.layers.shapes.ConvShape`) under ``math``."""
        if self.depthwise is not None and layer.is_depthwise:
            return self.depthwise
        return self.for_math(math)


#: The convolution passes of a training step: the forward (``fwd``), the gradient of the
#: input (``bwd_data``, dgrad) and of the filter (``bwd_filter``, wgrad).
PASSES: tuple[str, ...] = ("fwd", "bwd_data", "bwd_filter")
#: Each pass as tables and the terminal name it.
PASS_NAMES: dict[str, str] = {"fwd": "forward", "bwd_data": "dgrad", "bwd_filter": "wgrad"}
#: How a heading names a model's pass: the forward's is the default, and goes unsaid.
PASS_TITLES: dict[str, str] = {"fwd": "", "bwd_data": "backward data (dgrad)", "bwd_filter": "backward filter (wgrad)"}

#: How an algorithm computes the convolution.
FAMILIES: tuple[str, ...] = ("implicit_gemm", "gemm", "direct", "fft", "winograd", "policy")
#: Words in a kernel's name that say its family, in the order they decide: where a policy's call
#: ran kernels of several (a transform and a GEMM), the first listed names it.
KERNEL_FAMILY_WORDS: tuple[tuple[str, str], ...] = (
    ("winograd", "winograd"), ("fft", "fft"), ("im2col", "gemm"), ("explicit_convolve", "gemm"), ("direct", "direct"))


def kernels_family(kernel_names) -> str:
    """The family (:data:`FAMILIES`) of a call from the names of the kernels it ran: the first of
    :data:`KERNEL_FAMILY_WORDS` that a name holds, else implicit GEMM."""
    text = " ".join(kernel_names).lower()
    for word, name in KERNEL_FAMILY_WORDS:
        if word in text:
            return name
    return "implicit_gemm"

ALGORITHMS: tuple[Algorithm, ...] = (
    Algorithm("IMPLICIT_GEMM", "cudnn", 0, "IG", 0,
              "implicit GEMM, no precomputed indices, no workspace", engines=GraphEngines((28, 0), (28, 0)),
              launches=Launches(1, 1, grouped=1)),
    Algorithm("IMPLICIT_PRECOMP_GEMM", "cudnn", 1, "IPG", 1,
              "implicit GEMM with precomputed indices (tensor cores under default math)",
              engines=GraphEngines((70, 28, 0), (58, 38, 41, 46, 67, 70, 28, 0)), launches=Launches(1, 3, grouped=1)),
    # Legacy GEMM runs engine 0 on some layers and engine 2 on others, by a rule of cuDNN's
    # own that no ranking reproduces: the legacy call runs it.
    Algorithm("GEMM", "cudnn", 2, "GEMM", 2, "explicit im2col followed by a GEMM", family="gemm"),
    Algorithm("DIRECT", "cudnn", 3, "DIR", 3, "direct convolution", family="direct"),
    Algorithm("FFT", "cudnn", 4, "FFT", 6, "FFT of whole images, pointwise product, inverse FFT",
              engines=GraphEngines((3,), (3,)), launches=Launches(5, 5, grouped=7, depthwise=8), family="fft"),
    Algorithm("FFT_TILING", "cudnn", 5, "FFTT", 7, "FFT on 32x32 tiles, in chunks",
              engines=GraphEngines((4,), (4,)), launches=Launches(7, 7, grouped=7, depthwise=7), family="fft"),
    Algorithm("WINOGRAD", "cudnn", 6, "WINO", 4, "fused Winograd transform", family="winograd"),
    Algorithm("WINOGRAD_NONFUSED", "cudnn", 7, "WINON", 5,
              "Winograd with separate transform and batched-GEMM kernels", engines=GraphEngines((6,), (6,)),
              launches=Launches(4, 4, grouped=4, depthwise=4), family="winograd"),
    # seer's own kernels (seer/gpu/kernels.py).
    Algorithm("SEER_DIRECT", "cupy", None, "SDIR", None,
              "seer's direct convolution: a thread per output position and block of channels", "fma",
              family="direct"),
    # Revision 2: slices copied into shared memory with cp.async, three in flight, and a
    # 256x64 tile (revision 1 staged one slice ahead in registers).
    Algorithm("SEER_IMPLICIT_GEMM", "cupy", None, "SIG", None,
              "seer's implicit GEMM, tiled in shared memory and registers", "fma", revision=2),
    Algorithm("SEER_IMPLICIT_GEMM_SPLITK", "cupy", None, "SIGS", None,
              "seer's implicit GEMM with the reduction split across blocks", "fma", revision=2),
    # PyTorch's own choice (seer/gpu/pytorch_policy.py): not an algorithm seer can pick, the
    # policy its picks must beat. Its engine comes from cuDNN's graph API (or PyTorch's own
    # kernels), which may be none of the legacy algorithms above.
    Algorithm("PYTORCH", "pytorch", None, "PT", None,
              "PyTorch's own choice: torch.nn.functional.conv*d, cuDNN's heuristics pick the engine",
              family="policy"),
    Algorithm("PYTORCH_BENCHMARK", "pytorch", None, "PTB", None,
              "PyTorch's own choice under torch.backends.cudnn.benchmark: trial runs pick the engine",
              family="policy"),
)


_SHORT = {"ALGO_0": "0", "ALGO_1": "1", "ALGO_3": "3", "FFT_TILING": "FFTT", "WINOGRAD": "WINO",
          "WINOGRAD_NONFUSED": "WINON"}


def _backward(pass_: str, name: str, enum: int, deterministic: bool, family: str, description: str,
              launches: Launches = Launches(1, 1), engines: GraphEngines | None = None) -> Algorithm:
    """One of cuDNN's backward algorithms, named ``BWD_DATA_ALGO_0``, ... (the pass and the
    enum name without ``CUDNN_CONVOLUTION_BWD_{DATA,FILTER}_ALGO_``)."""
    short = ("BD" if pass_ == "bwd_data" else "BF") + _SHORT.get(name, name)
    return Algorithm(f"{pass_.upper()}_{name}", "cudnn", enum, short, None, description, family=family,
                     pass_=pass_, deterministic=deterministic, launches=launches, engines=engines)


#: Their launches are the medians of the H200 dataset's traced backward calls (the test of the
#: table says how close): FFT, FFT_TILING and WINOGRAD_NONFUSED loop over a layer's groups.
#: Their engines: the plan they give launches the legacy call's kernels on 442 of the 446 legacy
#: runs of benchmarks/results/h200-cudnn-engines-bwd.csv.gz (benchmarks/cudnn_engines.py; the
#: four others in benchmarks/results/cudnn-engines.md).
BACKWARD_ALGORITHMS: tuple[Algorithm, ...] = (
    _backward("bwd_data", "ALGO_0", 0, False, "gemm", "sums the filter's contributions with atomic adds",
              Launches(2, 2, grouped=2), GraphEngines((25,), (25,), depthwise=(0,))),
    _backward("bwd_data", "ALGO_1", 1, True, "implicit_gemm", "implicit GEMM over the output gradient",
              Launches(1, 2, grouped=3, grouped_default=0),
              GraphEngines((74, 2, 0), (76, 71, 63, 58, 0), depthwise=(0,))),
    _backward("bwd_data", "FFT", 2, True, "fft", "FFT of whole images", Launches(4, 4, grouped=6, depthwise=7),
              GraphEngines((4,), (4,))),
    _backward("bwd_data", "FFT_TILING", 3, True, "fft", "FFT on 32x32 tiles", Launches(4, 4, grouped=7, depthwise=7),
              GraphEngines((5, 50), (5, 50))),
    _backward("bwd_data", "WINOGRAD", 4, True, "winograd", "fused Winograd transform"),
    _backward("bwd_data", "WINOGRAD_NONFUSED", 5, True, "winograd",
              "Winograd with separate transform and batched-GEMM kernels", Launches(4, 4, grouped=4, depthwise=4),
              GraphEngines((7,), (7,))),
    _backward("bwd_filter", "ALGO_0", 0, False, "gemm", "sums over the batch with atomic adds",
              engines=GraphEngines((20, 0), (20, 0), depthwise=(0,))),
    _backward("bwd_filter", "ALGO_1", 1, True, "implicit_gemm", "implicit GEMM over the batch", Launches(1, 3),
              GraphEngines((67, 1, 0), (68, 62, 30, 23, 40, 34, 0), depthwise=(61, 0))),
    _backward("bwd_filter", "FFT", 2, True, "fft", "FFT of whole images", Launches(5, 5, grouped=7, depthwise=8),
              GraphEngines((18,), (18,))),
    _backward("bwd_filter", "ALGO_3", 3, False, "gemm", "ALGO_0 with a small workspace, atomic adds",
              engines=GraphEngines((20, 1, 0), (20, 1, 0), depthwise=(0,))),
    _backward("bwd_filter", "WINOGRAD", 4, True, "winograd", "fused Winograd transform"),
    _backward("bwd_filter", "WINOGRAD_NONFUSED", 5, True, "winograd",
              "Winograd with separate transform and batched-GEMM kernels", Launches(4, 4, grouped=4, depthwise=4),
              GraphEngines((17,), (17,))),
    _backward("bwd_filter", "FFT_TILING", 6, True, "fft", "FFT on 32x32 tiles", Launches(4, 4, grouped=4, depthwise=4)),
    # PyTorch's own dgrad and wgrad (aten's convolution_backward, as autograd calls it).
    Algorithm("PYTORCH_BWD_DATA", "pytorch", None, "PTBD", None,
              "PyTorch's own backward-data choice: aten.convolution_backward, cuDNN's heuristics pick the engine",
              family="policy", pass_="bwd_data"),
    Algorithm("PYTORCH_BENCHMARK_BWD_DATA", "pytorch", None, "PTBBD", None,
              "PyTorch's own backward-data choice under torch.backends.cudnn.benchmark",
              family="policy", pass_="bwd_data"),
    Algorithm("PYTORCH_BWD_FILTER", "pytorch", None, "PTBF", None,
              "PyTorch's own backward-filter choice: aten.convolution_backward, cuDNN's heuristics pick the engine",
              family="policy", pass_="bwd_filter"),
    Algorithm("PYTORCH_BENCHMARK_BWD_FILTER", "pytorch", None, "PTBBF", None,
              "PyTorch's own backward-filter choice under torch.backends.cudnn.benchmark",
              family="policy", pass_="bwd_filter"),
)

#: Every algorithm and policy of every pass: the forward's first, in the order above.
ALL_ALGORITHMS: tuple[Algorithm, ...] = ALGORITHMS + BACKWARD_ALGORITHMS

#: seer's sparse forward convolutions (seer/gpu/sparse_kernels.py), which skip the zeros of
#: their input: timed only on sparse shapes (``seer collect --sparsity``), only when
#: ``--algo sparse`` (or a name) asks, and kept out of :data:`ALL_ALGORITHMS` and of every
#: other group, so that no model, prediction or report sees them. Finding the non-zeros is
#: part of each call. They compute in FP32 FMA only, as seer's own kernels do.
SPARSE_ALGORITHMS: tuple[Algorithm, ...] = (
    Algorithm("SEER_SPARSE_GATHER", "sparse", None, "SPG", None,
              "seer's sparse gather: lists each pixel's non-zero channels, then a thread per output position "
              "and 4 channels sums the listed values under its filter, no atomics", "fma", family="direct"),
    Algorithm("SEER_SPARSE_SCATTER", "sparse", None, "SPS", None,
              "seer's sparse scatter: a thread per (non-zero input, output channel) adds its products to the "
              "outputs it reaches with atomic adds", "fma", family="direct", deterministic=False, capturable=False),
    Algorithm("SEER_SPARSE_POINTWISE", "sparse", None, "SPP", None,
              "seer's sparse 1x1 convolution: the input compressed to CSR and multiplied by the filter "
              "through cuSPARSE", "fma", family="gemm", capturable=False),
)

#: Every registered algorithm, the sparse ones included: what a name is looked up in.
REGISTRY: tuple[Algorithm, ...] = ALL_ALGORITHMS + SPARSE_ALGORITHMS

_BY_NAME = {a.name: a for a in REGISTRY}


def backward_algorithms(pass_: str) -> list[Algorithm]:
    """cuDNN's algorithms of one backward pass, in enum order; ``KeyError`` for another pass."""
    if pass_ not in PASSES[1:]:
        raise KeyError(f"unknown backward pass {pass_!r}; known: {', '.join(PASSES[1:])}")
    return [a for a in BACKWARD_ALGORITHMS if a.pass_ == pass_ and a.source == "cudnn"]


def get_algorithm(name: str) -> Algorithm:
    """Look an algorithm up by name (case-insensitive); ``KeyError`` lists the known ones."""
    try:
        return _BY_NAME[name.upper()]
    except KeyError:
        raise KeyError(f"unknown algorithm {name!r}; known: {', '.join(_BY_NAME)}") from None


def pass_of(algos):
    """The pass (:data:`PASSES`) of each name of ``algos`` (a pandas Series), NaN for a name the
    registry does not know."""
    return algos.map({a.name: a.pass_ for a in REGISTRY})


#: The source of the sparse algorithms (:data:`SPARSE_ALGORITHMS`), named only when asked for.
SPARSE_SOURCE = "sparse"


def algorithm_names(source: str | None = None, family: str | None = None, pass_: str | None = "fwd") -> list[str]:
    """Names of the registered algorithms of one pass (None: every pass), in registry order,
    optionally of one source and one family. The sparse algorithms come only with
    ``source="sparse"``: every other answer is what it was before they existed."""
    pool = SPARSE_ALGORITHMS if source == SPARSE_SOURCE else ALL_ALGORITHMS
    return [a.name for a in pool
            if (source is None or a.source == source) and (family is None or a.family == family)
            and (pass_ is None or a.pass_ == pass_)]


def is_sparse(name: str) -> bool:
    """Whether ``name`` is one of the sparse algorithms, which run on sparse shapes only."""
    algo = _BY_NAME.get(name.upper())
    return algo is not None and algo.source == SPARSE_SOURCE


#: Names that ``--algo`` accepts for a group of algorithms, as (source, pass): the forward's
#: every one or one source's, a backward pass's every one, or both backward passes'. ``all``
#: leaves out the sparse algorithms (``sparse``): they need inputs with zeros.
ALGORITHM_GROUPS = {"all": (None, "fwd"), "cudnn": ("cudnn", "fwd"), "seer": ("cupy", "fwd"),
                    "pytorch": ("pytorch", "fwd"), "bwd_data": (None, "bwd_data"),
                    "bwd_filter": (None, "bwd_filter"), "backward": (None, ("bwd_data", "bwd_filter")),
                    "sparse": (SPARSE_SOURCE, "fwd")}


def _group(name: str) -> list[str]:
    source, passes = ALGORITHM_GROUPS[name]
    return [n for p in ((passes,) if isinstance(passes, str) else passes) for n in algorithm_names(source, pass_=p)]


def select_algorithms(text: str) -> list[str]:
    """Algorithm names from a comma-separated list of names and groups
    (:data:`ALGORITHM_GROUPS`), in registry order within a group; ``KeyError`` names the unknown one."""
    names: list[str] = []
    for item in (t.strip() for t in text.split(",") if t.strip()):
        if item.lower() in ALGORITHM_GROUPS:
            names += _group(item.lower())
        else:
            try:
                names.append(get_algorithm(item).name)
            except KeyError:
                raise KeyError(f"unknown algorithm {item!r}; known: {', '.join(_BY_NAME)}, "
                               f"or a group: {', '.join(ALGORITHM_GROUPS)}") from None
    return list(dict.fromkeys(names))


#: The record field (timing, profile and kernel records) that holds the revision of seer's
#: kernel a run measured; records without it measured revision 1.
REVISION_FIELD = "kernel_revision"


def stamp_revision(record: dict) -> dict:
    """``record`` with its algorithm's revision, if it is a run of one of seer's kernels that
    does not already say which revision it measured."""
    algo = _BY_NAME.get(record.get("algo", ""))
    own = algo is not None and algo.source in ("cupy", SPARSE_SOURCE)
    return {REVISION_FIELD: algo.revision} | record if own else record


def current_revision(records) -> np.ndarray:
    """Which records (a frame with ``algo``, and ``kernel_revision`` where recorded) measured
    today's revision of their algorithm; every run of cuDNN's algorithms does."""
    import numpy as np

    today = records["algo"].map({a.name: a.revision for a in REGISTRY if a.source in ("cupy", SPARSE_SOURCE)})
    recorded = records[REVISION_FIELD].fillna(1) if REVISION_FIELD in records.columns else 1
    return np.asarray(today.isna() | (today == recorded), dtype=bool)


def heuristic_ranks(choices) -> dict[str, int]:
    """1-based rank of each algorithm at its first appearance in cuDNN's heuristic list of
    (algorithm name, math type) pairs, best first (an algorithm may appear more than once)."""
    ranks: dict[str, int] = {}
    for name, _ in choices:
        ranks.setdefault(name, len(ranks) + 1)
    return ranks


def cudnn_algorithm_by_enum(enum: int, pass_: str = "fwd") -> Algorithm:
    for a in ALL_ALGORITHMS:
        if a.source == "cudnn" and a.enum == enum and a.pass_ == pass_:
            return a
    raise KeyError(f"no cuDNN {pass_} algorithm with enum {enum}")


# -- kernel names -> role and variant ---------------------------------------------------
@dataclass(frozen=True)
class KernelRule:
    """How to read one family of kernel names.

    ``role`` is ``"compute"`` for the kernel that does the convolution's arithmetic (the
    main kernel is the longest-running compute kernel of a run) and ``"transform"`` for
    layout changes, FFTs, Winograd transforms, im2col and the like. ``variant`` is a
    ``str.format`` template over the pattern's named groups; it names the tile size and
    data type that the kernel name encodes.
    """

    family: str
    pattern: str
    role: str
    variant: str

    @property
    def regex(self) -> re.Pattern[str]:
        return _compile(self.pattern)


@lru_cache(maxsize=None)
def _compile(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern)


#: First match wins, so specific patterns come before general ones. Written against the
#: kernel names cuDNN 9.19 and cuBLAS launched on the H100 (tests/test_algorithms.py).
KERNEL_RULES: tuple[KernelRule, ...] = (
    # seer's sparse kernels (seer/gpu/sparse_kernels.py): the listing pass finds the non-zeros.
    KernelRule("seer_sparse", r"seer_sparse_(?P<what>gather|scatter)", "compute", "sparse_{what}"),
    KernelRule("seer_sparse", r"seer_sparse_list", "transform", "sparse_list"),
    # seer's own kernels: the template arguments are the tile (seer/gpu/kernels.py); an
    # instance that adds the bias is the same tile.
    KernelRule("seer_direct", r"seer_direct_conv_nhwc(?:_bias)?<(?P<k>\d+),\s*(?P<p>\d+)>", "compute",
               "direct_nhwc_k{k}_p{p}"),
    KernelRule("seer_direct", r"seer_direct_conv(?:_bias)?<(?P<k>\d+)>", "compute", "direct_k{k}"),
    KernelRule("seer_implicit_gemm",
               r"seer_implicit_gemm(?P<layout>_nhwc|)(?:_bias)?<(?P<bm>\d+),\s*(?P<bn>\d+),\s*(?P<bk>\d+),\s*(?P<tm>\d+),"
               r"\s*(?P<tn>\d+),\s*(?P<split>[01]),\s*(?P<minb>\d+),\s*(?P<stages>\d+)>",
               "compute", "igemm{layout}_{bm}x{bn}x{bk}_{tm}x{tn}_b{minb}_s{stages}"),
    # Revision 1 of the implicit GEMM (no stages: registers staged the next slice).
    KernelRule("seer_implicit_gemm",
               r"seer_implicit_gemm<(?P<bm>\d+),\s*(?P<bn>\d+),\s*(?P<bk>\d+),\s*(?P<tm>\d+),\s*(?P<tn>\d+),"
               r"\s*(?P<split>[01]),\s*(?P<minb>\d+)>",
               "compute", "igemm_{bm}x{bn}x{bk}_{tm}x{tn}_b{minb}"),
    # cuDNN's own implicit and explicit GEMM: the template arguments carry the tiling.
    KernelRule("implicit_sgemm",
               r"implicit_convolve_sgemm<[^,]+,\s*[^,]+,\s*(?P<a>\d+),\s*(?P<b>\d+),\s*(?P<c>\d+),"
               r"\s*(?P<d>\d+),\s*(?P<e>\d+),\s*(?P<f>\d+)",
               "compute", "sgemm_{a}x{b}x{c}_{d}{e}{f}"),
    KernelRule("implicit_sgemm", r"implicit_convolve_sgemm", "compute", "sgemm"),
    KernelRule("explicit_sgemm",
               r"explicit_convolve_sgemm<[^,]+,\s*[^,]+,\s*(?P<a>\d+),\s*(?P<b>\d+),\s*(?P<c>\d+)",
               "compute", "explicit_{a}x{b}x{c}"),
    # XMMA implicit-GEMM fprop kernels (sm80: HMMA or FFMA; sm90: warpgroup GMMA): the
    # architecture, indexing scheme, math types and CTA tile are in the name.
    KernelRule("xmma_fprop",
               r"(?P<arch>sm\d+)_xmma_fprop_implicit_gemm_(?P<idx>indexed_wo_smem_|indexed_)?"
               r"[a-z0-9]+_(?P<math>[a-z0-9]+)_\w*?tilesize(?P<tile>\d+x\d+x\d+)",
               "compute", "{arch}_fprop_{idx}{math}_{tile}"),
    # The backward passes' kernels (cuDNN 9.19 on the H200 and H100): XMMA dgrad and wgrad,
    # the legacy dgrad and wgrad engines, and the grouped direct kernels.
    KernelRule("xmma_bwd",
               r"(?P<arch>sm\d+)_xmma_(?P<op>dgrad|wgrad)_implicit_gemm_(?P<idx>indexed_wo_smem_|indexed_)?"
               r"[a-z0-9]+_(?P<math>[a-z0-9]+)_\w*?tilesize(?P<tile>\d+x\d+x\d+)",
               "compute", "{arch}_{op}_{idx}{math}_{tile}"),
    KernelRule("bwd_engine",
               r"(?P<op>dgrad|wgrad_alg\d)_engine<\w+,\s*(?:[A-Za-z_]\w*,\s*)?(?P<a>\d+),\s*(?P<b>\d+),\s*(?P<c>\d+)",
               "compute", "{op}_{a}x{b}x{c}"),
    KernelRule("bwd_grouped_direct", r"(?P<op>dgrad|wgrad)2d_grouped_direct_kernel", "compute", "{op}_grouped_direct"),
    KernelRule("split_k_reduce", r"reduce_wgrad", "transform", "reduce_wgrad"),
    KernelRule("xmma_gemm",
               r"(?P<arch>sm\d+)_xmma_gemm_(?P<io>[a-z0-9]+)_(?P<math>[a-z0-9]+)_\w*?tilesize(?P<tile>\d+x\d+x\d+)",
               "compute", "{arch}_gemm_{io}_{math}_{tile}"),
    KernelRule("cutlass_tensorop",
               r"cutlass_(?:\d+_)?tensorop_(?P<op>[a-z0-9]+?(?:gemm|fprop))(?:_optimized)?(?:_(?P<dtype>tf32|f16|bf16))?"
               r"_(?P<tile>\d+x\d+)_(?P<k>\d+)x(?P<stages>\d+)",
               "compute", "cutlass_{op}_{tile}_{k}x{stages}"),
    KernelRule("cutlass_simt",
               r"cutlass_(?:\d+_)?simt_(?P<op>[a-z0-9]+gemm)_(?P<tile>\d+x\d+)_(?P<k>\d+)x(?P<stages>\d+)",
               "compute", "cutlass_simt_{op}_{tile}_{k}x{stages}"),
    KernelRule("conv2d_grouped_direct", r"conv2d_grouped_direct_kernel", "compute", "grouped_direct"),
    # cuBLAS kernels that FFT and Winograd algorithms call for their products.
    KernelRule("cublas_gemv", r"gemv2[NT]_kernel|gemvx::kernel|internal::kernel<[^(]*cublasGemv",
               "compute", "gemv"),
    KernelRule("cublas_gemm", r"gemmSN_(?P<t>[NT]{2})_kernel<[^,]+,\s*(?P<a>\d+),\s*(?P<b>\d+)",
               "compute", "gemmSN_{t}_{a}x{b}"),
    KernelRule("cublas_gemm", r"magma_sgemmEx_kernel", "compute", "magma_sgemm"),
    KernelRule("pointwise_mult", r"pointwise_mult_and_sum_complex", "compute", "pointwise_complex"),
    KernelRule("winograd_fused", r"winograd\w*fprop|winograd\w*_fwd_kernel", "compute", "winograd_fused"),
    KernelRule("gemm", r"gemm", "compute", "gemm"),
    # Transforms and helpers.
    KernelRule("fft", r"fft\dd_(?P<dir>r2c|c2r|c2c)_(?P<size>\d+(?:x\d+)?)", "transform", "fft_{dir}_{size}"),
    KernelRule("fft", r"DSE::(?P<kind>regular_fft_clip|regular_fft_pad|vector_fft)", "transform", "dse_{kind}"),
    KernelRule("fft", r"fft", "transform", "fft"),
    KernelRule("winograd_transform", r"winograd\w*?(?P<what>Data|Filter|Output)(?P<tile>\d+x\d+)",
               "transform", "winograd_{tile}"),
    KernelRule("winograd_transform", r"[Ww]inograd", "transform", "winograd"),
    KernelRule("layout", r"nchwToNhwc|nhwcToNchw|nchwAddPadding|tensorTransform|region_transform|[Tt]ranspose",
               "transform", "layout"),
    KernelRule("im2col", r"im2col", "transform", "im2col"),
    KernelRule("flip_filter", r"flip_filter", "transform", "flip_filter"),
    KernelRule("split_k_reduce", r"splitKreduce", "transform", "split_k_reduce"),
    KernelRule("helper", r"", "transform", "other"),
)

#: Abbreviations applied to variant names, which become Excel sheet names (31 characters).
_VARIANT_ABBREVIATIONS = {"indexed_wo_smem_": "idxwo_", "indexed_": "idx_"}


@dataclass(frozen=True)
class KernelInfo:
    family: str
    role: str
    variant: str


#: Names under which ncu reports one and the same kernel. cuBLAS's templated GEMV kernel
#: (launched by cuDNN's FFT algorithms) comes out as ``gemvx::kernel<...>`` in one ncu
#: process and ``internal::kernel<...>`` in another, with identical template arguments.
_KERNEL_ALIASES = ((re.compile(r"\binternal::kernel<(?=[^(]*cublasGemv)"), "gemvx::kernel<"),)


def canonical_kernel_name(kernel_name: str) -> str:
    """The kernel's name with ncu's aliases resolved: equal names mean the same kernel."""
    for pattern, replacement in _KERNEL_ALIASES:
        kernel_name = pattern.sub(replacement, kernel_name)
    return kernel_name


def classify_kernel(kernel_name: str) -> KernelInfo:
    """Family, role and variant of one kernel, from its (demangled) name."""
    for rule in KERNEL_RULES:
        m = rule.regex.search(kernel_name)
        if m:
            groups = {k: v or "" for k, v in m.groupdict().items()}
            variant = rule.variant.format(**groups)
            for long, short in _VARIANT_ABBREVIATIONS.items():
                variant = variant.replace(long, short)
            return KernelInfo(rule.family, rule.role, variant)
    raise AssertionError("the last rule matches every name")
