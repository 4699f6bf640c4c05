"""Collection: plan the work, run GPU workers as child processes, store every result."""
