"""Where `exports.metrics_path` may write (issue 37): it is replaced after every poll, so it may not
be one of the run's own files (state.json, the checkpoints' tracker) nor any existing file that is
not a metrics file this tool wrote (a config, a user's notes)."""

from __future__ import annotations

from pathlib import Path

from orchestrator.files import read_regular

# every line of the file write_to_textfile makes of our registry starts so
OUR_LINES = ("# HELP orchestrator_", "# TYPE orchestrator_", "orchestrator_")


def user_metrics_path(metrics_path: Path | None, config_dir: Path) -> Path | None:
    """exports.metrics_path as given (relative to the config's directory), or None when unset."""
    if metrics_path is None:
        return None
    return metrics_path if metrics_path.is_absolute() else config_dir / metrics_path


def metrics_path_problem(path: Path, run_dir: Path, checkpoint_dir: Path) -> str:
    """Why the metrics file may not be written at `path`, or ""."""
    where = path.resolve()
    if _inside(where, checkpoint_dir.resolve()):
        return (f"exports.metrics_path: {path} is inside checkpoint.dir ({checkpoint_dir}): it "
                "would overwrite the checkpoints' own files; point it at node_exporter's textfile "
                "directory or run_dir/metrics.prom")
    if _inside(where, run_dir.resolve()) and where.suffix != ".prom":
        return (f"exports.metrics_path: {path} is inside run_dir ({run_dir}) and not a .prom file: "
                "it would overwrite one of the run's own files (state.json, controller.log, ...)")
    return not_our_metrics(path)


def not_our_metrics(path: Path) -> str:
    """Why the existing file at `path` is no metrics file of ours (so never overwritten), or ""
    (none there, an empty one or one we wrote)."""
    if not path.exists() and not path.is_symlink():
        return ""
    try:
        head = read_regular(path, 4096).decode("utf-8", "replace")
    except OSError as exc:
        return f"exports.metrics_path: {path} cannot be checked ({exc.strerror or exc})"
    lines = [ln for ln in head.splitlines()[:-1 if len(head) == 4096 else None] if ln.strip()]
    if all(ln.startswith(OUR_LINES) for ln in lines):
        return ""
    return (f"exports.metrics_path: {path} exists and is not a metrics file this tool wrote: it is "
            "not overwritten; point metrics_path at a new file (or remove that one)")


def _inside(path: Path, directory: Path) -> bool:
    return path == directory or directory in path.parents
