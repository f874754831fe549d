"""The server's stateful services: trace jobs, studies, targets computed on first view, graphs, diffs and their measurements, devices,
the job queue's results. No FastAPI here (a contract in pyproject.toml checks it): routes/ calls them, the HTTP edge (http/) answers."""
