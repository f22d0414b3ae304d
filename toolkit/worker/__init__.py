"""The worker: serve.py runs the HTTP endpoint (endpoint.py, signed wake-ups checked by signing.py)
and the LISTEN fallback (listen.py); a wake-up starts a drain (drain.py) that claims batches through a
backend (backends/), runs handlers (dispatch.py) under an adaptive window (window.py), records
outcomes (outcomes.py, recording.py, groupcommit.py) and keeps leases alive (tending.py). local.py
wires it all for `jobkit worker`."""
