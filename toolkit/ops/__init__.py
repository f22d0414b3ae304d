"""Operating a deployed jobkit: status.py (queue counts and health), doctor.py (checks that name the
fix), admin.py (look at and purge jobs), operate.py (the operator API: retry, cancel, delete by ids or
filter, batched and audited, and pause/resume; the CLI and the dashboard both act through it),
selection.py (its job filter), ratelimits.py (token buckets), localdb.py (a
local PostgreSQL + pg_cron cluster for development and tests), demo.py, example.py and scaffold.py
(the first-hour helpers behind `jobkit dev` and `jobkit init`)."""
