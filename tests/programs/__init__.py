"""Programs as people write them, each in a module of its own with `run()`: it builds its model from a fixed seed, runs it and returns
what it computed as plain lists. tests/test_corpus.py captures each whole and runs each again in plain tinygrad (tests/corpus.py)."""
