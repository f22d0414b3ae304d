"""Deployments made before the migrations were squashed into 0001_baseline (main at e0ca19e).

Before the squash, migrations 0001_core..0005_delivery were edited in place while the schema took
shape, so main deployed fifteen different layouts. Each is recognised here by its exact history
rows: versions, names and the sha256 of each migration as rendered for schema ``jobkit`` (what
`jobkit deploy` recorded). A layout with ``steps`` (possibly none) has an upgrade bridge: the SQL files under
sql/bridge/, applied in order in one transaction, turn its tables into what 0001_baseline builds
(sql/functions/ follows, as on every deploy),
and its history rows are replaced by 0001_baseline's; the later migrations then apply as usual.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..exceptions import DeployError

CHECKSUM_SCHEMA = "jobkit"  # the schema the recorded checksums were rendered for
NAMES = frozenset({("0001", "core"), ("0002", "wake"), ("0003", "worker"), ("0004", "hot_path"),
                   ("0005", "delivery")})

Row = tuple[str, str, str]  # version, name, checksum


@dataclass(frozen=True)
class Layout:
    """The history rows one range of main's commits deployed, and its bridge (None: no bridge)."""

    first: str
    last: str
    date: str
    steps: tuple[str, ...] | None
    rows: tuple[Row, ...]

    @property
    def label(self) -> str:
        commits = self.first if self.first == self.last else f"{self.first}..{self.last}"
        return f"main at {commits} ({self.date})"


