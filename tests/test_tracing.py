"""CUPTI's buffer callback and the trace selection, fed activity records made here (no GPU)."""

import threading
from types import SimpleNamespace

import pytest

from seer.collect.records import sum_by_name
from seer.gpu import tracing

KERNEL = 10  # CUPTI's CONCURRENT_KERNEL kind


def _activity(name, start, end, grid_x, correlation, kind=KERNEL):
    return SimpleNamespace(kind=kind, name=name, start=start, end=end, grid_x=grid_x, grid_y=1, grid_z=1,
                           block_x=128, block_y=1, block_z=1, registers_per_thread=32,
                           static_shared_memory=0, dynamic_shared_memory=1024, correlation_id=correlation)


@pytest.fixture
def state():
    """The process-wide CUPTI state, without CUPTI: only what the buffer callback uses."""
    state = object.__new__(tracing._Cupti)
    state.lock = threading.Lock()
    state.records, state.callback_errors, state.longest_ns = [], [], {}
    state.kernel_kinds = (KERNEL, 3)
    return state


def test_the_summed_trace_keeps_the_configuration_of_each_names_longest_launch(state):
    # Two buffers, as CUPTI delivers a full one early: the longest "fft" is in the second.
    state._buffer_completed([_activity("fft", 100, 110, 8, 1), _activity("gemm", 120, 170, 64, 2),
                             _activity("memcpy", 90, 95, 1, 0, kind=1)])
    state._buffer_completed([_activity("fft", 180, 210, 16, 3), _activity("fft", 220, 225, 4, 4)])
    records, errors = state.take()
    assert not errors and state.longest_ns == {}
    kernels = tracing._select(records, window_start=100)
    assert [k.name for k in kernels] == ["fft", "gemm", "fft", "fft"]
    assert [k.launch is not None for k in kernels] == [True, True, True, False]
    summed = sum_by_name(k.summable() for k in kernels)
    assert summed == [["fft", 3, 45, 16, 128, 32, 1024], ["gemm", 1, 50, 64, 128, 32, 1024]]


def test_records_before_the_window_are_dropped_and_incomplete_ones_refused(state):
    state._buffer_completed([_activity("old", 10, 20, 1, 1), _activity("new", 50, 60, 1, 2)])
    assert [k.name for k in tracing._select(state.take()[0], window_start=40)] == ["new"]
    state._buffer_completed([_activity("torn", 50, 0, 1, 3)])
    with pytest.raises(tracing.TracingError, match="torn"):
        tracing._select(state.take()[0], window_start=40)


def test_a_failing_record_is_reported_not_raised_into_cupti(state):
    broken = SimpleNamespace(kind=KERNEL, name="x")  # no timestamps
    state._buffer_completed([broken])
    records, errors = state.take()
    assert records == [] and errors and errors[0].startswith("AttributeError")
