#!/usr/bin/env bash
# Quick start: `./run.sh demo` runs the local demo, `./run.sh test` runs the test suite
# (extra arguments go to pytest). Installs what is missing first: the PostgreSQL 15 packages
# (apt-get, through sudo when not root) and the dev virtualenv in .venv.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")"

APT_PACKAGES=(postgresql-15 postgresql-15-cron postgresql-15-pgtap libtap-parser-sourcehandler-pgtap-perl
    chromium chromium-driver)  # chromium: the dashboard's browser tests (tests/browser)
VENV=.venv
STAMP="$VENV/.jobkit-dev-installed"

die() {
    echo "run.sh: error: $*" >&2
    exit 1
}

# Run a command silently; show its output only when it fails.
quietly() {
    local log status=0
    log=$(mktemp)
    "$@" >"$log" 2>&1 || status=$?
    [[ $status -eq 0 ]] || cat "$log" >&2
    rm -f "$log"
    return "$status"
}

usage() {
    echo "usage: ./run.sh demo | test [pytest arguments...]"
}

# The first python3 on PATH that is 3.11 or newer (PYTHON overrides).
find_python() {
    local candidate
    for candidate in ${PYTHON:-} python3.13 python3.12 python3.11 python3; do
        if command -v "$candidate" >/dev/null 2>&1 &&
            "$candidate" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
            command -v "$candidate"
            return 0
        fi
    done
    return 1
}

ensure_apt_packages() {
    local missing=() pkg sudo=()
    command -v dpkg >/dev/null 2>&1 ||
        die "dpkg not found: install ${APT_PACKAGES[*]} (or their equivalents) yourself"
    for pkg in "${APT_PACKAGES[@]}"; do
        dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
    done
    # Debian's python3 cannot create virtualenvs without python3-venv.
    if [[ ! -x "$VENV/bin/python" && "$PY" == /usr/bin/* ]] && ! "$PY" -c 'import ensurepip' 2>/dev/null; then
        missing+=(python3-venv)
    fi
    [[ ${#missing[@]} -eq 0 ]] && return 0
    if [[ $(id -u) -ne 0 ]]; then
        command -v sudo >/dev/null 2>&1 ||
            die "missing packages: ${missing[*]}; install them as root: apt-get install ${missing[*]}"
        sudo=(sudo)
    fi
    echo "run.sh: installing ${missing[*]}" >&2
    quietly ${sudo[@]+"${sudo[@]}"} apt-get update ||
        die "apt-get update failed; install by hand: apt-get install ${missing[*]}"
    quietly ${sudo[@]+"${sudo[@]}"} env DEBIAN_FRONTEND=noninteractive apt-get install -y "${missing[@]}" ||
        die "apt-get install failed for: ${missing[*]}"
}

ensure_venv() {
    if [[ ! -x "$VENV/bin/python" ]]; then
        quietly "$PY" -m venv "$VENV" || die "could not create $VENV with $PY"
    fi
    if [[ ! -f "$STAMP" || pyproject.toml -nt "$STAMP" ]]; then
        quietly "$VENV/bin/python" -m pip install --disable-pip-version-check -e '.[dev]' ||
            die "pip install -e '.[dev]' failed"
        touch "$STAMP"
    fi
}

[[ $# -ge 1 ]] || { usage >&2; exit 2; }
command=$1
shift
case "$command" in
    demo | test) ;;
    -h | --help | help) usage && exit 0 ;;
    *) usage >&2 && exit 2 ;;
esac

PY=$(find_python) || die "Python 3.11 or newer is required (set PYTHON=/path/to/python3.11)"
ensure_apt_packages
ensure_venv

case "$command" in
    demo) exec "$VENV/bin/jobkit" dev --demo "$@" ;;
    # Two processes (pytest-xdist), each with its own cluster; whole test files stay together.
    # JOBKIT_TEST_PROCESSES=0 runs in one process (as with -p no:xdist).
    test) exec "$VENV/bin/python" -m pytest -q -n "${JOBKIT_TEST_PROCESSES:-2}" --dist loadfile "$@" ;;
esac