LAYOUTS = (
    Layout("2952cf9", "32db97f", "2026-12-02 13:09", None, (
        ("0001", "core", "e274dcdbc140775b7b5067584e2251aab2e4cb2b54b8e348a8128c849b34bfca"),
    )),
    Layout("8f646a0", "79799dd", "2026-12-02 13:20", None, (
        ("0001", "core", "e274dcdbc140775b7b5067584e2251aab2e4cb2b54b8e348a8128c849b34bfca"),
        ("0002", "wake", "18ff1d2dff52ed2bde33a4f5ce0cb2cfdaa251fcc40b9041f4c2890ac27ee67f"),
    )),
    Layout("d47f98d", "c1bdbb9", "2026-12-02 13:27", None, (
        ("0001", "core", "e274dcdbc140775b7b5067584e2251aab2e4cb2b54b8e348a8128c849b34bfca"),
        ("0002", "wake", "18ff1d2dff52ed2bde33a4f5ce0cb2cfdaa251fcc40b9041f4c2890ac27ee67f"),
        ("0003", "worker", "a360666ec2dc7120d6e14295bf1afd78d1efcfebdd42d45e3db15b5016f07e5d"),
    )),
    Layout("92af9c5", "9e37f25", "2026-12-02 13:48", None, (
        ("0001", "core", "e274dcdbc140775b7b5067584e2251aab2e4cb2b54b8e348a8128c849b34bfca"),
        ("0002", "wake", "18851e4dca6d61698e3a4653161d49191e55603088fc446d37471755395ae4e4"),
        ("0003", "worker", "a360666ec2dc7120d6e14295bf1afd78d1efcfebdd42d45e3db15b5016f07e5d"),
    )),
    Layout("9ada68c", "9ada68c", "2026-12-02 14:03", None, (
        ("0001", "core", "83730255f8f749e582502e34ba3fd95fe41fb2d9546d6355dd040e041ebc4dcb"),
        ("0002", "wake", "18851e4dca6d61698e3a4653161d49191e55603088fc446d37471755395ae4e4"),
        ("0003", "worker", "077f5f742f18b8c1a60eccca6fec8a18b9114765dfb4fbccb7958319c22bce7b"),
    )),
    Layout("fcd2600", "b9bd352", "2026-12-02 14:10", None, (
        ("0001", "core", "974501744ea71f44dfa8a74fc90cce176a3ed2f93b61c28d05a7c13bab1c9707"),
        ("0002", "wake", "f2530a392dfc3e5ac53ba44d25166854339b0e6217eefb0cfa657723a3920e47"),
        ("0003", "worker", "a1bc9b067880288ed881481ef95aadd103afeaf082370eddc222c1464daae308"),
    )),
    Layout("1da10df", "7f22e9b", "2026-12-02 14:35", None, (
        ("0001", "core", "2e973bb6578900a747859724c84616df0b475b422e983dab18a37da616025537"),
        ("0002", "wake", "f2530a392dfc3e5ac53ba44d25166854339b0e6217eefb0cfa657723a3920e47"),
        ("0003", "worker", "af12042652b135929a8b9e4cdb4e675f3f0efd2ad4b04ef3e0281a3a72ca673b"),
    )),
    Layout("d02410c", "e695ca2", "2026-12-02 15:17", ("hot_path", "delivery"), (
        ("0001", "core", "cb74aa2cfd06aafd8589e057026f4bf0bc698c4ce893eb250e14832f818e481a"),
        ("0002", "wake", "f2530a392dfc3e5ac53ba44d25166854339b0e6217eefb0cfa657723a3920e47"),
        ("0003", "worker", "1cec86cfc4255e3f422e5173af7e74d68bd718d04c500e0aae76d887348c0032"),
    )),
    Layout("5629121", "5629121", "2026-12-02 16:07", ("hot_path", "delivery"), (
        ("0001", "core", "cb74aa2cfd06aafd8589e057026f4bf0bc698c4ce893eb250e14832f818e481a"),
        ("0002", "wake", "f2530a392dfc3e5ac53ba44d25166854339b0e6217eefb0cfa657723a3920e47"),
        ("0003", "worker", "1cec86cfc4255e3f422e5173af7e74d68bd718d04c500e0aae76d887348c0032"),
        ("0004", "hot_path", "c5cc164421297a022e9a039e8afb3700f1c5d8e2563d196fc06e38b546b15c56"),
    )),
    Layout("c1f365e", "4654198", "2026-12-02 16:13", ("hot_path", "delivery"), (
        ("0001", "core", "cb74aa2cfd06aafd8589e057026f4bf0bc698c4ce893eb250e14832f818e481a"),
        ("0002", "wake", "f2530a392dfc3e5ac53ba44d25166854339b0e6217eefb0cfa657723a3920e47"),
        ("0003", "worker", "1cec86cfc4255e3f422e5173af7e74d68bd718d04c500e0aae76d887348c0032"),
        ("0004", "hot_path", "773bb40b6919e41dabe6ce8e7276d222d66547ad2598993fa93dc80658e1343f"),
    )),
    Layout("b0c33b0", "54a6fbf", "2026-12-02 16:43", ("hot_path", "delivery"), (
        ("0001", "core", "cb74aa2cfd06aafd8589e057026f4bf0bc698c4ce893eb250e14832f818e481a"),
        ("0002", "wake", "f2530a392dfc3e5ac53ba44d25166854339b0e6217eefb0cfa657723a3920e47"),
        ("0003", "worker", "1cec86cfc4255e3f422e5173af7e74d68bd718d04c500e0aae76d887348c0032"),
        ("0004", "hot_path", "31e9f14c6595f036456e0804b2e480e66fa1b990d4b572034cd2c673c0e4a422"),
    )),
    Layout("ede9fd6", "ede9fd6", "2026-12-02 17:46", ("delivery",), (
        ("0001", "core", "cb74aa2cfd06aafd8589e057026f4bf0bc698c4ce893eb250e14832f818e481a"),
        ("0002", "wake", "f2530a392dfc3e5ac53ba44d25166854339b0e6217eefb0cfa657723a3920e47"),
        ("0003", "worker", "1cec86cfc4255e3f422e5173af7e74d68bd718d04c500e0aae76d887348c0032"),
        ("0004", "hot_path", "4fbe9e34f8d31eefafc8e182daf56739feb4bf3e8b65475bf11313d7a29778d3"),
    )),
    Layout("4fd40c1", "735b29e", "2026-12-03 00:25", (), (
        ("0001", "core", "cb74aa2cfd06aafd8589e057026f4bf0bc698c4ce893eb250e14832f818e481a"),
        ("0002", "wake", "f2530a392dfc3e5ac53ba44d25166854339b0e6217eefb0cfa657723a3920e47"),
        ("0003", "worker", "1cec86cfc4255e3f422e5173af7e74d68bd718d04c500e0aae76d887348c0032"),
        ("0004", "hot_path", "4fbe9e34f8d31eefafc8e182daf56739feb4bf3e8b65475bf11313d7a29778d3"),
        ("0005", "delivery", "8c91ffdd56e33f41648ad12ca939759767ef3d9690b7d6c5c48a356207380cc3"),
    )),
    Layout("bfdb5ad", "86fcb82", "2026-12-03 00:50", (), (
        ("0001", "core", "cb74aa2cfd06aafd8589e057026f4bf0bc698c4ce893eb250e14832f818e481a"),
        ("0002", "wake", "f2530a392dfc3e5ac53ba44d25166854339b0e6217eefb0cfa657723a3920e47"),
        ("0003", "worker", "1cec86cfc4255e3f422e5173af7e74d68bd718d04c500e0aae76d887348c0032"),
        ("0004", "hot_path", "4fbe9e34f8d31eefafc8e182daf56739feb4bf3e8b65475bf11313d7a29778d3"),
        ("0005", "delivery", "98054ac9fcd635ed4d2eba8eed86446ed59fffea09b000644c1fd4303c4d473b"),
    )),
    Layout("3118562", "57b8576", "2026-12-03 00:56", (), (
        ("0001", "core", "3554f24958affcda7b77bc4d629a71ce06b30a13546c63c09537558f9d5539a3"),
        ("0002", "wake", "e24df782c0aa503dabcabf07101d027d4c3833ff3153c18d0a6a07063e9992f1"),
        ("0003", "worker", "c206f4311895300ec11006d11752f65e7d55e23832dc694c01964dc17ade6276"),
        ("0004", "hot_path", "69d78c85c536f3ccc2284c407fb97485656072341b5110804b647c10d15f3584"),
        ("0005", "delivery", "52c82645476c409a79031e6eaba0e86a64d322685824bee29e1670e0519e58b0"),
    )),
)


