#!/usr/bin/env bash
# Lint, type-check and run every test. Slurm scenario tests run when the test cluster is up
# (scripts/slurm-testbed.sh start); with ORCH_REQUIRE_SLURM=1 (CI) they must run.
#
# With no arguments the Slurm scenarios (which mostly wait on the real cluster) run beside the other tests,
# in a second pytest process; their output is printed when both are done. ORCH_SERIAL_TESTS=1 runs one
# pytest over everything. Arguments go to a single pytest, as before.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck disable=SC1091
. scripts/_venv.sh dev "[dev]"
# the real PyTorch job of the Slurm scenarios (scripts/torch_train.py): the CPU build is enough; without
# it those scenarios skip (under CI, with ORCH_REQUIRE_SLURM=1, they fail)
if ! python -c "import torch" 2>/dev/null; then
  echo "installing torch==${ORCH_TORCH_VERSION:-2.13.0} for the real PyTorch scenarios" >&2
  python -m pip install -q --disable-pip-version-check "torch==${ORCH_TORCH_VERSION:-2.13.0}" >&2 \
    || echo "torch could not be installed: the real PyTorch scenarios will skip" >&2
fi
# the JAX job of the second-framework scenario (scripts/jax_train.py, issue 39): the CPU wheels
if ! python -c "import jax" 2>/dev/null; then
  echo "installing jax[cpu]==${ORCH_JAX_VERSION:-0.10.2} for the JAX scenario" >&2
  python -m pip install -q --disable-pip-version-check "jax[cpu]==${ORCH_JAX_VERSION:-0.10.2}" >&2 \
    || echo "jax could not be installed: the JAX scenario will skip" >&2
fi
echo "== ruff ==" && ruff check orchestrator tests scripts
echo "== import layers ==" && lint-imports
echo "== mypy ==" && mypy --strict orchestrator tests
if [ "$#" -gt 0 ] || [ "${ORCH_SERIAL_TESTS:-0}" = 1 ]; then
  echo "== pytest ==" && exec python -m pytest -q -p no:cacheprovider "$@"
fi
slurm_log=$(mktemp)
slurm_tmp=$(mktemp -d)  # its own pytest temp root: the two sessions never clean up each other's directories
trap 'rm -rf "$slurm_log" "$slurm_tmp"' EXIT
echo "== pytest tests/slurm (in the background) and the rest =="
# A scenario that fails is run once more (pytest-rerunfailures; the summary counts it as "rerun" and prints the
# first failure): their controllers race real deadlines on a 2-core machine busy with the other tests. A
# scenario that fails twice fails the run.
python -m pytest -q -p no:cacheprovider --basetemp="$slurm_tmp/t" --durations=40 --durations-min=5 \
  --reruns=1 -rR tests/slurm >"$slurm_log" 2>&1 &
slurm_pid=$!
rest=0
# the rest yields the CPU to the scenarios (nice 5: about a quarter of it when both want it): their
# controllers, agents and py-spy race real deadlines, the unit tests only their own
nice -n 5 python -m pytest -q -p no:cacheprovider --ignore=tests/slurm || rest=$?
slurm=0
wait "$slurm_pid" || slurm=$?
echo "== pytest tests/slurm =="
cat "$slurm_log"
echo "== pytest: everything but tests/slurm exit $rest, tests/slurm exit $slurm =="
[ "$rest" = 0 ] && [ "$slurm" = 0 ]
