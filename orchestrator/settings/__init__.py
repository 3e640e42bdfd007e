"""Run configuration: one YAML file, overridden by ORCH_* environment variables, then by CLI flags.

Every problem is reported as one line naming the file and the field path; the caller exits with 2.

- `sections.py`: the config sections (resources, checkpoint, policy, watch, ...).
- `backend.py`: the backend section (local or slurm, and the settings of each).
- `run.py`: `Settings`, the top-level model of one run.
- `loading.py`: reading the YAML, `--set` overrides, path resolution, checks of paths on this
  machine.
- `errors.py`: `ConfigError` and the one-line-per-problem formatting.
"""

from orchestrator.progress import PROGRESS_REGEX, last_iteration
from orchestrator.settings.backend import BackendCfg, LocalBackendCfg, SlurmBackendCfg
from orchestrator.settings.base import Section
from orchestrator.settings.checks import PreflightCfg
from orchestrator.settings.errors import ConfigError
from orchestrator.settings.loading import check_paths, load_settings, parse_overrides, path_warnings
from orchestrator.settings.run import PLACEHOLDERS, Settings
from orchestrator.settings.sections import (
    CheckpointCfg,
    Goal,
    NotifyCfg,
    Policy,
    Resources,
    UserSignature,
    Watch,
)

__all__ = [
    "PLACEHOLDERS",
    "PROGRESS_REGEX",
    "BackendCfg",
    "CheckpointCfg",
    "ConfigError",
    "Goal",
    "LocalBackendCfg",
    "NotifyCfg",
    "Policy",
    "PreflightCfg",
    "Resources",
    "Section",
    "Settings",
    "SlurmBackendCfg",
    "UserSignature",
    "Watch",
    "check_paths",
    "last_iteration",
    "load_settings",
    "parse_overrides",
    "path_warnings",
]
