"""The run ledger changes in one place (issue 24): `loop/advance.py`. Walks the AST of orchestrator/ for
every way a module could write a ledger record elsewhere, and checks the records refuse it at run time too.
Facts travel as enums: no module reads a reason back from its sentence with `startswith`.
"""

from __future__ import annotations

import ast
from datetime import UTC, datetime

import pytest
from pydantic import ValidationError

from orchestrator.state import HardwareEvent, RunState, SegmentRecord
from tests.conftest import REPO

PACKAGE = REPO / "orchestrator"
WRITER = "orchestrator/loop/advance.py"
DEFINES = {"orchestrator/state.py", "orchestrator/migrations.py"}  # the records, their store and old schemas
FIELDS = set(SegmentRecord.model_fields) | set(RunState.model_fields) | set(HardwareEvent.model_fields)
CONTAINERS = {f for f in FIELDS if f in ("segments", "nodes", "excluded", "culprit_nodes", "evidence", "allocation",
                                         "hardware_events", "applied_requests", "bad_checkpoints")}
MUTATORS = {"append", "extend", "insert", "pop", "remove", "clear", "update", "setdefault", "sort", "reverse"}
RECORDS = {"SegmentRecord", "RunState"}  # made only by advance (a segment) and RunState.begin (a new ledger)
# `orchestrator diagnose`: a one-segment ledger, and the earlier allocations replayed as history, never saved
THROWAWAY = {"orchestrator/offline/diagnosis.py", "orchestrator/offline/history.py"}
# attribute writes on objects that are not the ledger but share a field name: (module, object)
# the local backend's own job record (its file, not state); `diagnose JOBID`'s facts about a Slurm job
NOT_LEDGER = {("orchestrator/backends/local.py", "rec"), ("orchestrator/backends/slurmjob.py", "job")}
REASONS = ("reason", "cancelled_by_controller", "note", "why", "detail")


def _attr_base(node: ast.expr) -> str:
    while isinstance(node, ast.Attribute | ast.Subscript):
        node = node.value
    return node.id if isinstance(node, ast.Name) else ""


def ledger_writes(source: str, module: str) -> list[str]:
    """Every place in `source` that writes a ledger field, as 'module:line: code'."""
    hits: list[ast.expr] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Assign | ast.AugAssign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in (e for tgt in targets for e in (tgt.elts if isinstance(tgt, ast.Tuple) else [tgt])):
                base = _attr_base(t)
                if base == "self" or (module, base) in NOT_LEDGER:
                    continue
                if isinstance(t, ast.Subscript) and isinstance(t.value, ast.Attribute) and t.value.attr in CONTAINERS:
                    hits.append(t)
                elif isinstance(t, ast.Attribute) and t.attr in FIELDS:
                    hits.append(t)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            f = node.func
            if f.attr == "evolve" or (f.attr in MUTATORS and isinstance(f.value, ast.Attribute)
                                      and f.value.attr in CONTAINERS and _attr_base(f.value) != "self"):
                hits.append(node)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in RECORDS and \
                module not in THROWAWAY:
            hits.append(node)
    return [f"{module}:{h.lineno}: {ast.unparse(h)[:80]}" for h in sorted(hits, key=lambda h: (h.lineno, h.col_offset))]


def modules() -> list[tuple[str, str]]:
    return [(p.relative_to(REPO).as_posix(), p.read_text(encoding="utf-8")) for p in sorted(PACKAGE.rglob("*.py"))]


def test_the_checker_finds_each_kind_of_write() -> None:
    code = """
seg.reason = "x"
state.segments.append(seg)
state.bad_checkpoints["p"] = 2
a.job_id, b.nodes = 1, []
s = seg.evolve(nodes=[])
SegmentRecord(index=1, job_name="j")
self.state = new
nodes.append("n1")
rec.nodes = ["n1"]
"""
    hits = ledger_writes(code, "orchestrator/backends/local.py")
    assert [h.split(":")[1] for h in hits] == ["2", "3", "4", "5", "5", "6", "7"]


def test_only_advance_writes_the_ledger() -> None:
    writes = [w for path, src in modules() if path != WRITER and path not in DEFINES
              for w in ledger_writes(src, path)]
    assert not writes, "\n".join(writes)


def test_the_records_refuse_a_write_at_run_time() -> None:
    seg = SegmentRecord(index=1, job_name="j")
    with pytest.raises(ValidationError):
        seg.reason = "changed"  # type: ignore[misc]
    with pytest.raises(TypeError, match="advance"):
        seg.model_copy(update={"reason": "changed"})
    state = RunState.begin("r", datetime(2026, 1, 1, tzinfo=UTC))
    assert state.evolve(segments=[seg]).segments == [seg] and state.segments == []
    with pytest.raises(ValidationError):
        state.evolve(no_such_field=1)


def test_no_reason_is_read_back_from_its_sentence() -> None:
    probes = [f"{path}:{node.lineno}: {ast.unparse(node)[:80]}" for path, src in modules() if path not in DEFINES
              for node in ast.walk(ast.parse(src))
              if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and node.func.attr in ("startswith", "endswith") and any(r in ast.unparse(node.func.value).lower()
                                                                       for r in REASONS)]
    assert not probes, "\n".join(probes)
