"""Analysis: what traces mean, side by side or against the hardware: the diff of two traces, the roofline, the seed studies.
Nothing here imports tinygrad; what needs it runs in a worker (the *_worker modules, called by module path)."""
