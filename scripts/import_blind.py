#!/usr/bin/env python3
"""How many real batch scripts `orchestrator import-sbatch` runs as sbatch would, measured on a blind set whose
answer key (expected.json, written from the scripts alone) was frozen before the importer first ran on it.

Each script is imported as a new user would (`import-sbatch SCRIPT ARGS`; a sweep refused with `--array-task ID`
is imported again for its first task, as the refusal says), then its per-node launch runs under the real agent on
virtual nodes with stub launchers on PATH (python, torchrun, deepspeed, accelerate, singularity, apptainer, docker,
... print their argv), its setup once before. Each script ends in one of:

- `as-sbatch`: every launch the key lists started its entry point, with its arguments, on the nodes the key says,
  as many copies per node (capped at 2); the run-once lines are out of the per-node script; a resubmission of
  the script itself is taken out; nothing the key calls a hetjob ran. A per-host loop's launch (the key's
  `per_host_loop`) is judged as any launch: on the nodes the key says, as many copies per node; a launch on part
  of the job (`8` of 9 nodes, `1`) must run on exactly one of the harness's 2 nodes (changed 2026-12-07: before,
  any per-host loop imported counted as silent and a launch on part of the job as silent without running it).
- `refused`: import-sbatch said why in one `error:` line and wrote nothing.
- `differs-said`: it runs with a difference a note names (the orchestrator needed in a pyxis image, a launch that
  ran on the first node now on every node, a line bash rejects commented out, a dependency dropped).
- `differs-silent`: a difference no note names: a silent mistranslation.

`--tree DIR` measures another checkout (e.g. a `git worktree` of an older commit: the floor) in the same run.

    python scripts/import_blind.py tests/data/sbatch/blind36
    python scripts/import_blind.py tests/data/sbatch/blind36 --tree /tmp/floor --json /tmp/floor.json
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
EXTRA_STUBS = ("mpirun", "mpiexec", "composer", "trl")  # launchers of the images the key names
# The srun of a container step (`--container-image`/`--container-name`): the image's own shell scripts
# (`/workspace/bert/run_and_time.sh`, `/opt/paxml/.../run_pile_multinode.sh`) are not on this host; each absolute
# `*.sh` path the step names that the host lacks becomes a stand-in under $ORCH_TEST_IMAGE_ROOT (a script handed a
# command line as its first argument runs it, MLPerf's `run_and_time.sh "$CMD"`; any other is the launch itself and
# records its argv like the stub launchers). Then the shared stub srun runs the step. (Added 2026-12-07.)
IMAGE_SRUN = r"""#!/usr/bin/env python3
import os, re, sys
here = os.path.dirname(os.path.abspath(sys.argv[0]))
root, args = os.environ["ORCH_TEST_IMAGE_ROOT"], sys.argv[1:]
STANDIN = '#!/bin/bash\ncase "$1" in *" "*) eval "$1"; exit ;; esac\nexec %s/python "$0" "$@"\n' % here

def standin(m):
    path = m.group(0)
    if os.path.exists(path):
        return path
    os.makedirs(os.path.dirname(root + path), exist_ok=True)
    with open(root + path, "w") as f:
        f.write(STANDIN)
    os.chmod(root + path, 0o755)
    return root + path

if any(a.startswith(("--container-image", "--container-name")) for a in args):
    args = [re.sub(r"(?<![\w.])/[\w./-]+\.sh\b", standin, a) for a in args]
os.execv(os.path.join(here, "srun.stub"), [os.path.join(here, "srun.stub"), *args])
"""
SITE_BASHRC = ('cd() { builtin cd "$@" 2>/dev/null || true; }\n'
               'pushd() { builtin pushd "$@" >/dev/null 2>&1 || true; }\n'
               'popd() { builtin popd >/dev/null 2>&1 || true; }\n'
               'source() { if [ -r "$1" ]; then builtin source "$@"; fi; }\n')
# container runtimes as pass-through stubs: the options and the image dropped, the command inside run here (a
# stub launcher, when it is one)
CONTAINER = r"""#!/usr/bin/env python3
import os, sys
VALUE = {"-B", "--bind", "--env", "-e", "-v", "--volume", "--name", "-w", "--workdir", "--network", "--ipc",
         "--pwd", "--home", "-H", "--mount", "--env-file", "--overlay", "-o", "-u", "--user", "--shm-size",
         "--ulimit", "--device", "--security-opt", "--cap-add", "--entrypoint", "--hostname", "--cpuset-cpus",
         "--gpus", "--runtime", "--label", "-l", "--pid", "--net", "--uts", "--cidfile", "--memory", "-m",
         "--cpus", "--group-add", "--tmpfs", "--add-host", "--dns", "--log-driver", "--log-opt", "-p",
         "--publish", "--restart", "--stop-signal", "--stop-timeout", "--init-path", "--rootfs", "--root"}
