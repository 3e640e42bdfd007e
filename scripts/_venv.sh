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
  python -m pip install -q --disable-pip-version-check --upgrade pip >&2 || true
  python -m pip install -q --disable-pip-version-check -e "$REPO${2:-}" >&2
  [ "${ORCH_NO_VENV:-}" = "1" ] || touch "$stamp"
fi
