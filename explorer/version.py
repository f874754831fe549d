"""The explorer's version: a module of its own, so that what needs it imports no package __init__ (and no cycle through one)."""
__version__ = "0.1.0"
