"""Every Debian package a test or the main job drives is installed by the project's set-up.

A new machine has only the packages of its kind (../shared/reference/fresh-machine-debian-packages.txt);
everything else must be in scripts/system-packages.txt, which scripts/bootstrap.sh installs. CI runs on
the machine that did the work, so a package installed there by hand hides the miss until a new machine
fails: this test finds the host files the code runs or loads, asks `dpkg -S` which package owns each,
and fails naming the package when it is listed in neither place.

The files are found in the source, not listed by hand: absolute paths to host binaries and libraries
in Python string literals, `shutil.which("...")` names, and the first element of literal argv lists
passed to subprocess. Commands that only shell scripts run are in HOST_COMMANDS below.
"""

from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SOURCE_DIRS = (
    "config", "components", "providers", "vendorsim", "watcher", "ops", "scripts", "tests", "bench", "policy",
)
BASE_PACKAGES = REPO.parent / "shared" / "reference" / "fresh-machine-debian-packages.txt"
LISTED = REPO / "scripts" / "system-packages.txt"
# Run on the host by the repo's shell (scripts/*.sh, vendorsim/sandbox/login.sh and its shims' passthrough).
HOST_COMMANDS = (
    "bash", "unshare", "mount", "umount", "flock", "sha256sum", "install", "ip", "ssh", "ssh-keygen",
    "sshd", "nginx", "shellcheck", "zstd", "tar", "gzip", "python3", "git", "dpkg-query", "apt-get",
)
# Paths the code names inside a simulated box's sandbox (never the host's own).
BOX_PATHS = {"/usr/bin/kubelet"}
_HOST_PATH = re.compile(r"^/(usr/)?(s?bin|lib|lib64|libexec)/[^\s]+$")
_SUBPROCESS = {"run", "Popen", "check_output", "check_call", "call"}


def _python_files() -> list[Path]:
    files: list[Path] = []
    for top in SOURCE_DIRS:
        if (REPO / top).is_dir():
            files += [p for p in (REPO / top).rglob("*.py") if "__pycache__" not in p.parts]
    return [*files, REPO / "__main__.py"]


def _literal_head(node: ast.expr) -> str | None:
    if isinstance(node, ast.List | ast.Tuple) and node.elts:
        first = node.elts[0]
        if isinstance(first, ast.Constant) and isinstance(first.value, str):
            return first.value
    return None


def used_host_files() -> dict[str, set[str]]:
    """host file or command -> the source files that use it."""
    used: dict[str, set[str]] = {}

    def add(what: str, where: Path) -> None:
        used.setdefault(what, set()).add(str(where.relative_to(REPO)))

    for path in _python_files():
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            is_text = isinstance(node, ast.Constant) and isinstance(node.value, str)
            if is_text and _HOST_PATH.match(node.value):
                add(node.value, path)
            if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
                continue
            owner = node.func.value
            is_which = isinstance(owner, ast.Name) and owner.id == "shutil" and node.func.attr == "which"
            if is_which and node.args:
                arg = node.args[0]
                if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                    add(arg.value, path)
            if isinstance(owner, ast.Name) and owner.id == "subprocess" and node.func.attr in _SUBPROCESS:
                head = _literal_head(node.args[0]) if node.args else None
                if head:
                    add(head, path)
    for command in HOST_COMMANDS:
        add(command, Path(__file__))
    for box_path in BOX_PATHS:
        used.pop(box_path, None)
    return used


def _resolve(what: str) -> Path | None:
    if what.startswith("/"):
        return Path(what) if Path(what).exists() else None
    # The project's own toolchain (.toolchain/bin, .venv/bin) comes first on the tests' PATH.
    ours = f"{REPO / '.toolchain' / 'bin'}:{REPO / '.venv' / 'bin'}"
    found = shutil.which(what, path=f"{ours}:{os.environ.get('PATH', '')}:/usr/local/sbin:/usr/sbin:/sbin")
    return Path(found) if found else None


def _candidates(path: Path) -> set[str]:
    """`path` as given, resolved, and across the merged /usr (dpkg records whichever was packaged)."""
    candidates = {str(path), os.path.realpath(path)}
    for c in list(candidates):
        candidates.add(c[len("/usr"):] if c.startswith("/usr/") else "/usr" + c)
    return candidates


def owners(paths: list[Path]) -> dict[Path, str]:
    """The Debian package owning each path that one owns, from one `dpkg -S` call."""
    wanted = {c: p for p in paths for c in _candidates(p)}
    proc = subprocess.run(["dpkg", "-S", *sorted(wanted)], capture_output=True, text=True)
    found: dict[Path, str] = {}
    for line in proc.stdout.splitlines():
        # "pkg[:arch][, pkg2]: /path"
        packages, _, owned = line.partition(": ")
        if owned in wanted:
            found.setdefault(wanted[owned], packages.split(",")[0].split(":")[0].strip())
    return found


def _package_list(path: Path) -> set[str]:
    names: set[str] = set()
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            names.update(line.split())
    return names


def test_the_source_scan_finds_the_tools_we_know_we_use() -> None:
    # Guards the scanner itself: if it stopped seeing these, the main test would pass vacuously.
    used = used_host_files()
    for known in ("/usr/sbin/sshd", "/usr/lib/x86_64-linux-gnu/libnss_wrapper.so", "/usr/sbin/nginx",
                  "/usr/lib/nginx/modules/ngx_stream_module.so", "zstd"):
        assert known in used, f"the scan no longer sees {known}"


def test_every_debian_package_the_code_uses_is_installed_by_the_setup() -> None:
    assert BASE_PACKAGES.exists(), f"{BASE_PACKAGES} is missing: the repo runs with ../shared beside it"
    base = _package_list(BASE_PACKAGES)
    listed = _package_list(LISTED)
    problems = []
    resolved: dict[str, Path] = {}
    for what, where in sorted(used_host_files().items()):
        path = _resolve(what)
        if path is None:
            problems.append(f"{what} (used by {', '.join(sorted(where))}) is not on this machine")
        else:
            resolved[what] = path
    packages = owners(list(resolved.values()))
    used = used_host_files()
    for what, path in sorted(resolved.items()):
        package = packages.get(path)
        if package is None:
            continue  # not from a Debian package: the machine kind's own tools (Go, pyenv's Python, ours)
        if package not in base and package not in listed:
            problems.append(
                f"{what} comes from the Debian package {package}, which is not in "
                f"scripts/system-packages.txt (used by {', '.join(sorted(used[what]))})"
            )
    assert not problems, "\n".join(problems)


def test_every_listed_package_exists_in_the_archive() -> None:
    # A typo in the list would only show on a new machine, where apt-get refuses the whole install.
    listed = sorted(_package_list(LISTED))
    proc = subprocess.run(["apt-cache", "show", "--no-all-versions", *listed], capture_output=True, text=True)
    known = set(re.findall(r"^Package: (\S+)$", proc.stdout, re.MULTILINE))
    assert not set(listed) - known, f"not in the apt archive: {sorted(set(listed) - known)}"
