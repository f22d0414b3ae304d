"""Schedules: the database's clock. pg_cron.py lists and changes jobkit's pg_cron jobs (and only
those), spec.py parses and checks schedule strings against the server's pg_cron version, schedules.py
says what jobkit schedules and why (wake-ups, sweeps, pruning, declared recurring enqueues) and holds
the `jobkit schedule` verbs. The wake URL and signing secret the wake-ups use belong to the wake path
(worker/secrets.py)."""
