"""cuDNN's own answers for layers, asked on this machine's GPU before anything runs.

Whether cuDNN takes each of its algorithms for a layer and how much workspace it asks for
come from descriptors alone (``cudnnGetConvolutionForwardWorkspaceSize`` and the backward
passes' own: no tensor is allocated, no kernel runs), the same calls the collector's census
makes. On a GPU host they replace the CPU models' guesses
(:func:`seer.predict.predictors.with_cudnn_answers`).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from seer.algorithms import algorithm_names, get_algorithm
from seer.collect.plan import CollectOptions
from seer.layers.shapes import ConvShape, layer_frame

#: An algorithm asking for more workspace than this is taken not to run, as in collection.
WORKSPACE_CAP_BYTES = CollectOptions.workspace_cap_bytes


def workspace_answers(problem, pass_: str = "fwd") -> tuple[dict[str, int], list[str], dict[str, str]]:
    """cuDNN's answers for one layer (a :class:`seer.gpu.cudnn.ConvolutionProblem`) per cuDNN
    algorithm of ``pass_`` (``cudnnGetConvolution{Forward,BackwardData,BackwardFilter}WorkspaceSize``):
    the workspace bytes of those it takes, those it does not support, and the error of any
    other refusal."""
    from seer.gpu.cudnn import CudnnError, CudnnNotSupported

    workspace, unsupported, errors = {}, [], {}
    for name in algorithm_names("cudnn", pass_=pass_):
        enum = get_algorithm(name).enum
        try:
            # The same calls a timed run makes first (seer.gpu.worker.prepare_run).
            workspace[name] = (problem.workspace_size(enum) if pass_ == "fwd"
                               else problem.backward_workspace_size(pass_, enum))
        except CudnnNotSupported:
            unsupported.append(name)
        except CudnnError as exc:
            errors[name] = str(exc)
    return workspace, unsupported, errors


def cudnn_workspaces(layers, math: str, workspace_cap_bytes: int = WORKSPACE_CAP_BYTES,
                     pass_: str = "fwd") -> pd.DataFrame:
    """Per layer (rows in order) and cuDNN algorithm of ``pass_`` (columns): the workspace
    bytes cuDNN asks for on the current GPU under ``math``, NaN where it refuses the algorithm
    or asks for more than ``workspace_cap_bytes``. Distinct layers are asked once."""
    from seer.errors import EnvironmentProblem
    from seer.gpu.cudnn import ConvolutionProblem, CudnnError, Handle, load_library

    load_library()  # EnvironmentProblem where there is no cuDNN
    try:
        handle = Handle()
    except CudnnError as exc:  # no GPU, or a driver cuDNN cannot use
        raise EnvironmentProblem(f"cuDNN cannot answer on this machine: {exc}") from None
    frame = layer_frame(layers).reset_index(drop=True)
    names = algorithm_names("cudnn", pass_=pass_)
    shapes = [ConvShape.from_mapping(row) for row in frame.to_dict("records")]
    asked: dict[ConvShape, list[float]] = {}
    with handle:
        for shape in dict.fromkeys(shapes):
            with ConvolutionProblem(handle, shape, math) as problem:
                workspace = workspace_answers(problem, pass_)[0]  # a refusal of any kind: it does not run
            asked[shape] = [float(workspace[name]) if workspace.get(name, np.inf) <= workspace_cap_bytes else np.nan
                            for name in names]
    return pd.DataFrame([asked[s] for s in shapes], columns=names, dtype=float)
