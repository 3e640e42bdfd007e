"""What `blacklist add` is given, checked (issue 37): the hostlist expanded to node names, each
one a node the run's cluster lists (unless --force), and the expiry the run's policy sets when
--hours is not given."""

from __future__ import annotations

from pathlib import Path

from orchestrator.blacklist import compress, expand
from orchestrator.cli.common import err, fail, load
from orchestrator.clock import RealClock
from orchestrator.requests import check_node_names
from orchestrator.settings import Policy, Settings

# per command: a whole cluster is not a blacklist, and the request must fit the queue
MAX_EDIT_NODES = 4096


def node_names(nodes: str) -> list[str]:
    """The hostlist expression expanded (`node[3,7-9]`); exit 2 naming it when it is malformed."""
    try:
        names = expand(nodes)
        if len(names) > MAX_EDIT_NODES:
            raise ValueError(f"{len(names)} nodes: at most {MAX_EDIT_NODES} per edit; split the "
                             "range")
        check_node_names(tuple(names))
    except ValueError as exc:
        raise fail([f"{nodes!r}: {exc}"[:300]]) from None
    return names


def cluster_nodes(s: Settings) -> list[str] | None:
    """The nodes the run's cluster lists: the local backend's virtual nodes, or Slurm's (sinfo,
    asked once); None when the list cannot be had."""
    if s.backend.kind == "local":
        return s.backend.local.node_names()
    from orchestrator.backends.slurm import SlurmBackend

    try:
        return SlurmBackend(s.backend.slurm, RealClock(), s.run_dir, attempts=1).nodes()
    except (OSError, ValueError):
        return None


def _warn(line: str) -> None:
    err.print(f"warning: {line}", markup=False, highlight=False)


def checked_add(target: Path, names: list[str], hours: float | None, force: bool) -> float:
    """The hours the entries last (--hours, else the config's policy.blacklist_expiry_h); exit 2
    for a node the cluster does not list, unless `force`. A run directory has no config to ask:
    the policy's default, and the names are taken unchecked (said)."""
    if target.is_dir():
        if not force:
            _warn(f"{target}: a run directory: the cluster's node list is not known here (give the "
                  f"config file to check the names); {compress(names)} taken unchecked")
        if hours is None:  # the run's own policy is in its config, which a run directory lacks
            _warn(f"{target}: a run directory: its config's policy.blacklist_expiry_h is not "
                  f"known here; the default {Policy().blacklist_expiry_h:g} h is used (give "
                  "--hours, or the config file)")
        return hours if hours is not None else Policy().blacklist_expiry_h
    s = load(target, [])
    if not force:
        known = cluster_nodes(s)
        if known is None:
            _warn(f"{target}: the {s.backend.kind} cluster's node list cannot be had now; "
                  f"{compress(names)} taken unchecked")
        else:
            listed = set(known)
            missing = [n for n in names if n not in listed]
            if missing:
                shown = compress(known)
                shown = shown if len(shown) <= 120 else shown[:120] + "..."
                raise fail([f"{compress(missing)}: not a node of the cluster ({s.backend.kind} "
                            f"backend: {shown}); nothing changed. Check the name, or give --force "
                            "to blacklist it anyway"])
    return hours if hours is not None else s.policy.blacklist_expiry_h
