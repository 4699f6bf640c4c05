"""Python's cyclic garbage collector paused over work that makes many lasting objects and
little garbage: importing pandas and loading a model (``seer predict``), decoding raw records
and building a dataset's tables from them (``seer parse``).

Each container made counts towards the collector's next pass, and a pass scans every container
alive; where none of them is garbage, those passes are pure cost (measured in
docs/predicting.md, *Prediction speed*, and the CHANGELOG's ``seer parse`` entry).
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def collector_paused(freeze: bool = False) -> Iterator[None]:
    """The collector off for the block, then as it was. With ``freeze`` (a program that ends
    after its command) what the block made moves to the generation the collector never scans;
    without it, the objects wait in the youngest generation and the first passes after the
    block scan them all, but a caller's later garbage stays collectable."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if freeze:
            gc.freeze()
        if enabled:
            gc.enable()
