"""Release artifacts the Robot post-install script downloads, as vendorsim serves them at /artifacts/<file>.

The dev stack pins these by sha256 (Pulumi.dev.yaml, fleets[].install_artifacts), so their bytes are
committed files in vendorsim/artifacts/ and never rebuilt on the fly. They are small real archives
holding stand-in binaries, so the script's checksum check and extraction really run. `build` is how
they were made (reproducibly: sorted members, mtime 0, root owner); run
`python -m vendorsim.artifacts` to regenerate them after changing a stand-in, then re-pin.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import re
import subprocess
import sys
import tarfile
from pathlib import Path

ARTIFACTS_DIR = Path(__file__).resolve().parent / "artifacts"
RUNC = "runc.amd64"
CONTAINERD = "containerd-2.2.3-linux-amd64.tar.gz"
KATA_STATIC = "kata-static-3.30.0-amd64.tar.zst"
# The Mac's node agent (the reference's tart-kubelet), which macos-bootstrap.sh runs under launchd.
NODE_AGENT = "tart-kubelet-darwin-arm64"
FILES = (RUNC, CONTAINERD, KATA_STATIC, NODE_AGENT)
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


def artifact(name: str) -> bytes | None:
    """The bytes of a served artifact, or None when there is no such file (names only, no paths)."""
    if not _NAME.match(name) or name not in FILES:
        return None
    path = ARTIFACTS_DIR / name
    return path.read_bytes() if path.is_file() else None


def sha256_of(name: str) -> str:
    return hashlib.sha256((ARTIFACTS_DIR / name).read_bytes()).hexdigest()


def _script(text: str) -> bytes:
    return f'#!/bin/sh\necho "{text}"\n'.encode()


def _tar(members: dict[str, tuple[bytes, int]]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.GNU_FORMAT) as tar:
        directories = sorted({str(Path(p).parent) for p in members} - {"."})
        for directory in sorted({str(p) for d in directories for p in [Path(d), *Path(d).parents]} - {"."}):
            info = tarfile.TarInfo(f"./{directory}")
            info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o755, 0
            tar.addfile(info)
        for path, (data, mode) in sorted(members.items()):
            info = tarfile.TarInfo(f"./{path}")
            info.size, info.mode, info.mtime = len(data), mode, 0
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def build(directory: Path) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / RUNC).write_bytes(_script("runc version 1.2.5 (simulated)"))
    containerd = {
        f"bin/{b}": (_script(f"{b} github.com/containerd/containerd/v2 v2.2.3 (simulated)"), 0o755)
        for b in ("containerd", "containerd-shim-runc-v2", "ctr")
    }
    (directory / CONTAINERD).write_bytes(gzip.compress(_tar(containerd), compresslevel=9, mtime=0))
    kata: dict[str, tuple[bytes, int]] = {
        f"opt/kata/bin/{b}": (_script(f"{b} 3.30.0 (simulated)"), 0o755)
        for b in ("containerd-shim-kata-v2", "kata-runtime", "qemu-system-x86_64")
    }
    kata["opt/kata/share/defaults/kata-containers/configuration-qemu.toml"] = (
        b'[hypervisor.qemu]\npath = "/opt/kata/bin/qemu-system-x86_64"\n',
        0o644,
    )
    # A stand-in: the simulated Mac's launchd keeps the job without running it (sandbox/macos/README.md).
    (directory / NODE_AGENT).write_bytes(_script("tart-kubelet (simulated; darwin/arm64)"))
    zstd = subprocess.run(["zstd", "-q", "-19", "-c"], input=_tar(kata), capture_output=True, check=True)
    (directory / KATA_STATIC).write_bytes(zstd.stdout)


if __name__ == "__main__":
    build(ARTIFACTS_DIR)
    for name in FILES:
        print(f"{sha256_of(name)}  {name}")
    sys.exit(0)
