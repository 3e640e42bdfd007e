"""`exports`: what the run tells the monitoring people already have (Prometheus, dead-man
heartbeats, an event log), besides alerts (`notify`)."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlsplit

from pydantic import Field, field_validator

from orchestrator.settings.sections import YEAR_S, Section


class ExportsCfg(Section):
    """Metrics file and endpoint, dead-man heartbeat, event log."""
    metrics_path: Path | None = Field(None, description="The OpenMetrics text file written after "
                                      "every poll (default run_dir/metrics.prom); point it into "
                                      "node_exporter's textfile directory, e.g. "
                                      "/var/lib/prometheus/node-exporter/RUN.prom.")
    http_port: int | None = Field(None, ge=0, le=65535,
                                  description="Serve the same metrics over HTTP on this "
                                  "port (prometheus_client); none by default.")
    http_addr: str = Field("127.0.0.1", description="Address the metrics endpoint listens on.")
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
        return v
