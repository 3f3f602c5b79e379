"""``python -m bench <name> [options]``: run one bench; ``python -m bench --list``: the
benches, one line each; ``python -m bench table``: bench/README.md's results table from
bench/results/*.json (bench/table.py).

A bench runs exactly as its script does (``python bench/<script> [options]``): its own
options, its own ``--help``, its result JSON under bench/results/, stamped
(bench/stamp.py). The registry is :data:`bench.BENCHES`.
"""

from __future__ import annotations

import runpy
import sys

from bench import BENCHES, HERE


def listing() -> str:
    """One line per bench: name, whether it loads the real model, what it measures."""
    width = max(map(len, BENCHES))
    return "\n".join(f"{name:<{width}}  {'model' if b.real_model else '     '}  {b.about}"
                     for name, b in BENCHES.items())


def main(argv: list[str]) -> None:
    if not argv or argv[0] in ("-h", "--help"):
        print(str(__doc__).strip() + "\n\nbenches ('model': loads the real model, slow):\n"
              + listing())
        return
    if argv[0] == "--list":
        print(listing())
        return
    name, rest = argv[0], argv[1:]
    if name == "table":
        from bench.table import main as table_main

        table_main(rest)
        return
    if name not in BENCHES:
        sys.exit(f"unknown bench {name!r}; `python -m bench --list` names them")
    script = BENCHES[name].script
    if script.endswith(".py"):
        path = HERE / script
        sys.argv = [f"python -m bench {name}", *rest]
        sys.path.insert(0, str(path.parent))  # as when run as a script
        runpy.run_path(str(path), run_name="__main__")
    else:
        sys.argv = [f"python -m bench {name}", *rest]
        runpy.run_module(script, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main(sys.argv[1:])
