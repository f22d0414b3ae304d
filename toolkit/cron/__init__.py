"""Schedules: the database's clock. pg_cron.py lists and changes jobkit's pg_cron jobs (and only
those), spec.py parses and checks schedule strings against the server's pg_cron version, schedules.py
says what jobkit schedules and why (wake-ups, sweeps, pruning, declared recurring enqueues) and holds
the `jobkit schedule` verbs, secrets.py stores the wake URL and signing secret where `jobkit.wake()`
reads them."""
