"""Child program that runs cuDNN forward convolutions on the GPU for `seer collect`.

It is started by the orchestrator (directly for timing, wrapped by ncu for profiling), so
that a crash here cannot take the collection down. All logic lives in seer.gpu.worker.
"""

import sys

from seer.gpu.worker import main

if __name__ == "__main__":
    sys.exit(main())
