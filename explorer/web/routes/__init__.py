"""Routers: the JSON API, the pages and the docs."""
