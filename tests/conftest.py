"""Fixtures every test directory may use.

The whole session runs in a network namespace of its own (tests/support/netns.py): the simulated
boxes' addresses live there, and nothing a test starts meets another run's ports.

`tests.support.cluster` is loaded once here, as a plugin, so its session-scoped `kube_cluster` (a real
control plane: scripts/cluster.sh) is one per test session however many directories use it.
"""

import resource
from collections.abc import Iterator
from typing import cast

import pytest

from tests.support.netns import ensure_isolated

ensure_isolated()

pytest_plugins = ["tests.support.cluster", "tests.support.xdist_units"]


# --- the order of the run, for pytest-xdist (scripts/test.sh: `--dist loadfile`) ------------------
#
# A work unit is one test file (its module fixtures are built once), except the files that use the
# session's control plane, `kube_cluster`: they share groups, one control plane each, 2 on 4 workers
# instead of one per worker (the plugin tests/support/xdist_units.py). xdist hands each worker one unit,
# then a second, then one more whenever one ends; a worker runs its units one after another. So the
# units go out longest first: the control-plane groups (about 380 s each on 4 workers of 2 cores),
# the three longest end-to-end files, the other end-to-end files, then the rest. Queued behind one
# another, two units of minutes made one worker the run's critical path (measured on 3 workers: dev
# stack and S3 backend, 475 s, on one worker). Without xdist this changes only the order of files.

# Measured on 4 workers of 2 cores: about 260, 210 and 170 s (README, Tests).
LONGEST_FIRST = ("tests/e2e/test_dev_stack.py", "tests/e2e/test_runbook.py", "tests/e2e/test_machines.py")


def _rank(item: pytest.Item, kube_group: dict[str, int]) -> tuple[int, int]:
    path = item.nodeid.split("::", 1)[0]
    if path in kube_group:
        return 0, kube_group[path]
    if path in LONGEST_FIRST:
        return 1, LONGEST_FIRST.index(path)
    if path.startswith("tests/e2e/") or item.get_closest_marker("e2e") is not None:
        return 2, 0
    return 3, 0


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # Imported here, not above: pytest_plugins loads it first, so that pytest rewrites its asserts.
    from tests.support.xdist_units import KUBE_GROUPS

    kube_group = config.stash.get(KUBE_GROUPS, {})
    items.sort(key=lambda item: _rank(item, kube_group))  # stable: each file stays together


# --- where the run's time went, by file ------------------------------------------------------------
#
# `--durations=10` (pyproject.toml) names the slowest tests; this names the slowest files (setup,
# call and teardown of each test summed, module fixtures included), the units xdist schedules, so that
# LONGEST_FIRST above can be checked against a run, and what each file cost in CPU: the worker's own
# and that of every process it started and waited for (the engine, its programs and plugins, vendorsim,
# sshd's sessions), the figure the 2-core machine is bound by. A control plane (scripts/cluster.sh
# detaches it) is not in it. The reports carry both to the controller under xdist.

_FILE_SECONDS: dict[str, float] = {}
_FILE_CPU: dict[str, float] = {}  # the worker and the processes it waited for
_FILE_OWN_CPU: dict[str, float] = {}  # the worker alone (tests under mocks, in-process clients)
_CPU_MARK = [0.0, 0.0]


def _cpu_seconds() -> tuple[float, float]:
    """(the worker's own CPU-seconds, those of the children it waited for)."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    waited = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime, waited.ru_utime + waited.ru_stime


def pytest_collection_finish(session: pytest.Session) -> None:
    _CPU_MARK[:] = _cpu_seconds()  # collection's imports are no file's


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    report: pytest.TestReport = outcome.get_result()  # type: ignore[attr-defined]
    own, waited = _cpu_seconds()
    report.user_properties.append(("cpu_seconds", (own - _CPU_MARK[0], waited - _CPU_MARK[1])))
    _CPU_MARK[:] = [own, waited]


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    path = report.nodeid.split("::", 1)[0]
    _FILE_SECONDS[path] = _FILE_SECONDS.get(path, 0.0) + report.duration
    for key, value in report.user_properties:
        if key == "cpu_seconds":
            own, waited = (float(v) for v in cast("tuple[float, float]", value))
            _FILE_OWN_CPU[path] = _FILE_OWN_CPU.get(path, 0.0) + own
            _FILE_CPU[path] = _FILE_CPU.get(path, 0.0) + own + waited


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not _FILE_SECONDS or hasattr(terminalreporter.config, "workerinput"):
        return
    total = sum(_FILE_SECONDS.values())
    cpu_total = sum(_FILE_CPU.values())
    terminalreporter.write_sep(
        "=",
        f"slowest 10 files (of {len(_FILE_SECONDS)}; {total:.0f} s in all tests, "
        f"{cpu_total:.0f} CPU-seconds, {sum(_FILE_OWN_CPU.values()):.0f} of them in the workers)",
    )
    for path, seconds in sorted(_FILE_SECONDS.items(), key=lambda item: -item[1])[:10]:
        terminalreporter.write_line(
            f"{seconds:8.1f}s {100 * seconds / total:5.1f}%  {_FILE_CPU.get(path, 0.0):7.1f} CPU-s  {path}"
        )
    terminalreporter.write_sep("=", "costliest 10 files in CPU (the worker's own in brackets)")
    for path, cpu in sorted(_FILE_CPU.items(), key=lambda item: -item[1])[:10]:
        share = 100 * cpu / cpu_total if cpu_total else 0.0
        terminalreporter.write_line(
            f"{cpu:8.1f} CPU-s {share:5.1f}% ({_FILE_OWN_CPU.get(path, 0.0):6.1f})  "
            f"{_FILE_SECONDS[path]:7.1f}s  {path}"
        )
    terminalreporter.write_sep("=", "the workers' own CPU, costliest 10 files")
    for path, own in sorted(_FILE_OWN_CPU.items(), key=lambda item: -item[1])[:10]:
        terminalreporter.write_line(f"{own:8.1f} CPU-s  {_FILE_SECONDS[path]:7.1f}s  {path}")
