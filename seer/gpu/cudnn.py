"""ctypes binding to cuDNN 9's legacy convolution API (GPU hosts only).

CuPy 14 has no cuDNN module, so seer talks to ``libcudnn.so.9`` directly, in the style of
pynvml: the library is loaded lazily and once, every function's signature is declared in
one table, and every status is checked, raising a :class:`CudnnError` subclass chosen by
the status' category (so that ``CudnnNotSupported`` can be caught on its own).
Descriptors are context managers that destroy themselves. C names are kept for C wrappers.
"""

from __future__ import annotations

import ctypes
import glob
import os
import sys
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from seer.errors import EnvironmentProblem
from seer.layers.shapes import LAYOUTS, ConvShape
from seer.schema import get_math_mode

# -- enums (cudnn_graph.h / cudnn_cnn.h, cuDNN 9) ----------------------------------------
CUDNN_DATA_FLOAT = 0
CUDNN_TENSOR_NCHW = 0
CUDNN_TENSOR_NHWC = 1
CUDNN_CROSS_CORRELATION = 1
CUDNN_STATUS_SUCCESS = 0

_c_handle = ctypes.c_void_p
_c_desc = ctypes.c_void_p
_int_p = ctypes.POINTER(ctypes.c_int)


class cudnnConvolutionFwdAlgoPerf_t(ctypes.Structure):  # noqa: N801 - C name
    _fields_ = [
        ("algo", ctypes.c_int),
        ("status", ctypes.c_int),
        ("time", ctypes.c_float),
        ("memory", ctypes.c_size_t),
        ("determinism", ctypes.c_int),
        ("mathType", ctypes.c_int),
        ("reserved", ctypes.c_int * 3),
    ]


#: name -> (restype, argtypes); one place for every signature seer uses.
_SIGNATURES: dict[str, tuple[object, list[object]]] = {
    "cudnnGetVersion": (ctypes.c_size_t, []),
    "cudnnGetErrorString": (ctypes.c_char_p, [ctypes.c_int]),
    "cudnnCreate": (ctypes.c_int, [ctypes.POINTER(_c_handle)]),
    "cudnnDestroy": (ctypes.c_int, [_c_handle]),
    "cudnnSetStream": (ctypes.c_int, [_c_handle, ctypes.c_void_p]),
    "cudnnCreateTensorDescriptor": (ctypes.c_int, [ctypes.POINTER(_c_desc)]),
    "cudnnSetTensorNdDescriptor": (ctypes.c_int, [_c_desc, ctypes.c_int, ctypes.c_int, _int_p, _int_p]),
    "cudnnDestroyTensorDescriptor": (ctypes.c_int, [_c_desc]),
    "cudnnCreateFilterDescriptor": (ctypes.c_int, [ctypes.POINTER(_c_desc)]),
    "cudnnSetFilterNdDescriptor": (ctypes.c_int, [_c_desc, ctypes.c_int, ctypes.c_int, ctypes.c_int, _int_p]),
    "cudnnDestroyFilterDescriptor": (ctypes.c_int, [_c_desc]),
    "cudnnCreateConvolutionDescriptor": (ctypes.c_int, [ctypes.POINTER(_c_desc)]),
    "cudnnSetConvolutionNdDescriptor": (
        ctypes.c_int, [_c_desc, ctypes.c_int, _int_p, _int_p, _int_p, ctypes.c_int, ctypes.c_int]),
    "cudnnSetConvolutionMathType": (ctypes.c_int, [_c_desc, ctypes.c_int]),
    "cudnnSetConvolutionGroupCount": (ctypes.c_int, [_c_desc, ctypes.c_int]),
    "cudnnGetConvolutionNdForwardOutputDim": (ctypes.c_int, [_c_desc, _c_desc, _c_desc, ctypes.c_int, _int_p]),
    "cudnnDestroyConvolutionDescriptor": (ctypes.c_int, [_c_desc]),
    "cudnnGetConvolutionForwardAlgorithm_v7": (
        ctypes.c_int,
        [_c_handle, _c_desc, _c_desc, _c_desc, _c_desc, ctypes.c_int, _int_p,
         ctypes.POINTER(cudnnConvolutionFwdAlgoPerf_t)],
    ),
    "cudnnGetConvolutionForwardWorkspaceSize": (
        ctypes.c_int, [_c_handle, _c_desc, _c_desc, _c_desc, _c_desc, ctypes.c_int,
                       ctypes.POINTER(ctypes.c_size_t)]),
    # The backward passes (dgrad: the input's gradient; wgrad: the filter's), whose perf
    # structs share the forward's layout.
    "cudnnGetConvolutionBackwardDataAlgorithm_v7": (
        ctypes.c_int,
        [_c_handle, _c_desc, _c_desc, _c_desc, _c_desc, ctypes.c_int, _int_p,
         ctypes.POINTER(cudnnConvolutionFwdAlgoPerf_t)],
    ),
    "cudnnGetConvolutionBackwardDataWorkspaceSize": (
        ctypes.c_int, [_c_handle, _c_desc, _c_desc, _c_desc, _c_desc, ctypes.c_int,
                       ctypes.POINTER(ctypes.c_size_t)]),
    "cudnnConvolutionBackwardData": (
        ctypes.c_int,
        [_c_handle, ctypes.c_void_p, _c_desc, ctypes.c_void_p, _c_desc, ctypes.c_void_p, _c_desc,
         ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p, _c_desc, ctypes.c_void_p],
    ),
    "cudnnGetConvolutionBackwardFilterAlgorithm_v7": (
        ctypes.c_int,
        [_c_handle, _c_desc, _c_desc, _c_desc, _c_desc, ctypes.c_int, _int_p,
         ctypes.POINTER(cudnnConvolutionFwdAlgoPerf_t)],
    ),
    "cudnnGetConvolutionBackwardFilterWorkspaceSize": (
        ctypes.c_int, [_c_handle, _c_desc, _c_desc, _c_desc, _c_desc, ctypes.c_int,
                       ctypes.POINTER(ctypes.c_size_t)]),
    "cudnnConvolutionBackwardFilter": (
        ctypes.c_int,
        [_c_handle, ctypes.c_void_p, _c_desc, ctypes.c_void_p, _c_desc, ctypes.c_void_p, _c_desc,
         ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p, _c_desc, ctypes.c_void_p],
    ),
    "cudnnConvolutionForward": (
        ctypes.c_int,
        [_c_handle, ctypes.c_void_p, _c_desc, ctypes.c_void_p, _c_desc, ctypes.c_void_p, _c_desc,
         ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p, _c_desc, ctypes.c_void_p],
    ),
}


