"""cuDNN's own answers for layers, asked on this machine's GPU before anything runs.

Whether cuDNN takes each of its algorithms for a layer and how much workspace it asks for
come from descriptors alone (``cudnnGetConvolutionForwardWorkspaceSize``: no tensor is
allocated, no kernel runs), the same calls the collector's census makes. On a GPU host
they replace the CPU models' guesses (:func:`seer.predict.predictors.with_cudnn_answers`).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from seer.algorithms import algorithm_names, get_algorithm
from seer.collect.plan import CollectOptions
from seer.layers.shapes import ConvShape, layer_frame

#: An algorithm asking for more workspace than this is taken not to run, as in collection.
WORKSPACE_CAP_BYTES = CollectOptions.workspace_cap_bytes


def cudnn_workspaces(layers, math: str, workspace_cap_bytes: int = WORKSPACE_CAP_BYTES) -> pd.DataFrame:
    """Per layer (rows in order) and cuDNN algorithm (columns): the workspace bytes cuDNN asks
    for on the current GPU under ``math``, NaN where it refuses the algorithm or asks for
    more than ``workspace_cap_bytes``. Distinct layers are asked once."""
    from seer.errors import EnvironmentProblem
    from seer.gpu.cudnn import ConvolutionProblem, CudnnError, Handle, load_library

    load_library()  # EnvironmentProblem where there is no cuDNN
    try:
        handle = Handle()
    except CudnnError as exc:  # no GPU, or a driver cuDNN cannot use
        raise EnvironmentProblem(f"cuDNN cannot answer on this machine: {exc}") from None
    frame = layer_frame(layers).reset_index(drop=True)
    names = algorithm_names("cudnn")
    shapes = [ConvShape.from_mapping(row) for row in frame.to_dict("records")]
    asked: dict[ConvShape, list[float]] = {}
    with handle:
        for shape in dict.fromkeys(shapes):
            sizes = []
            with ConvolutionProblem(handle, shape, math) as problem:
                for name in names:
                    try:
                        size = problem.workspace_size(get_algorithm(name).enum)
                    except CudnnError:  # refused (not supported) or any other error: it does not run
                        size = np.nan
                    sizes.append(float(size) if size == size and size <= workspace_cap_bytes else np.nan)
            asked[shape] = sizes
    return pd.DataFrame([asked[s] for s in shapes], columns=names, dtype=float)
