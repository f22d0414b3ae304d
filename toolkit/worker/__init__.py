"""The worker: serve.py runs the HTTP endpoint (endpoint.py, signed wake-ups checked by signing.py
with the secret secrets.py stores, beside the URL the database's wake() calls) and the LISTEN
fallback (listen.py); a wake-up starts a drain (drain.py) that claims batches through a backend
(backends/), runs handlers (dispatch.py; handler.py: a registered handler as the worker sees it;
context.py: the JobContext each one gets) under an adaptive window (window.py), records outcomes
(attempt.py: an attempt's phase, end and outcome, typed; outcomes.py, recording.py, groupcommit.py)
and keeps leases alive (tending.py). local.py wires it all for `jobkit worker`."""
