"""Presentation shared by the web app, the exports and the CLI: graphs and their layout, templates and highlighting, the teaching
tours, the self-contained export. No tinygrad, no FastAPI."""
