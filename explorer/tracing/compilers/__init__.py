"""Compile facts without the device: each target's source through a real compiler of this machine, SASS with lines and
live registers (nvdisasm), and the facts kept on disk."""