FIRST_BRIDGED = next(layout.first for layout in LAYOUTS if layout.steps is not None)


def is_presquash(rows: Sequence[Row]) -> bool:
    """Whether the history holds migrations of a jobkit from before the squash."""
    return any((version, name) in NAMES for version, name, _checksum in rows)


def message(where: str) -> str:
    """What every command but deploy says about such a database."""
    return (f"jobkit's schema in {where} was deployed by an older jobkit, from before its migrations "
            f"were squashed (0001_core..0005_delivery): run `jobkit deploy`")


def layout_of(rows: Sequence[Row], schema: str) -> Layout:
    """The bridged layout these history rows are, or DeployError saying why there is no upgrade."""
    found = next((layout for layout in LAYOUTS if layout.rows == tuple(sorted(rows))), None)
    if found is None:
        where = "" if schema == CHECKSUM_SCHEMA else (
            f" (the known layouts are recorded for schema {CHECKSUM_SCHEMA}, this one is {schema})")
        raise DeployError(
            "the database was deployed by a jobkit from before its migrations were squashed, with "
            f"migration checksums this jobkit does not know{where}",
            hint=_start_over(schema),
        )
    if found.steps is None:
        raise DeployError(
            f"the database holds a development layout of jobkit's schema, deployed by {found.label}, "
            f"which no upgrade bridge covers (bridges start at main's {FIRST_BRIDGED})",
            hint=_start_over(schema),
        )
    return found


def _start_over(schema: str) -> str:
    return (f"nothing was changed; copy out the jobs you need, then `drop schema {schema} cascade` and run "
            "`jobkit deploy` (docs/guides/upgrading.md)")