args = sys.argv[1:]
while args and args[0].startswith("-"):  # the runtime's global options
    args = args[1:]
sub = args[0] if args else ""
args = args[1:]
if sub in ("pull", "build", "rm", "stop", "kill", "inspect", "ps", "images", "image", "load", "import",
           "create", "start", "import", "remove", "list"):
    sys.exit(0)
i = 0
while i < len(args) and args[i].startswith("-"):
    i += 2 if args[i] in VALUE else 1
rest = args[i + 1:] if sub in ("exec", "run", "shell", "instance") else args[i:]
if not rest:
    sys.exit(0)
os.execvp(rest[0], rest)
"""


def _import(tree: Path, script: Path, args: list[str], work: Path, out: Path,
            task: int | None) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "orchestrator", "import-sbatch", "-o", str(out)]
    if task is not None:
        cmd += ["--array-task", str(task)]
    cmd += [str(script), "--", *args] if args else [str(script)]
    return subprocess.run(cmd, capture_output=True, text=True, cwd=work, timeout=120, check=False,
                          env={**os.environ, "PYTHONPATH": str(tree)})


def _gated(script: str) -> list[tuple[int, int]]:
    """Spans of the per-node script that only the first task runs (SLURM_PROCID 0)."""
    spans = []
    for m in re.finditer(r'if \[ "\$\{SLURM_PROCID:-0\}" = 0 \]; then', script):
        end = script.find("\nfi", m.end())
        spans.append((m.start(), end if end >= 0 else len(script)))
    return spans


def _run_on_nodes(tree: Path, cfg_path: Path, tmp: Path, nodes: int, script_text: str,
                  entries: list[str]) -> dict[str, str]:
    """The imported launch under the real agent on `nodes` virtual nodes, in a child process with the tree's
    own code (`--child`): {node: log text}."""
    (tmp / "script.txt").write_text(script_text)
    job = {"tree": str(tree), "cfg": str(cfg_path), "tmp": str(tmp), "nodes": nodes, "entries": entries}
    res = subprocess.run([sys.executable, __file__, "--child", json.dumps(job)], capture_output=True, text=True,
                         timeout=300, check=False, env={**os.environ, "PYTHONPATH": str(tree)}, cwd=tmp)
    logs = tmp / "run" / "segments" / "0001" / "logs"
    out = {f"vn{i}": (logs / f"vn{i}.log").read_text() if (logs / f"vn{i}.log").exists() else ""
           for i in range(1, nodes + 1)}
    if not any(out.values()) or res.returncode:
        out["_error"] = (res.stdout + res.stderr)[-800:]
    return out


def _child(job: dict[str, Any]) -> None:
    sys.path[:0] = [job["tree"]]
    import yaml

    from orchestrator.agent.main import NodeAgent
    from orchestrator.importer.names import assignments, resolve
    from orchestrator.importer.scan import segments
    from orchestrator.model import SegmentSpec
    from orchestrator.settings import PROGRESS_REGEX
    from tests.sbatch_launch import STUB, fill_env, run_setup, write_stubs

    tmp, nodes = Path(job["tmp"]), int(job["nodes"])
    cfg = yaml.safe_load(Path(job["cfg"]).read_text())
    notes = json.loads((tmp / "notes.json").read_text())
    work, bindir = tmp / "work", tmp / "bin"
    write_stubs(bindir, work)
    # a container step sees the image's files: its shell scripts are stand-ins under tmp/image
    (bindir / "srun").rename(bindir / "srun.stub")
    (bindir / "srun").write_text(IMAGE_SRUN.replace("/usr/bin/env python3", sys.executable))
    (bindir / "srun").chmod(0o755)
    os.environ["ORCH_TEST_IMAGE_ROOT"] = str(tmp / "image")
    for name in EXTRA_STUBS:
        (bindir / name).write_text(STUB)
        (bindir / name).chmod(0o755)
    for name in ("apptainer", "singularity", "docker", "podman", "enroot", "nvidia-docker"):
        (bindir / name).write_text(CONTAINER.replace("/usr/bin/env python3", sys.executable))
        (bindir / name).chmod(0o755)
    # the harness's virtual hosts (vn1, vn2) resolve, as a cluster's node names do
    (bindir / "getent").write_text('#!/bin/sh\ncase "$1 $2" in "hosts vn"*) echo "127.0.0.1 $2"; exit 0;; esac\n'
                                   'exec /usr/bin/getent "$@"\n')
    (bindir / "getent").chmod(0o755)
    (bindir / "sudo").write_text("#!/bin/sh\nexit 0\n")  # a site's `sudo sysctl vm.drop_caches=3`: allowed there
    (bindir / "sudo").chmod(0o755)
    for name in ("pdm", "poetry", "uv", "pixi", "hatch"):  # `pdm run CMD ...`: CMD runs
        (bindir / name).write_text('#!/bin/bash\n[ "$1" = run ] && shift\nexec "$@"\n')
        (bindir / name).chmod(0o755)
    text = (tmp / "script.txt").read_text()
    # the user's own wrappers (`python_executable.sh train.py`, `./bind.sh -- cmd`): a .py first runs under the
    # python stub, anything else runs as given
    env = fill_env(notes, tmp, text)
    known = {**assignments(text, segments(text)), **env}
    wrappers = set(re.findall(r"(?<![\w/$.{-])((?:\.{1,2}/)?[\w./-]*[\w-]\.sh)\b", text))
    in_vars = re.findall(r"(\$\{?\w+\}?/[\w./-]*[\w-]\.sh)\b", text)
    wrappers |= {re.sub(r"\$\{\w+:-([^}]*)\}", r"\1", resolve(m, known)) for m in in_vars}
    for m in wrappers:
        p = (bindir / m) if "/" not in m else (work / m)
        if m.startswith("/") and m.startswith(str(tmp)):
            p = Path(m)
        elif m.startswith("/") or p.exists():
            continue
        p.parent.mkdir(parents=True, exist_ok=True)
        # a python script as the first argument (alone or with its arguments in one word): the python stub
        p.write_text(f'#!/bin/bash\ncase "$1" in *.py|*.py\\ *) exec {bindir}/python $@;; esac\n'
                     '[ "$1" = -- ] && shift\n[ $# -gt 0 ] && exec "$@"\n')
        p.chmod(0o755)
    # the site's own interpreter (`/home/u/anaconda3/bin/python train.py`) is the stub
    cfg["command"] = [re.sub(r"/[\w./-]*/bin/python[\d.]*(?![\w.])", "python", c) for c in cfg["command"]]
    for rel in job["entries"]:  # the user's own launch scripts, beside the batch script in their checkout
        p = work / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(f'#!/bin/bash\nexec {bindir}/python "$0" "$@"\n')  # a stub launch: its argv is recorded
        p.chmod(0o755)
    # the site's directories and files the script enters or sources are there (the answer key assumes so)
    bash_env = tmp / "site.bashrc"
    bash_env.write_text(SITE_BASHRC)
    for m in re.finditer(r"(?m)^\s*pushd\s+(\S+)", text):  # as fill_env does for cd
        path = resolve(m.group(1).strip("'\""), known)
        if path.startswith(str(tmp)):
            Path(path).mkdir(parents=True, exist_ok=True)
    hosts = [f"vn{i}" for i in range(1, nodes + 1)]
    os.environ.update({"PATH": f"{bindir}:{os.environ['PATH']}", "SLURM_JOB_NODELIST": ",".join(hosts),
                       "SLURM_JOB_NUM_NODES": str(nodes), "SLURM_NNODES": str(nodes), "SLURM_JOB_ID": "4242",
                       "SLURM_JOBID": "4242", "SLURM_CPUS_PER_TASK": "2", "SLURM_GPUS_PER_NODE": "8"})
    env.update(ORCH_TEST_CALLS=str(tmp / "calls.jsonl"), ORCH_SEGMENT="1", USER=os.environ.get("USER", "u"),
               BASH_ENV=str(bash_env))
    try:
        run_setup({**cfg, "workdir": str(work)}, env, tmp)
    except AssertionError as exc:
        print("setup failed:", str(exc)[-300:])
    # the same cap on a pyxis launch's own srun (the copies per node are its literal: `__orch_rank_step N ...`)
    command = tuple(re.sub(r"__orch_rank_step (\d+) ", lambda m: f"__orch_rank_step {min(int(m.group(1)), 2)} ", c)
                    for c in cfg["command"])
    # a launch on the first node only (`resources.launch_nodes: first`, added 2026-12-07, second session): the
    # other nodes' agents run nothing, as `run_node` has them idle (a tree without the setting runs every node)
    first = cfg["resources"].get("launch_nodes", "all") == "first"
    for rank, host in enumerate(hosts[:1] if first else hosts):
        spec = SegmentSpec(run_name="t", index=1, job_name="t.seg0001", nodes=nodes,
                           tasks_per_node=min(cfg["resources"].get("tasks_per_node", 1), 2), gpus_per_node=0,
                           time_limit_min=5, command=command, env=tuple(sorted(env.items())),
                           workdir=str(work), run_dir=str(tmp / "run"),
                           segment_dir=str(tmp / "run" / "segments" / "0001"), progress_regex=PROGRESS_REGEX)
        if first:
            spec = spec.model_copy(update={"launch_nodes": "first"})
        NodeAgent(spec, host, rank, 1 if first else nodes, "4242").run()


def launches(log_text: str) -> list[dict[str, Any]]:
    """The stub launches a node's log records (a line two ranks wrote into at once is read as far as it goes)."""
    from tests.sbatch_launch import MARK

    out = []
    for line in log_text.splitlines():
        i = line.find(MARK)
        if i >= 0:
            try:
                out.append(json.JSONDecoder().raw_decode(line[i + len(MARK):])[0])
            except ValueError:
                continue
    return out


