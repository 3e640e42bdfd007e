"""Issue 21, data loss 4: `run --start-over` used to keep the old segments/NNNN, so the new segment 1 was judged
on the old exit records (cancelled 0.1 s after it started) and appended to old logs; and it refused the demo's
own layout (checkpoints inside run_dir)."""

from __future__ import annotations

from pathlib import Path

import pytest
import typer

from orchestrator.cli.common import require_run_dir
from orchestrator.state import SET_ASIDE, StateError, StateStore


def old_run(run_dir: Path) -> None:
    (run_dir / "segments" / "0001" / "nodes").mkdir(parents=True)
    (run_dir / "segments" / "0001" / "nodes" / "node1.exit.json").write_text('{"node": "node1", "exit_code": 1}')
    (run_dir / "state.json.bak").write_text("{}")
    (run_dir / "checkpoints" / "iter_0000010").mkdir(parents=True)


def test_start_over_sets_the_old_segments_aside(tmp_path: Path) -> None:
    old_run(tmp_path)
    with pytest.raises(StateError, match="--start-over"):
        StateStore(tmp_path).load()
    assert StateStore(tmp_path, start_over=True).load() is None
    assert not (tmp_path / "segments").exists() and not (tmp_path / "state.json.bak").exists()
    kept = sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(SET_ASIDE))
    assert len(kept) == 2 and kept[1].endswith("-state.json.bak") and kept[0].endswith("-segments")
    exits = list(tmp_path.glob(f"{SET_ASIDE}*-segments/0001/nodes/node1.exit.json"))
    assert len(exits) == 1  # kept, renamed: nothing of the old run is lost
    assert StateStore(tmp_path).load() is None  # and nothing of it is read as this run's


def test_the_demo_layout_is_a_run_directory(tmp_path: Path) -> None:
    old_run(tmp_path)
    StateStore(tmp_path, start_over=True).load()
    require_run_dir(tmp_path, "cfg", (tmp_path / "checkpoints",))  # the checkpoints the config keeps there
    with pytest.raises(typer.Exit) as refused:  # anything else there is still refused
        require_run_dir(tmp_path, "cfg")
    assert refused.value.exit_code == 2


def test_the_real_demo_starts_over_after_state_json_is_gone(tmp_path: Path) -> None:
    """The re-run found the demo itself refused: its training keeps `sync/` (and sticky-fault markers) under
    run_dir. What the command puts under `{run_dir}/` is the run's; the dry run honours --start-over too."""
    import subprocess
    import sys

    import yaml

    from tests.conftest import REPO

    cfg = yaml.safe_load((REPO / "configs" / "demo.yaml").read_text())
    cfg["run_dir"], cfg["workdir"] = str(tmp_path / "run"), str(REPO)
    cfg["checkpoint"]["dir"] = str(tmp_path / "run" / "checkpoints")
    cfg["command"] = [a for a in cfg["command"] if not a.startswith(("--iters", "--step-time"))]
    cfg["command"] += ["--iters=40", "--step-time=0.01"]
    cfg["goal"]["target_iteration"] = 40
    path = tmp_path / "demo.yaml"
    path.write_text(yaml.safe_dump(cfg))

    def orch(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "orchestrator", *args], capture_output=True, text=True,
                              cwd=REPO, timeout=300)

    first = orch("run", str(path))
    assert first.returncode == 0, first.stdout[-2000:] + first.stderr[-2000:]
    ignored = orch("run", str(path), "--start-over")  # issue 21 re-run X13: it was silent
    assert ignored.returncode == 0 and "--start-over does nothing here" in ignored.stderr, ignored.stderr[-2000:]
    assert (tmp_path / "run" / "sync").is_dir() and list((tmp_path / "run" / "sync").glob(".fault-ecc-*"))
    (tmp_path / "run" / "state.json").unlink()
    dry = orch("run", str(path), "--dry-run", "--start-over")
    assert dry.returncode == 0 and "--start-over: the old run's segments/" in dry.stdout, dry.stdout + dry.stderr
    again = orch("run", str(path), "--start-over")
    assert again.returncode == 0, again.stdout[-2000:] + again.stderr[-2000:]
    assert list((tmp_path / "run").glob(f"{SET_ASIDE}*-segments"))


def test_a_run_whose_state_is_gone_or_garbled_exits_3_so_the_unit_does_not_loop(tmp_path: Path) -> None:
    """The re-probe (A13): `state.json` gone with the run's segments there exited 1, which the systemd unit
    restarts every 30 s for ever; a person must restore it or start over: exit 3, nothing submitted. An I/O
    error writing the state may pass: exit 1 stays (restarted)."""
    from typer.testing import CliRunner

    from orchestrator.cli import app
    from tests.conftest import base_config, write_config

    cfg = write_config(tmp_path, base_config(tmp_path, checkpoint={"dir": str(tmp_path / "run" / "checkpoints")}))
    run_dir = tmp_path / "run"
    old_run(run_dir)
    res = CliRunner().invoke(app, ["run", str(cfg)])
    assert res.exit_code == 3 and "--start-over" in res.output, res.output
    (run_dir / "state.json").write_text("{not json")
    res = CliRunner().invoke(app, ["run", str(cfg)])
    assert res.exit_code == 3 and "not valid JSON" in res.output, res.output
    assert not list(run_dir.glob("segments/0002"))
    assert StateError("x", passing=True).passing and not StateError("x").passing


def test_a_garbled_state_names_the_backup_only_where_there_is_one(tmp_path: Path) -> None:
    """The fifth re-probe (X2): a garbled state.json with no .bak advised `restore it from .../state.json.bak`, a file
    that does not exist, and never said how to start over. Moved aside, --start-over does start over."""
    (tmp_path / "state.json").write_text("{garbled")
    with pytest.raises(StateError) as no_backup:
        StateStore(tmp_path).load()
    assert ".bak" not in str(no_backup.value) and "move it aside and give --start-over" in str(no_backup.value)
    (tmp_path / "state.json.bak").write_text("{}")
    with pytest.raises(StateError, match=r"restore it \(cp -p .*state\.json\.bak .*state\.json\)"):
        StateStore(tmp_path).load()
    (tmp_path / "state.json").rename(tmp_path / "state.json.garbled")
    assert StateStore(tmp_path, start_over=True).load() is None
