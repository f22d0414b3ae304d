"""The application object: one command's settings and its database, whose sessions are one.

Each CLI command builds one App (cli/common.py) and hands it to a plain API function; everything the
command does goes through ``app.db``, whose ``session()`` hands out the App's one connection (opened
on first use, closed with the App). The URL comes from config.py's precedence, else the running local
cluster (`jobkit db start`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from functools import cached_property

from .config import Settings
from .connector import Database, Session
from .exceptions import ConfigError
from .schema.migrations import require_deployed


class App:
    """Settings + one database session, opened lazily and shared by everything a command calls."""

    def __init__(
        self, settings: Settings, *, application_name: str = "jobkit", deployed: bool = False
    ) -> None:
        """With ``deployed``, the first session checks that jobkit is deployed here at this
        jobkit's head and raises NotDeployed ("run `jobkit deploy`") otherwise."""
        self.settings = settings
        self.application_name = application_name
        self.deployed = deployed

    @cached_property
    def db(self) -> SharedDatabase:
        """The database; its ``session()`` is this App's one session."""
        db = SharedDatabase(resolve_url(self.settings), application_name=self.application_name)
        if self.deployed:
            db.on_open = lambda session: require_deployed(session, self.settings, f"database {db.dbname}")
        return db

    def close(self) -> None:
        if "db" in self.__dict__:
            self.db.close()


class SharedDatabase(Database):
    """A Database whose sessions are one connection, opened on first use: an API function that
    opens a session inside another command's work reuses it instead of connecting again. Sessions
    are autocommit; a transaction is what ``session.transaction()`` opens, as with any Database."""

    def __init__(self, url: str, *, application_name: str = "jobkit") -> None:
        super().__init__(url, application_name=application_name)
        self._stack = ExitStack()
        self._session: Session | None = None
        self._others: dict[str, SharedDatabase] = {}
        self.on_open: Callable[[Session], None] | None = None  # run once on the new session

    def shared(self, connect_timeout: int = 10) -> Session:
        if self._session is None or self._session.closed:
            session = self._stack.enter_context(Database.session(self, connect_timeout=connect_timeout))
            if self.on_open is not None:
                self.on_open(session)
            self._session = session
        return self._session

    @contextmanager
    def session(self, *, connect_timeout: int = 10) -> Iterator[Session]:
        yield self.shared(connect_timeout)

    def with_dbname(self, dbname: str) -> SharedDatabase:
        """The same server in another database (pg_cron's), shared the same way and closed with this one."""
        if dbname == self.dbname:
            return self
        if dbname not in self._others:
            other = Database.with_dbname(self, dbname)
            self._others[dbname] = SharedDatabase(other.url, application_name=self.application_name)
        return self._others[dbname]

    def close(self) -> None:
        for other in self._others.values():
            other.close()
        self._stack.close()
        self._session = None


def resolve_url(settings: Settings) -> str:
    if settings.db_url:
        return settings.db_url
    from .ops.localdb import LocalCluster

    status = LocalCluster(settings.home).status()
    if status.running and status.url:
        return status.url
    raise ConfigError(
        "no database URL configured",
        hint=(
            "pass --db-url, set JOBKIT_DB_URL (or SUPABASE_DB_URL, DATABASE_URL), "
            "or start the local database with `jobkit db start`"
        ),
    )

