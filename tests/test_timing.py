"""The burst schedule of seer.gpu.timing (the GPU part is exercised by test_gpu_collect.py)."""

import pytest

from seer.collect.records import MAX_ATTEMPTS, spread, steadiest
from seer.gpu.timing import schedule


@pytest.mark.parametrize("estimate_ms, burst, reps", [
    (0.02, 50, 10),    # tiny kernel: 50 calls make a 1 ms burst; 10 bursts fill 10 ms
    (0.3, 4, 8),       # 4 x 0.3 = 1.2 ms bursts; 10 // 1.2 = 8
    (2.0, 1, 5),       # one call per burst; 5 bursts at least, though over budget
    (50.0, 1, 5),
    (0.0001, 1000, 50),  # capped: at most 1000 calls per burst, 50 bursts
])
def test_schedule(estimate_ms, burst, reps):
    plan = schedule(estimate_ms)
    assert (plan.burst, plan.reps) == (burst, reps)


def test_schedule_refuses_a_nonsense_estimate():
    with pytest.raises(ValueError, match="positive"):
        schedule(0.0)


def test_spread_is_the_interquartile_range_over_the_median():
    assert spread([1.0, 1.0, 1.0]) == 0.0
    assert spread([1.0, 2.0, 3.0, 4.0, 5.0]) == pytest.approx((4.0 - 2.0) / 3.0)


def _attempts(*series):
    calls = iter(series)
    return lambda: (next(calls), "plan", 1.0)


def test_steadiest_stops_at_the_first_steady_attempt():
    (times, _, _), attempts = steadiest(_attempts([1.0, 1.01, 1.0], [5.0, 5.0, 5.0]))
    assert attempts == 1 and times == [1.0, 1.01, 1.0]


def test_steadiest_retakes_a_wide_measurement_and_keeps_the_steadiest():
    wide, wider, steady = [1.0, 1.0, 3.0, 3.0], [1.0, 1.0, 9.0, 9.0], [1.0, 1.02, 1.01, 1.0]
    (times, _, _), attempts = steadiest(_attempts(wider, steady, wide))
    assert attempts == 2 and times == steady
    (times, _, _), attempts = steadiest(_attempts(wider, wide, wider, steady))
    assert attempts == MAX_ATTEMPTS and times == wide
