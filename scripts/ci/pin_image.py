#!/usr/bin/env python3
"""Pin the failover watcher image the image workflow just pushed in every real stack file.

    python3 scripts/ci/pin_image.py ghcr.io/tuist/tuist-infra-watcher@sha256:<64 hex>

Rewrites the `failover_watcher_image:` line of Pulumi.{staging,canary,production}.yaml in place (a
line edit: the files' comments and layout stay), refuses anything but a digest of the watcher
repository, and fails if a stack file does not have exactly one such line. The dev stack keeps its
floating tag. .github/workflows/watcher-image.yml runs this and opens the pull request whose
preview shows the new digest in every stack.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
WATCHER_REPOSITORY = "ghcr.io/tuist/tuist-infra-watcher"
REAL_STACKS = ("staging", "canary", "production")
_REFERENCE = re.compile(rf"^{re.escape(WATCHER_REPOSITORY)}@sha256:[0-9a-f]{{64}}$")
_LINE = re.compile(r"^(?P<indent>\s+)failover_watcher_image:\s*(?P<image>\S+)\s*$", re.MULTILINE)


class PinError(Exception):
    pass


def pin(text: str, image: str, where: str) -> str:
    if not _REFERENCE.match(image):
        raise PinError(
            f"'{image}' is not {WATCHER_REPOSITORY}@sha256:<64 hex>; pin the digest the build pushed"
        )
    found = list(_LINE.finditer(text))
    if len(found) != 1:
        raise PinError(f"{where}: expected one failover_watcher_image line, found {len(found)}")
    return _LINE.sub(lambda m: f"{m['indent']}failover_watcher_image: {image}", text)


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    image = argv[0]
    try:
        # Check every file before writing any, so a failure leaves them all as they were.
        pinned = {
            path: pin(path.read_text(), image, path.name)
            for path in (REPO / f"Pulumi.{stack}.yaml" for stack in REAL_STACKS)
        }
    except PinError as err:
        print(f"pin_image: {err}", file=sys.stderr)
        return 1
    for path, text in pinned.items():
        changed = text != path.read_text()
        path.write_text(text)
        print(f"{path.name}: {'pinned' if changed else 'already pins'} {image}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
