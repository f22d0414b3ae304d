"""The web dashboard: see and fix jobs without writing SQL (`jobkit dashboard`).

    filters.py   the jobs page's filter, shared by the page, the counts and the actions
    data.py      what each page shows, read through sql/queries/dashboard.sql
    actions.py   retry / cancel / delete by id or by filter, in batches, audited
    auth.py      token or Supabase JWT sign-in, session cookies, CSRF tokens
    app.py       the Starlette routes, security headers and rendering
    templates/   the pages (jinja2); static/ the CSS, JS and vendored htmx + uPlot
"""

from .app import Dashboard, create_dashboard
from .auth import AuthConfig

__all__ = ["AuthConfig", "Dashboard", "create_dashboard"]
