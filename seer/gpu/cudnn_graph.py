"""One layer's convolution pass (forward, backward-data, backward-filter) through cuDNN's
graph API: built once, then run per call with nothing but pointers (GPU hosts only).

cuDNN 9 serves the legacy ``cudnnConvolutionForward`` and ``...Backward{Data,Filter}``
through its graph API and builds an execution plan on every call, which costs about 200 us
of host time. Here the plan is built once per layer, through NVIDIA's cudnn-frontend Python
package (``pip install nvidia-cudnn-frontend``, module ``cudnn``), for an engine that
realises the chosen algorithm (:attr:`seer.algorithms.Algorithm.engines` says which); a
call hands over three data pointers and the workspace.

Neither ``cudnn`` nor ``torch`` is imported at module import.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from functools import lru_cache
from typing import Any

from seer.errors import EnvironmentProblem
from seer.gpu.cudnn import packed_strides
from seer.layers.shapes import ConvShape
from seer.schema import get_math_mode

_ENGINE = re.compile(r"^eng(\d+)")


class GraphNotSupported(RuntimeError):
    """The graph API has no plan of the asked engines for this layer."""


@lru_cache(maxsize=1)
def frontend():
    """The cudnn-frontend module, imported once; EnvironmentProblem where it is missing."""
    try:
        import cudnn
    except ImportError as exc:
        raise EnvironmentProblem("seer's fast cuDNN path needs NVIDIA's cudnn-frontend: "
                                 f"pip install nvidia-cudnn-frontend ({exc})") from None
    return cudnn


def frontend_version() -> str | None:
    """cudnn-frontend's version, or None where it is not installed."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("nvidia-cudnn-frontend")
    except PackageNotFoundError:
        return None


def engine_of(plan_name: str) -> int | None:
    """The engine id in a plan's name (``eng28_k2=3_k13=1`` -> 28)."""
    match = _ENGINE.match(plan_name)
    return int(match.group(1)) if match else None


#: Bytes that a plan's tensor addresses must be a multiple of: cudnn-frontend declares its
#: tensors 16-byte aligned unless told otherwise, and a plan refuses any other address
#: (CUDNN_STATUS_BAD_PARAM_MISALIGNED_POINTER, on an input 4 bytes off; H200, cuDNN 9.19).
POINTER_ALIGNMENT = 16


def operation_graph(handle: Any, shape: ConvShape, math: str, layout: str = "nchw", pass_: str = "fwd"):
    """A built cuDNN operation graph of one fp32 convolution pass of ``shape`` (``fwd``: y from
    x and w; ``bwd_data``: dx from dy and w; ``bwd_filter``: dw from x and dy), and the uids of
    its input, filter and output tensors, in that order whatever the pass computes. Under
    ``fma`` math, plans that use tensor cores or convert inputs down are deselected.
    GraphNotSupported where the frontend does not take the graph."""
    cudnn = frontend()
    fp32 = cudnn.data_type.FLOAT
    graph = cudnn.pygraph(io_data_type=fp32, intermediate_data_type=fp32, compute_data_type=fp32, handle=handle)
    dims = {"x": shape.input_dims, "w": shape.filter_dims, "y": shape.output_dims}
    computed = {"fwd": "y", "bwd_data": "x", "bwd_filter": "w"}[pass_]
    given = {name: graph.tensor(name=name, dim=list(d), stride=packed_strides(d, layout), data_type=fp32)
             for name, d in dims.items() if name != computed}
    geometry = dict(pre_padding=list(shape.spatial_padding), post_padding=list(shape.spatial_padding),
                    stride=list(shape.spatial_stride), dilation=list(shape.spatial_dilation), compute_data_type=fp32)
    if pass_ == "fwd":
        out = graph.conv_fprop(image=given["x"], weight=given["w"], name="conv", **geometry)
    elif pass_ == "bwd_data":
        out = graph.conv_dgrad(loss=given["y"], filter=given["w"], name="dgrad", **geometry)
    else:
        out = graph.conv_wgrad(image=given["x"], loss=given["y"], name="wgrad", **geometry)
    out.set_output(True).set_data_type(fp32).set_dim(list(dims[computed])) \
        .set_stride(packed_strides(dims[computed], layout))
    if not get_math_mode(math).tensor_cores:
        graph.deselect_numeric_notes([cudnn.numerical_note.TENSOR_CORE, cudnn.numerical_note.DOWN_CONVERT_INPUTS])
    try:
        graph.validate()
        graph.build_operation_graph()
    except Exception as exc:  # noqa: BLE001 - the frontend's errors for a graph it does not take
        raise GraphNotSupported(f"{shape} ({pass_}): {exc}") from None
    tensors = dict(given, **{computed: out})
    return graph, (tensors["x"].get_uid(), tensors["w"].get_uid(), tensors["y"].get_uid())


