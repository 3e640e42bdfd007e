"""Evidence bundles for the admins (issue 40 item 3): per verdict against a node, one private JSON file under
run_dir/evidence with the rule, the decision, the lines, the node's own reports and the drain-ready reason; written
once, never outside that directory whatever the node's name."""

from __future__ import annotations

import json
import stat
from pathlib import Path

from orchestrator.loop.bundles import write_bundles
from orchestrator.model import RunStatus
from orchestrator.state import EVIDENCE_DIR
from tests.fakes import Fault
from tests.unit.test_controller_fake import make


def test_a_node_excluded_for_ecc_gets_one_private_bundle(tmp_path: Path) -> None:
    ctl, _, _ = make(tmp_path, {"node3": Fault("ecc", at=35)})
    state = ctl.run()
    assert state.status == RunStatus.DONE
    where = ctl.s.run_dir / EVIDENCE_DIR
    files = sorted(where.iterdir())
    assert [f.name for f in files] == ["segment-0001-node3.json"], files
    b = json.loads(files[0].read_text())
    assert (b["node"], b["cause"], b["action"], b["job_id"]) == ("node3", "gpu_ecc", "resubmit_exclude", "101"), b
    assert any("ECC" in line["text"] for line in b["lines"] + b["node_reports"]), b
    assert b["drain_reason"].startswith("[node_problem] orchestrator ") and "gpu_ecc" in b["drain_reason"], b
    assert stat.S_IMODE(files[0].stat().st_mode) == 0o600 and stat.S_IMODE(where.stat().st_mode) == 0o700
    assert write_bundles(state, ctl.s.run_dir) == []  # written once


def test_a_hostile_node_name_never_leaves_the_evidence_directory(tmp_path: Path) -> None:
    ctl, _, _ = make(tmp_path, {"node3": Fault("ecc", at=35)})
    state = ctl.run()
    seg = state.segments[0]
    hostile = state.model_validate({**state.model_dump(), "segments": [
        {**seg.model_dump(), "culprit_nodes": ["../../x/.hidden", "..", "n1\n2"]}]})
    (ctl.s.run_dir / EVIDENCE_DIR / "segment-0001-node3.json").unlink()
    written = write_bundles(hostile, ctl.s.run_dir)
    assert len(written) == 3 and all(p.parent == ctl.s.run_dir / EVIDENCE_DIR for p in written), written
    assert all("/" not in p.name[8:] and not p.name.startswith(".") for p in written), written
