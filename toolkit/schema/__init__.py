"""The database side as code: render.py turns sql/ (jinja2) into SQL for one configuration,
migrations.py diffs the packaged migrations against a database's history and applies each one in its
own transaction, deploy.py runs a whole deploy under an advisory lock, sync.py keeps the rows that
follow jobkit.toml (job type and runtime settings) in step, supabase_cli.py writes the same SQL as
Supabase CLI migration files."""
