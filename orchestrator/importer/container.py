"""A launch whose srun starts its ranks in a pyxis/enroot container: how the import carries it."""

from __future__ import annotations

from typing import Any

from orchestrator.importer import launch as launch_mod


def containers(found: launch_mod.Launch, env: dict[str, str], cfg: dict[str, Any],
               notes: list[str]) -> None:
    """The launch's pyxis/enroot options carried into backend.slurm.srun_args, with notes."""
    try:
        options = launch_mod.container_options(found, env)
    except ValueError:  # unbalanced quotes in an expansion: said by the note below
        options = [w for w in found.dropped if w.startswith("--container-")]
    options, refused = launch_mod.without_shell(options, cfg.get("workdir"))
    if options:
        cfg["_srun_args"] = options
        notes.append(f"CONTAINER: {' '.join(options)[:300]} carried into "
                     "backend.slurm.srun_args: the agents run inside the image, so the "
                     "orchestrator (and submitit) must be installed in it; if it is not, remove "
                     "them there and start the container in the launch itself")
    if refused:
        notes.append(f"CONTAINER NOT CARRIED: {' '.join(refused)[:300]}: the value needs the shell "
                     "(a variable the script does not set, or a command), and srun_args reach srun "
                     "without one; write the value out in backend.slurm.srun_args, or the training "
                     "runs outside its image")


def pyxis(found: launch_mod.Launch, env: dict[str, str]) -> bool:
    """The launch's srun starts its ranks in a pyxis/enroot container (`--container-image`, or
    `--container-name` of one an earlier step made; also inside an expansion such as
    `"${ARGS[@]}"`)."""
    try:
        options = launch_mod.container_options(found, env)
    except ValueError:
        options = found.dropped
    return any(w.startswith(("--container-image", "--container-name")) for w in options)
