"""tests/support/xdist_units.py: the files that use the control plane share one unit per two workers,
every other file stays a unit of its own; run for real on a synthetic suite under pytest-xdist."""

from __future__ import annotations

import os
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

from tests.support.xdist_units import kube_groups, split

REPO = Path(__file__).resolve().parents[2]

CONFTEST = '''
import os
from pathlib import Path

import pytest

pytest_plugins = ["tests.support.xdist_units"]
LOG = Path(__file__).parent / "log"


@pytest.fixture(scope="session")
def kube_cluster():
    with (LOG / "started").open("a") as f:
        f.write(os.environ.get("PYTEST_XDIST_WORKER", "main") + "\\n")
    return "a control plane"


@pytest.fixture
def ran(request):
    yield
    with (LOG / "ran").open("a") as f:
        f.write(f"{request.node.nodeid.split('::')[0]} {os.environ.get('PYTEST_XDIST_WORKER', 'main')}\\n")
'''

KUBE_TEST = '''
def test_one(kube_cluster, ran):
    assert kube_cluster

def test_two(ran):
    pass
'''

PLAIN_TEST = '''
def test_one(ran):
    pass

def test_two(ran):
    pass
'''


def run(tmp_path: Path, *args: str) -> tuple[list[str], dict[str, set[str]]]:
    (tmp_path / "log").mkdir()
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    (tmp_path / "conftest.py").write_text(CONFTEST)
    for name in ("a", "b", "c", "d"):
        (tmp_path / f"test_kube_{name}.py").write_text(KUBE_TEST)
    for name in ("e", "f", "g", "h"):
        (tmp_path / f"test_plain_{name}.py").write_text(PLAIN_TEST)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    started = (tmp_path / "log" / "started").read_text().split()
    workers: dict[str, set[str]] = defaultdict(set)
    for line in (tmp_path / "log" / "ran").read_text().splitlines():
        path, worker = line.split()
        workers[path].add(worker)
    return started, workers


def test_on_four_workers_the_control_plane_files_share_two_units(tmp_path: Path) -> None:
    started, workers = run(tmp_path, "-n", "4", "--dist", "loadfile")
    assert len(started) == len(set(started)) == 2, started
    # Each file on one worker; the four control-plane files on the two that started one.
    assert all(len(w) == 1 for w in workers.values()), workers
    kube_workers = {w for path, ws in workers.items() if "kube" in path for w in ws}
    assert kube_workers == set(started)
    assert len(workers) == 8


def test_without_the_plugin_every_worker_that_gets_such_a_file_starts_one(tmp_path: Path) -> None:
    # The same suite under xdist's own loadfile: what the plugin saves.
    started, _ = run(tmp_path, "-n", "4", "--dist", "loadfile", "-p", "no:tests.support.xdist_units")
    assert len(started) == 4, started


def test_groups_are_one_per_two_workers_and_split_longest_first() -> None:
    assert [kube_groups(n) for n in (1, 2, 3, 4, 8)] == [1, 1, 1, 2, 4]
    seconds = {"a": 90, "b": 60, "c": 50, "d": 40}
    assert split(["d", "c", "b", "a", "x"], seconds, 2) == {"a": 0, "b": 1, "c": 1, "d": 0, "x": 1}
    assert split(["a", "b"], seconds, 1) == {"a": 0, "b": 0}
