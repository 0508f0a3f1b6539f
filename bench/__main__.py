"""python -m bench NAME [ARGS]: run the benchmark bench/NAME.py (its --help says what it prints).

python -m bench adoption [--sizes 1,4,16] [--with-64] ...   adoption through the engine (bench/adoption.py)
"""

from __future__ import annotations

import importlib
import pkgutil
import sys
from pathlib import Path


def main(argv: list[str]) -> int:
    names = sorted(m.name for m in pkgutil.iter_modules([str(Path(__file__).parent)]) if not m.ispkg)
    names = [n for n in names if not n.startswith("_")]
    if not argv or argv[0] not in names:
        print(f"usage: python -m bench {{{','.join(names)}}} [ARGS]", file=sys.stderr)
        return 2
    module = importlib.import_module(f"bench.{argv[0]}")
    result: int = module.main(argv[1:])
    return result


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
