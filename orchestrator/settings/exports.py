"""`exports`: what the run tells the monitoring people already have (Prometheus, dead-man
heartbeats, an event log), besides alerts (`notify`)."""

from __future__ import annotations

import ipaddress
import re
from pathlib import Path
from urllib.parse import urlsplit

from pydantic import Field, field_validator

from orchestrator.settings.base import Section
from orchestrator.settings.sections import YEAR_S


class ExportsCfg(Section):
    """Metrics file and endpoint, dead-man heartbeat, event log."""
    metrics_path: Path | None = Field(None, description="The OpenMetrics text file written after "
                                      "every poll (default run_dir/metrics.prom); point it into "
                                      "node_exporter's textfile directory, e.g. "
                                      "/var/lib/prometheus/node-exporter/RUN.prom. Never inside "
                                      "checkpoint.dir, a run_dir file other than *.prom, or an "
                                      "existing file that is not our metrics output.")
    http_port: int | None = Field(None, ge=0, le=65535,
                                  description="Serve the same metrics over HTTP on this "
                                  "port (prometheus_client); none by default.")
    http_addr: str = Field("127.0.0.1", description="Address the metrics endpoint listens on "
                           "(an IP address or a host name; its port is http_port).")
    heartbeat_url: str | None = Field(None, description="A dead-man switch (healthchecks.io, "
                                      "Cronitor, Uptime Kuma push URL) pinged after a poll that "
                                      "could see the job: silence means the controller or the "
                                      "scheduler is gone.")
    heartbeat_interval_s: float = Field(60.0, ge=1, le=YEAR_S,
                                        description="At most one heartbeat this often.")
    events: bool = Field(True, description="Append every segment start and end, blacklisting and "
                         "the run's end to run_dir/events.jsonl (one JSON object per line, with a "
                         "schema version).")

    @field_validator("heartbeat_url")
    @classmethod
    def _http(cls, v: str | None) -> str | None:
        if v is not None and (urlsplit(v).scheme not in ("http", "https")
                              or not urlsplit(v).netloc):
            raise ValueError("heartbeat_url must be an http:// or https:// URL")
        try:
            _ = v is not None and urlsplit(v).port  # a port that is no number fails every ping
        except ValueError:
            raise ValueError("heartbeat_url: the port after the host is not a number "
                             "(0-65535)") from None
        return v

    @field_validator("http_addr")
    @classmethod
    def _addr(cls, v: str) -> str:
        if why := bad_listen_addr(v):
            raise ValueError(why)
        return v[1:-1] if v.startswith("[") and v.endswith("]") else v  # [::1] -> ::1


_LABEL = re.compile(r"(?!-)[A-Za-z0-9-]{1,63}(?<!-)")


def bad_listen_addr(v: str) -> str:
    """Why `v` is no address to listen on, or "" (issue 37: a 300-character one passed and the
    controller died on it at the first poll, every restart again)."""
    try:
        ipaddress.ip_address(v.strip("[]"))
        return ""
    except ValueError:
        pass
    if ":" in v:
        return "the address only (an IP address or a host name): its port is exports.http_port"
    if not v or len(v) > 253:
        return "a host name is 1 to 253 characters"
    if bad := [label for label in v.rstrip(".").split(".") if not _LABEL.fullmatch(label)]:
        return (f"not a host name: {bad[0][:40]!r} is not a label of 1 to 63 letters, digits and "
                "'-' (not first or last)")
    return ""
