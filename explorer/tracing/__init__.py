"""Capture: run a convolution through tinygrad and record every stage as data. The package tg is the only one that touches tinygrad
internals; the engine (trace), the renders for other targets, the float64 reference, device probes and interleaved timing run in
worker processes (workers), which this package also supervises (lifeline, devicelock, pool)."""
