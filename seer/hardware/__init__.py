"""The GPU: specs as data, the occupancy calculator, and the launch plans of seer's own kernels."""
