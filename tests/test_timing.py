"""The burst schedule of seer.gpu.timing (the GPU part is exercised by test_gpu_collect.py)."""

import pytest

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
