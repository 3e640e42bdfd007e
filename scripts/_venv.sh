# Sourced by demo.sh and test.sh: create .venv on first use and install the project into it.
# Set ORCH_NO_VENV=1 to use the current interpreter instead.
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if [ "${ORCH_NO_VENV:-}" != "1" ]; then
  if [ ! -x "$REPO/.venv/bin/python" ]; then
    echo "creating $REPO/.venv" >&2
    python3 -m venv "$REPO/.venv"
  fi
  # shellcheck disable=SC1091
  . "$REPO/.venv/bin/activate"
fi
stamp="$REPO/.venv/.installed-$(sha1sum "$REPO/pyproject.toml" | cut -c1-12)-${1:-base}"
if [ "${ORCH_NO_VENV:-}" = "1" ] || [ ! -e "$stamp" ]; then
  # pip's and setuptools' chatter goes to a log, shown only when the install fails
  if [ "${ORCH_NO_VENV:-}" = "1" ]; then log="$(mktemp "${TMPDIR:-/tmp}/orch-pip-XXXXXX.log")"
  else log="$REPO/.venv/pip-install.log"; fi
  echo "installing the project and its dependencies (log: $log)" >&2
  python -m pip install -q --disable-pip-version-check --upgrade pip >"$log" 2>&1 || true
  if ! python -m pip install -q --disable-pip-version-check -e "$REPO${2:-}" >>"$log" 2>&1; then
    tail -n 40 "$log" >&2
    echo "the install failed; the whole log: $log" >&2
    exit 1
  fi
  [ "${ORCH_NO_VENV:-}" = "1" ] || touch "$stamp"
fi