def judge(tree: Path, script: Path, key: dict[str, Any], tmp: Path) -> dict[str, Any]:
    from tests.sbatch_launch import starts_entry

    work = tmp / "work"
    work.mkdir(parents=True)
    out = tmp / "imported.yaml"
    res = _import(tree, script, key["args"], work, out, None)
    how = "import-sbatch SCRIPT"
    task = None
    if res.returncode != 0 and "--array-task ID" in res.stderr and key.get("array"):
        ids = re.findall(r"\d+", key["array"]["spec"].split("%")[0])
        task = int(ids[0])
        res = _import(tree, script, key["args"], work, out, task)
        how += f" --array-task {task}"
    if res.returncode != 0:
        errors = [ln for ln in res.stderr.splitlines() if ln.startswith("error:")]
        return {"outcome": "refused", "how": how, "why": errors[:1] or [res.stderr[-300:]]}
    import yaml

    cfg = yaml.safe_load(out.read_text())
    notes = [ln[len("note: "):] for ln in res.stderr.splitlines() if ln.startswith("note: ")]
    (tmp / "notes.json").write_text(json.dumps(notes))
    said: list[str] = []
    silent: list[str] = []
    joined = " ".join(notes)
    per_node = cfg["command"][2] if len(cfg["command"]) > 2 else " ".join(cfg["command"])
    setup = "\n".join(cfg.get("backend", {}).get("slurm", {}).get("setup", []))
    # what the key says sbatch would never run as it is imported
    if key.get("hetjob"):
        silent.append("a hetjob imported as one job")
    # a one-node job whose whole script runs on its node, as the batch host ran it: loops and run-once lines
    # run there once, as under sbatch
    whole = "the whole script runs on the job's one node" in joined
    # one node, one copy of the per-node script: it runs there once, as the batch script ran (changed 2026-12-07)
    whole = whole or (key["nodes"] == 1 and cfg["resources"].get("tasks_per_node", 1) == 1
                      and "__orch_rank_step" not in per_node)
    if not key["launches"]:
        (said if re.search(r"syntax error|bash -n|commented out", joined) else silent).append(
            "a script that launches nothing under sbatch (it stops first) was imported")
    if key.get("dependency") and "--dependency" not in joined:
        silent.append("dependency dropped")
    elif key.get("dependency") and "resources.first_dependency: the first segment waits" not in joined:
        said.append("--dependency not held")
    if key.get("self_resubmit") and "RESUBMISSION TAKEN OUT" not in joined:
        silent.append(f"the script's own resubmission kept: {key['self_resubmit'][:80]}")
    for once in ([] if whole else key["run_once"]):
        spans = _gated(per_node)
        bad = [m.start() for m in re.finditer(re.escape(once), per_node)
               if not per_node[per_node.rfind("\n", 0, m.start()) + 1:m.start()].lstrip().startswith("#")
               and not any(a <= m.start() < b for a, b in spans)]
        if bad and once not in setup:
            silent.append(f"run-once line on every node: {once[:60]}")
    if any(la["in_container"] == "pyxis" for la in key["launches"]):
        agents_srun = cfg.get("backend", {}).get("slurm", {}).get("srun_args", [])
        if any(a.startswith("--container-") for a in agents_srun):  # the agents' srun: they run in the image
            (said if "CONTAINER" in joined else silent).append("pyxis: the agents run inside the image "
                                                                "(the orchestrator must be in it)")
        elif "__orch_rank_step" not in per_node:  # neither the agents' srun nor the ranks' own: outside the image
            silent.append("pyxis: the container options reach no srun")
    nodes = key["nodes"] if key["nodes"] and key["nodes"] < 2 else 2
    entries = [e.removeprefix("./") for la in key["launches"] if not (e := la["entry_point"]).startswith(("-m ", "/"))
               and "$" not in e and "`" not in e and not e.endswith(".py")]
    logs = _run_on_nodes(tree, out, tmp, nodes, script.read_text(), entries)
    if "_error" in logs:
        silent.append(f"the agent run failed: {logs['_error'][-200:]}")
    for la in key["launches"]:
        entry = la["entry_point"]
        if ("$" in entry or "`" in entry) and not entry.startswith("-m "):
            entry = re.split(r"[/)\"]", entry)[-1] or entry
        started = {h: [x for x in launches(t) if starts_entry(x, entry, la["must_args"])]
                   for h, t in logs.items() if not h.startswith("_")}
        where = la["nodes_running_it"]
        if where == "all" or (where == "first" and nodes == 1):
            missing = [h for h, s in started.items() if not s]
            if missing:
                silent.append(f"{entry} not started on {missing}")
                continue
            cap = 1 if la["launcher"] not in ("srun", "mpirun") else min(2, la["copies_per_node"])
            counts = {h: min(len(s), 2) for h, s in started.items()}  # capped at 2, as the key is
            if any(c != cap for c in counts.values()) and la["launcher"] in ("srun", "mpirun"):
                silent.append(f"{entry}: {counts} copies per node, sbatch {cap} (capped at 2)")
        elif where == "first":
            extra = [h for h, s in list(started.items())[1:] if s]
            if extra:
                (said if "ran once, on the first node" in joined else silent).append(
                    f"{entry} ran on the first node under sbatch, now on every node")
        # a launch on some nodes only ("1", "8" of a split job; on this harness's 2 nodes: one of them)
        elif where.isdigit() and int(where) < (key["nodes"] or 2):
            on = [h for h, s in started.items() if s]
            if len(on) != 1:
                silent.append(f"{entry} ran on {where} of {key['nodes']} node(s) under sbatch, here on {on} of "
                              f"{nodes}")
    outcome = "differs-silent" if silent else "differs-said" if said else "as-sbatch"
    if os.environ.get("ORCH_BLIND_DEBUG"):
        print("NOTES:", *notes, sep="\n  ")
        for h, t in logs.items():
            print(f"--- {h}\n{t[-2500:]}")
    return {"outcome": outcome, "how": how, "silent": silent, "said": said}