# -- errors -------------------------------------------------------------------------------
class CudnnError(RuntimeError):
    """A cuDNN call returned a status other than success.

    ``CudnnError(status, fn)`` returns an instance of the subclass for the status'
    category (cuDNN 9 numbers statuses by thousands: 2xxx bad parameter, 3xxx not
    supported, 4xxx internal error, 5xxx execution failed).
    """

    category = "error"

    def __new__(cls, status: int, function: str = ""):
        if cls is CudnnError:
            cls = _CATEGORY_CLASSES.get(status // 1000, CudnnError)
        return super().__new__(cls)

    def __init__(self, status: int, function: str = "") -> None:
        self.status = status
        self.function = function
        super().__init__(f"{function}: {error_string(status)} ({status})")


class CudnnBadParam(CudnnError):
    category = "bad_param"


class CudnnNotSupported(CudnnError):
    category = "not_supported"


class CudnnInternalError(CudnnError):
    category = "internal_error"


class CudnnExecutionFailed(CudnnError):
    category = "execution_failed"


_CATEGORY_CLASSES = {2: CudnnBadParam, 3: CudnnNotSupported, 4: CudnnInternalError,
                     5: CudnnExecutionFailed}


# -- library loading ----------------------------------------------------------------------
_lib: ctypes.CDLL | None = None
_lib_path: str | None = None


def _candidate_paths() -> list[str]:
    """Where libcudnn.so.9 may be: $SEER_CUDNN_LIBRARY, the nvidia-cudnn wheel, the system."""
    found: list[str] = []
    override = os.environ.get("SEER_CUDNN_LIBRARY")
    if override:
        found.append(override)
    for entry in sys.path:
        found.extend(sorted(glob.glob(os.path.join(entry, "nvidia", "cudnn", "lib", "libcudnn.so.9*"))))
    found.append("libcudnn.so.9")  # the dynamic loader's search path (system copy)
    return found


def load_library() -> ctypes.CDLL:
    """Load cuDNN once and declare every signature; raise EnvironmentProblem if absent."""
    global _lib, _lib_path
    if _lib is not None:
        return _lib
    errors = []
    for path in _candidate_paths():
        try:
            lib = ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
        except OSError as exc:
            errors.append(f"{path}: {exc}")
            continue
        for name, (restype, argtypes) in _SIGNATURES.items():
            fn = getattr(lib, name)
            fn.restype = restype
            fn.argtypes = argtypes
        _lib, _lib_path = lib, path
        return lib
    raise EnvironmentProblem(
        "No cuDNN 9 library found (install the nvidia-cudnn-cu13 wheel or set "
        "SEER_CUDNN_LIBRARY to libcudnn.so.9); tried: " + "; ".join(errors))


def library_path() -> str | None:
    """Path of the loaded cuDNN library, resolved to the real file where possible."""
    if _lib_path is None:
        return None
    path = Path(_lib_path)
    return str(path.resolve()) if path.exists() else _lib_path


def error_string(status: int) -> str:
    if _lib is None:
        return "cuDNN status"
    return _lib.cudnnGetErrorString(status).decode(errors="replace")


def _check(status: int, function: str) -> None:
    if status != CUDNN_STATUS_SUCCESS:
        raise CudnnError(status, function)


def _call(name: str, *args) -> None:
    _check(getattr(load_library(), name)(*args), name)


def version() -> str:
    """cuDNN version as 'major.minor.patch' (cuDNN 9 encodes it as M*10000 + m*100 + p)."""
    v = int(load_library().cudnnGetVersion())
    return f"{v // 10000}.{(v % 10000) // 100}.{v % 100}"


def _ints(values: Sequence[int]):
    return (ctypes.c_int * len(values))(*values)


# -- handle and descriptors ---------------------------------------------------------------
class Handle:
    """A cuDNN handle bound to a CUDA stream (0 = the legacy default stream)."""

    def __init__(self, stream: int = 0) -> None:
        self.ptr = _c_handle()
        _call("cudnnCreate", ctypes.byref(self.ptr))
        self.stream = None
        self.set_stream(stream)

    def set_stream(self, stream: int) -> None:
        """Run later calls on ``stream`` (a ``cudaStream_t`` as an integer)."""
        if stream != self.stream:
            _call("cudnnSetStream", self.ptr, ctypes.c_void_p(stream))
            self.stream = stream

    def close(self) -> None:
        if self.ptr:
            _call("cudnnDestroy", self.ptr)
            self.ptr = _c_handle()

    def __enter__(self) -> "Handle":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class _Descriptor:
    _create = _destroy = ""

    def __init__(self) -> None:
        self.ptr = _c_desc()
        _call(self._create, ctypes.byref(self.ptr))

    def close(self) -> None:
        if self.ptr:
            _call(self._destroy, self.ptr)
            self.ptr = _c_desc()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def packed_strides(dims: Sequence[int], layout: str) -> list[int]:
    """Element strides of a packed tensor of NC[D]HW ``dims`` laid out as ``layout``: memory
    order N, C, spatial (``nchw``) or N, spatial, C (``nhwc``), outermost first."""
    order = list(range(len(dims))) if layout == "nchw" else [0, *range(2, len(dims)), 1]
    strides = [1] * len(dims)
    step = 1
    for axis in reversed(order):
        strides[axis] = step
        step *= dims[axis]
    return strides


class TensorDescriptor(_Descriptor):
    """A packed fp32 tensor of NCHW (or NCDHW) dims, laid out as ``layout`` says
    (:data:`seer.layers.shapes.LAYOUTS`: ``nhwc`` is channels-last)."""

    _create, _destroy = "cudnnCreateTensorDescriptor", "cudnnDestroyTensorDescriptor"

    def __init__(self, dims: Sequence[int], layout: str = "nchw") -> None:
        super().__init__()
        strides = packed_strides(dims, layout)
        _call("cudnnSetTensorNdDescriptor", self.ptr, CUDNN_DATA_FLOAT, len(dims),
              _ints(dims), _ints(strides))


class FilterDescriptor(_Descriptor):
    """An fp32 filter of KCRS (or KCTRS) dims, laid out KCRS or, for ``nhwc``, KRSC."""

    _create, _destroy = "cudnnCreateFilterDescriptor", "cudnnDestroyFilterDescriptor"

    def __init__(self, dims: Sequence[int], layout: str = "nchw") -> None:
        super().__init__()
        _call("cudnnSetFilterNdDescriptor", self.ptr, CUDNN_DATA_FLOAT,
              CUDNN_TENSOR_NCHW if layout == "nchw" else CUDNN_TENSOR_NHWC, len(dims), _ints(dims))


class ConvolutionDescriptor(_Descriptor):
    """Cross-correlation (what frameworks call convolution), fp32 compute, any group count."""

    _create, _destroy = "cudnnCreateConvolutionDescriptor", "cudnnDestroyConvolutionDescriptor"

    def __init__(self, padding: Sequence[int], stride: Sequence[int], dilation: Sequence[int], groups: int,
                 math: str) -> None:
        super().__init__()
        _call("cudnnSetConvolutionNdDescriptor", self.ptr, len(padding), _ints(padding), _ints(stride),
              _ints(dilation), CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT)
        _call("cudnnSetConvolutionGroupCount", self.ptr, groups)
        _call("cudnnSetConvolutionMathType", self.ptr, get_math_mode(math).cudnn_math_type)


# -- one convolution problem --------------------------------------------------------------
@dataclass
class HeuristicChoice:
    algo: int
    status: int
    math_type: int
    memory_bytes: int
    deterministic: bool = True


class ConvolutionProblem:
    """Descriptors for one layer and math mode, with the calls seer makes on them.

    Parameters
    ----------
    handle : Handle
    shape : ConvShape
        The layer: its input, grouped filter (K, C/G, ...), padding, stride and dilation
        per spatial axis and group count become Nd descriptors (4D or 5D tensors).
    math : str
        A math mode of :data:`seer.schema.MATH_MODES`.
    layout : str, default="nchw"
        Memory layout of the tensors (:data:`seer.layers.shapes.LAYOUTS`); ``y_dims`` stay NCHW.
    """

    def __init__(self, handle: Handle, shape: ConvShape, math: str, layout: str = "nchw") -> None:
        if layout not in LAYOUTS:
            raise ValueError(f"layout {layout!r} is not one of {', '.join(LAYOUTS)}")
        self.handle, self.math = handle, math
        self._stack = ExitStack()
        x_dims = shape.input_dims
        try:
            self.x_desc = self._stack.enter_context(TensorDescriptor(x_dims, layout))
            self.w_desc = self._stack.enter_context(FilterDescriptor(shape.filter_dims, layout))
            self.conv_desc = self._stack.enter_context(ConvolutionDescriptor(
                shape.spatial_padding, shape.spatial_stride, shape.spatial_dilation, shape.groups, math))
            out = (ctypes.c_int * len(x_dims))()
            _call("cudnnGetConvolutionNdForwardOutputDim", self.conv_desc.ptr, self.x_desc.ptr,
                  self.w_desc.ptr, len(x_dims), out)
            self.y_dims = tuple(out)
            if self.y_dims != shape.output_dims:  # seer's output rule and cuDNN's must agree
                raise CudnnError(2000, f"cudnnGetConvolutionNdForwardOutputDim gave {self.y_dims}, "
                                       f"seer expects {shape.output_dims}")
            self.y_desc = self._stack.enter_context(TensorDescriptor(self.y_dims, layout))
        except BaseException:
            self._stack.close()
            raise

    def close(self) -> None:
        self._stack.close()

    def __enter__(self) -> "ConvolutionProblem":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def heuristic(self, max_algos: int = 16) -> list[HeuristicChoice]:
        """cuDNN's own ranking (cudnnGetConvolutionForwardAlgorithm_v7), best first."""
        results = (cudnnConvolutionFwdAlgoPerf_t * max_algos)()
        returned = ctypes.c_int()
        _call("cudnnGetConvolutionForwardAlgorithm_v7", self.handle.ptr, self.x_desc.ptr,
              self.w_desc.ptr, self.conv_desc.ptr, self.y_desc.ptr, max_algos,
              ctypes.byref(returned), results)
        return [HeuristicChoice(r.algo, r.status, r.mathType, int(r.memory))
                for r in results[: returned.value]]

    def workspace_size(self, algo: int) -> int:
        size = ctypes.c_size_t()
        _call("cudnnGetConvolutionForwardWorkspaceSize", self.handle.ptr, self.x_desc.ptr,
              self.w_desc.ptr, self.conv_desc.ptr, self.y_desc.ptr, algo, ctypes.byref(size))
        return int(size.value)

    # -- the backward passes: "bwd_data" (dx from dy and w) and "bwd_filter" (dw from x and dy)
    def backward_heuristic(self, pass_: str, max_algos: int = 16) -> list[HeuristicChoice]:
        """cuDNN's own ranking of ``pass_``'s algorithms (``..._v7``), best first, with whether
        each is deterministic."""
        results = (cudnnConvolutionFwdAlgoPerf_t * max_algos)()
        returned = ctypes.c_int()
        name, descriptors = self._backward(pass_, "cudnnGetConvolutionBackward{}Algorithm_v7")
        _call(name, self.handle.ptr, *descriptors, max_algos, ctypes.byref(returned), results)
        return [HeuristicChoice(r.algo, r.status, r.mathType, int(r.memory), r.determinism == 1)
                for r in results[: returned.value]]

    def backward_workspace_size(self, pass_: str, algo: int) -> int:
        size = ctypes.c_size_t()
        name, descriptors = self._backward(pass_, "cudnnGetConvolutionBackward{}WorkspaceSize")
        _call(name, self.handle.ptr, *descriptors, algo, ctypes.byref(size))
        return int(size.value)

    def backward(self, pass_: str, algo: int, a_ptr: int, dy_ptr: int, out_ptr: int,
                 workspace_ptr: int, workspace_bytes: int) -> None:
        """dx = dgrad(w, dy) (``bwd_data``: ``a_ptr`` is w) or dw = wgrad(x, dy) (``bwd_filter``:
        ``a_ptr`` is x), with the given algorithm (alpha 1, beta 0)."""
        alpha, beta = ctypes.c_float(1.0), ctypes.c_float(0.0)
        if pass_ == "bwd_data":
            a_desc, out_desc, name = self.w_desc, self.x_desc, "cudnnConvolutionBackwardData"
        elif pass_ == "bwd_filter":
            a_desc, out_desc, name = self.x_desc, self.w_desc, "cudnnConvolutionBackwardFilter"
        else:
            raise ValueError(f"unknown backward pass {pass_!r}")
        _call(name, self.handle.ptr, ctypes.byref(alpha), a_desc.ptr, ctypes.c_void_p(a_ptr), self.y_desc.ptr,
              ctypes.c_void_p(dy_ptr), self.conv_desc.ptr, algo, ctypes.c_void_p(workspace_ptr or None),
              workspace_bytes, ctypes.byref(beta), out_desc.ptr, ctypes.c_void_p(out_ptr))

    def _backward(self, pass_: str, template: str) -> tuple[str, tuple]:
        """The C function for ``pass_`` and its descriptors in cuDNN's order (the known input,
        dy, the convolution, the gradient computed)."""
        if pass_ == "bwd_data":
            return template.format("Data"), (self.w_desc.ptr, self.y_desc.ptr, self.conv_desc.ptr, self.x_desc.ptr)
        if pass_ == "bwd_filter":
            return template.format("Filter"), (self.x_desc.ptr, self.y_desc.ptr, self.conv_desc.ptr, self.w_desc.ptr)
        raise ValueError(f"unknown backward pass {pass_!r}")

    def forward(self, algo: int, x_ptr: int, w_ptr: int, y_ptr: int,
                workspace_ptr: int, workspace_bytes: int) -> None:
        """y = conv(x, w) with the given algorithm (alpha 1, beta 0)."""
        alpha, beta = ctypes.c_float(1.0), ctypes.c_float(0.0)
        _call("cudnnConvolutionForward", self.handle.ptr, ctypes.byref(alpha), self.x_desc.ptr,
              ctypes.c_void_p(x_ptr), self.w_desc.ptr, ctypes.c_void_p(w_ptr), self.conv_desc.ptr,
              algo, ctypes.c_void_p(workspace_ptr or None), workspace_bytes, ctypes.byref(beta),
              self.y_desc.ptr, ctypes.c_void_p(y_ptr))
