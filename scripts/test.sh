#!/usr/bin/env bash
# Lint, type-check and run every test. Slurm scenario tests run when the test cluster is up
# (scripts/slurm-testbed.sh start); with ORCH_REQUIRE_SLURM=1 (CI) they must run.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck disable=SC1091
. scripts/_venv.sh dev "[dev]"
echo "== ruff ==" && ruff check orchestrator tests scripts
echo "== import layers ==" && lint-imports
echo "== mypy ==" && mypy --strict orchestrator tests
echo "== pytest ==" && python -m pytest -q -p no:cacheprovider "$@"