class GraphConvolution:
    """One convolution pass of ``shape`` (forward, backward-data or backward-filter) by one
    execution plan of cuDNN's graph API, built once.

    :meth:`ranked` takes cuDNN's heuristic ranking (modes A, then FALLBACK) and builds the
    first plan whose engine is one of ``engines``; :meth:`engine` builds one engine with its
    default knobs. ``run(x_ptr, w_ptr, y_ptr, workspace_ptr)`` enqueues the plan on the
    handle's stream, its pointers by role whichever tensor the pass computes; the caller sets
    that stream (``cudnn.set_stream``) and gives a workspace of at least ``workspace_bytes``.
    """

    def __init__(self, handle: Any, shape: ConvShape, graph, uids: tuple[int, int, int], index: int) -> None:
        self.shape, self.handle, self.graph, self.index = shape, handle, graph, index
        self.uids = uids
        self._pack = dict.fromkeys(uids, 0)  # the variant pack, its pointers set per call
        self.name = graph.get_plan_name_at_index(index)
        self.engine_id = engine_of(self.name)
        self.workspace_bytes = int(graph.get_workspace_size_plan_at_index(index))
        self._execute = graph.execute_plan_at_index

    @classmethod
    def ranked(cls, handle: Any, shape: ConvShape, math: str, engines: Iterable[int] | None = None,
               layout: str = "nchw", pass_: str = "fwd") -> "GraphConvolution":
        cudnn = frontend()
        graph, uids = operation_graph(handle, shape, math, layout, pass_)
        wanted = None if engines is None else set(engines)
        try:
            graph.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
        except Exception as exc:  # noqa: BLE001 - no heuristic has a plan for this graph
            raise GraphNotSupported(f"no ranked plan for {shape} ({pass_}): {exc}") from None
        tried = []
        for index in range(graph.get_execution_plan_count()):
            name = graph.get_plan_name_at_index(index)
            if wanted is not None and engine_of(name) not in wanted:
                continue
            try:
                graph.build_plan_at_index(index)
            except Exception as exc:  # noqa: BLE001 - cudnnGraphNotSupportedError and kin
                tried.append(f"{name}: {exc}")
                continue
            return cls(handle, shape, graph, uids, index)
        raise GraphNotSupported(f"no plan of engine {sorted(wanted) if wanted else 'any'} builds for {shape} "
                                f"({pass_})"
                                + (f" ({'; '.join(tried)[:300]})" if tried else ""))

    @classmethod
    def engine(cls, handle: Any, shape: ConvShape, math: str, engine_id: int,
               layout: str = "nchw", pass_: str = "fwd") -> "GraphConvolution":
        graph, uids = operation_graph(handle, shape, math, layout, pass_)
        try:
            graph.create_execution_plan(engine_id, {})
            index = graph.get_execution_plan_count() - 1
            graph.build_plan_at_index(index)
        except Exception as exc:  # noqa: BLE001
            raise GraphNotSupported(f"engine {engine_id} for {shape} ({pass_}): {exc}") from None
        return cls(handle, shape, graph, uids, index)

    @classmethod
    def realising(cls, handle: Any, shape: ConvShape, math: str, engines: tuple[int, ...],
                  layout: str = "nchw", pass_: str = "fwd") -> "GraphConvolution":
        """The plan that runs what the legacy algorithm of ``engines`` (its
        :class:`seer.algorithms.GraphEngines` for ``math``) runs: cuDNN's first ranked plan
        among them, else the first of them that builds with its default knobs."""
        try:
            return cls.ranked(handle, shape, math, engines, layout, pass_)
        except GraphNotSupported as ranked:
            problems = [str(ranked)]
        for engine_id in engines:
            try:
                return cls.engine(handle, shape, math, engine_id, layout, pass_)
            except GraphNotSupported as exc:
                problems.append(str(exc))
        raise GraphNotSupported("; ".join(problems)[:400])

    def run(self, x_ptr: int, w_ptr: int, y_ptr: int, workspace_ptr: int = 0) -> None:
        """Enqueue the plan on the handle's stream (not thread-safe: one plan, one thread)."""
        pack, (ux, uw, uy) = self._pack, self.uids
        pack[ux], pack[uw], pack[uy] = x_ptr, w_ptr, y_ptr
        self._execute(pack, workspace_ptr, self.index, self.handle)
