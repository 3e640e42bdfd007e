"""Issue 23: a script's own `--exclude` (known-bad nodes) is kept out of every segment from the first one
(`resources.exclude`), and a pinned `--nodelist` never names a node that is excluded."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from orchestrator.backends.slurm_commands import without_excluded
from orchestrator.blacklist import Blacklist
from orchestrator.importer import import_sbatch
from orchestrator.loop.submission import exclude_plan
from orchestrator.model import Cause
from orchestrator.settings import ConfigError, Policy, load_settings
from tests.conftest import base_config, write_config

NOW = datetime(2026, 12, 1, tzinfo=UTC)
INVENTORY = [f"gpu{i}" for i in range(1, 9)]


def _bl(*nodes: str) -> Blacklist:
    bl = Blacklist()
    for n in nodes:
        bl = bl.record(n, Cause.GPU_ECC, "Xid 48", "1", NOW, hard=True, expiry=timedelta(days=7))
    return bl


def test_config_excludes_are_always_out_and_first_in_the_cap() -> None:
    policy = Policy(max_excluded_nodes=3)
    got = exclude_plan(_bl("gpu5", "gpu6", "gpu7"), policy, INVENTORY, 2, NOW, ["gpu1", "gpu2"])
    assert {"gpu1", "gpu2"} <= set(got.nodes) and len(got.nodes) == 3  # one blacklist slot is left
    assert len(got.dropped) == 2


def test_config_excludes_the_cluster_does_not_know_are_left_out_with_a_note() -> None:
    got = exclude_plan(Blacklist(), Policy(), INVENTORY, 2, NOW, ["gpu1", "old-node9"])
    assert got.nodes == ("gpu1",) and "old-node9" in got.note


def test_no_config_excludes_leave_the_blacklists_plan_alone() -> None:
    bl = _bl("gpu3")
    assert exclude_plan(bl, Policy(), INVENTORY, 2, NOW) == bl.exclude_plan(NOW, 2, 6, set(INVENTORY))


@pytest.mark.parametrize(("value", "names"), [("gpu[017,203]", ["gpu017", "gpu203"]),
                                              (["n1", "n[3-4]"], ["n1", "n3", "n4"])])
def test_resources_exclude_takes_names_and_hostlists(tmp_path: Path, value: object, names: list[str]) -> None:
    s = load_settings(write_config(tmp_path, base_config(tmp_path, resources={"nodes": 1, "exclude": value})))
    assert s.resources.exclude == names


@pytest.mark.parametrize("bad", ["gpu[1-", ["ok", "bad;name"], [3]])
def test_a_bad_exclude_names_the_place(tmp_path: Path, bad: object) -> None:
    with pytest.raises(ConfigError, match="resources.exclude"):
        load_settings(write_config(tmp_path, base_config(tmp_path, resources={"nodes": 1, "exclude": bad})))


def test_the_scripts_exclude_and_nodelist_are_carried() -> None:
    script = "#!/bin/bash\n#SBATCH -N 2\n#SBATCH --exclude=gpu[1-3],gpu9\n#SBATCH -w gpu[5-6]\nsrun python train.py\n"
    cfg, notes = import_sbatch(script, "x", workdir="/h")
    assert cfg["resources"]["exclude"] == "gpu[1-3],gpu9"
    assert cfg["resources"]["sbatch_extra"]["nodelist"] == "gpu[5-6]"


def test_an_exclude_that_needs_the_shell_is_not_carried_but_said() -> None:
    cfg, notes = import_sbatch("#!/bin/bash\n#SBATCH --exclude=$BAD\nsrun python t.py\n", "x", workdir="/h")
    assert "exclude" not in cfg["resources"] and any("--exclude=$BAD: not carried" in n for n in notes)


def test_a_pinned_nodelist_loses_the_excluded_nodes() -> None:
    assert without_excluded({"nodelist": "gpu[1-4]", "constraint": "h100"}, ("gpu2", "gpu9")) == \
        {"constraint": "h100", "nodelist": "gpu[1,3-4]"}
    assert without_excluded({"nodelist": "gpu[1-2]"}, ("gpu1", "gpu2")) == {}
    assert without_excluded({"constraint": "a"}, ("gpu1",)) == {"constraint": "a"}
