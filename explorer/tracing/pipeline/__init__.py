"""The run of tinygrad's pipeline, recorded as data: the trace engine, any program's capture, the other targets' renders,
the custom rewrites, the float64 reference, device probes and timing on the device's clock."""
