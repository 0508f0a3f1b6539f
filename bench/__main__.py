"""python -m bench NAME [ARGS]: run the benchmark bench/NAME.py (its --help says what it prints).

    python -m bench adoption [--sizes 1,4,16] ...         adoption through the engine (bench/adoption.py)
    python -m bench preview evaluate|engine|up|nochange   preview and up as the stack grows (bench/preview.py)
    python -m bench suite [-- PYTEST ARGS]                where the test suite's CPU goes, by kind of process

(`python -m bench.NAME` runs the same.)
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import sys
from pathlib import Path


def benchmarks() -> list[str]:
    """The modules of bench/ that have a main()."""
    found = []
    for info in pkgutil.iter_modules([str(Path(__file__).parent)]):
        if info.ispkg or info.name.startswith("_"):
            continue
        if "\ndef main(" in (Path(__file__).parent / f"{info.name}.py").read_text():
            found.append(info.name)
    return sorted(found)


def main(argv: list[str]) -> int:
    names = benchmarks()
    if not argv or argv[0] not in names:
        print(f"usage: python -m bench {{{','.join(names)}}} [ARGS]", file=sys.stderr)
        return 2
    module = importlib.import_module(f"bench.{argv[0]}")
    # Some read sys.argv themselves (argparse's default), some take the arguments.
    sys.argv = [f"python -m bench {argv[0]}", *argv[1:]]
    run = module.main
    result = run(argv[1:]) if inspect.signature(run).parameters else run()
    return int(result or 0)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
