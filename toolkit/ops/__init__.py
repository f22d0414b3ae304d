"""Operating a deployed jobkit: status.py (queue counts and health), doctor.py (checks that name the
fix), admin.py (look at, retry, cancel and purge jobs), ratelimits.py (token buckets), localdb.py (a
local PostgreSQL + pg_cron cluster for development and tests), demo.py, example.py and scaffold.py
(the first-hour helpers behind `jobkit dev` and `jobkit init`)."""
