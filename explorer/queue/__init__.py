"""Device workers over a task queue (RQ on Redis): the server enqueues trace, study and diff-measurement jobs, `kernel-explorer worker`
processes on the machines with the devices run them and report progress back.

Why RQ: the jobs here are few, long (seconds to minutes) and already isolated in worker processes of their own, so what the explorer
needs from a queue is small and must be dependable: named queues (one per device), progress a server can read while a job runs
(job meta), results kept in Redis for a server that restarts, and a JSON serializer, so nothing a worker reads from the broker is
ever unpickled. RQ gives exactly that on Redis alone; Celery brings a larger runtime and its own process model, Dramatiq needs
middleware for results and progress. What RQ does not give, a dead worker noticed in seconds rather than at its job's timeout, is
a heartbeat key per worker (explorer.queue.protocol)."""
