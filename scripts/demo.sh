#!/usr/bin/env bash
# The demo: 4 virtual nodes, the job needs 3, node3 has a sticky ECC fault. Segment 1 dies on node3,
# the controller names it, blacklists it and resumes segment 2 elsewhere from the last checkpoint.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck disable=SC1091
. scripts/_venv.sh base
rm -rf runs/demo
echo "== dry run: what would be submitted =="
orchestrator run configs/demo.yaml --dry-run
echo
echo "== the run =="
orchestrator run configs/demo.yaml
echo
echo "== status =="
orchestrator status configs/demo.yaml
