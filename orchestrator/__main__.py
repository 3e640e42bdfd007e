"""`python -m orchestrator` and the `orchestrator` command. `--version` answers without loading the
commands (a fraction of the start-up); everything else goes to the CLI."""

import sys


def entry() -> None:
    if sys.argv[1:] == ["--version"]:
        from orchestrator import __version__

        print(f"orchestrator {__version__}")
        return
    from orchestrator.cli import main

    main()


if __name__ == "__main__":
    entry()
