"""GPU-side code (cuDNN binding, reference check, worker). Imported only on GPU hosts."""