def main() -> int:
    if len(sys.argv) == 3 and sys.argv[1] == "--child":
        _child(json.loads(sys.argv[2]))
        return 0
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("corpus", type=Path)
    ap.add_argument("--tree", type=Path, default=REPO, help="the checkout whose importer and agent are measured")
    ap.add_argument("--json", type=Path, help="write every script's result here")
    ap.add_argument("-k", help="only the scripts whose name holds this")
    a = ap.parse_args()
    sys.path[:0] = [str(a.tree)]
    key = json.loads((a.corpus / "expected.json").read_text())
    results: dict[str, Any] = {}
    for name in sorted(key):
        if a.k and a.k not in name:
            continue
        with tempfile.TemporaryDirectory(prefix="orch-blind-") as tmp:
            results[name] = judge(a.tree.resolve(), (a.corpus / name).resolve(), key[name], Path(tmp))
        r = results[name]
        why = r.get("why") or r.get("silent") or r.get("said") or ""
        print(f"{r['outcome']:15} {name:45} {'; '.join(why)[:220]}", flush=True)
    counts: dict[str, int] = {}
    for r in results.values():
        counts[r["outcome"]] = counts.get(r["outcome"], 0) + 1
    n = len(results)
    print("\n" + ", ".join(f"{k} {v}/{n}" for k, v in sorted(counts.items())))
    if a.json:
        a.json.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
