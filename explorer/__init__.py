"""Kernel Explorer: trace a convolution through tinygrad's pipeline and show every stage."""
__version__ = "0.1.0"
