"""seer: predict the run time of every GPU convolution algorithm for a layer, and pick the fastest.

Data flows one way through its modules: shapes (:mod:`seer.shapes`, :mod:`seer.grids`) ->
measurements (:mod:`seer.collect`, on a GPU) -> the tidy table (:mod:`seer.dataset`) ->
features -> models -> predictions.
"""

__version__ = "0.1.0"
