"""Issue 16's goals as gates (bench/goals.py) and the verdicts each benchmark draws from its figures.

The benchmarks run the engine for minutes and are not part of the suite; what their `--gate` decides
from the figures they measured is, here, on figures made up to sit each side of every limit.
"""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest

from bench.adoption import Phase
from bench.adoption import gate_verdicts as adoption_verdicts
from bench.goals import GOALS, Goal, Kind, Verdict, gate, goal
from bench.preview import evaluate_verdicts
from bench.suite import suite_verdicts
from tests.bench.test_adoption import REPO


def phase(ratio: float, calls: int) -> Phase:
    return Phase(wall=ratio * 10 + 5, phase=ratio * 10, critical=10.0, calls=calls, listings=0, boxes=1)


def by_key(verdicts: list[Verdict]) -> dict[str, Verdict]:
    return {v.goal.key: v for v in verdicts}


@pytest.mark.parametrize(
    ("key", "value", "passes", "status"),
    [
        ("adoption.up.16", 1.10, True, "met"),
        ("adoption.up.16", 1.11, False, "FAILED: over the goal"),
        ("nochange.cpu", 1.9, True, "met"),
        ("nochange.cpu", 4.4, True, "not met; under its ceiling 5"),
        ("nochange.cpu", 5.1, False, "FAILED: over its ceiling 5 (a regression)"),
        ("evaluate.x100", 39.0, True, "not met (reported, not gated: seconds on this machine)"),
        ("evaluate.x100", 9.5, True, "met"),
    ],
)
def test_a_verdict_passes_at_its_goal_under_its_ceiling_and_always_when_only_reported(
    key: str, value: float, passes: bool, status: str
) -> None:
    verdict = Verdict(goal(key), value)
    assert (verdict.passes, verdict.status) == (passes, status)
    assert verdict.line().split()[:2] == ["ok" if passes else "FAIL", key]


def test_a_ceiling_belongs_to_a_ceiling_goal_and_sits_above_its_goal() -> None:
    with pytest.raises(ValueError, match="goal x: a ceiling goes with kind CEILING"):
        Goal("x", "", 1.0, Kind.GOAL, "cmd", ceiling=2.0)
    with pytest.raises(ValueError, match="goal x: a ceiling goes with kind CEILING"):
        Goal("x", "", 1.0, Kind.CEILING, "cmd")
    with pytest.raises(ValueError, match=r"goal x: ceiling 0\.5 is below the goal 1\.0"):
        Goal("x", "", 1.0, Kind.CEILING, "cmd", ceiling=0.5)
    assert len({g.key for g in GOALS}) == len(GOALS)


def test_the_gate_fails_on_any_failed_verdict_and_when_nothing_was_measured(
    capsys: pytest.CaptureFixture[str],
) -> None:
    ok, over = Verdict(goal("preview.exponent"), 0.9), Verdict(goal("adoption.up.64"), 1.3)
    assert gate([ok], ["adoption.calls: needs two sizes"]) == 0
    out = capsys.readouterr().out
    assert "gate passed" in out and "skip adoption.calls: needs two sizes" in out
    assert gate([ok, over]) == 1
    assert capsys.readouterr().out.splitlines()[-1] == "gate FAILED: adoption.up.64"
    s3 = Verdict(goal("preview.exponent"), 1.2, where="s3")
    assert s3.line().split()[:2] == ["FAIL", "preview.exponent[s3]"]
    assert gate([ok, s3]) == 1
    assert capsys.readouterr().out.splitlines()[-1] == "gate FAILED: preview.exponent[s3]"
    assert gate([], ["evaluate.exponent: needs two sizes"]) == 1
    assert "nothing measured" in capsys.readouterr().out


def test_adoption_gates_the_ratios_it_measured_and_calls_per_box_that_stay_flat() -> None:
    flat = {1: (phase(1.0, 15), phase(1.0, 9)), 16: (phase(1.02, 90), phase(1.03, 60))}
    verdicts, skipped = adoption_verdicts(flat)
    got = by_key(verdicts)
    assert sorted(got) == ["adoption.calls", "adoption.destroy.16", "adoption.up.16"]
    assert got["adoption.up.16"].value == pytest.approx(1.02)
    assert got["adoption.calls"].value == pytest.approx((90 / 16) / 15)
    assert all(v.passes for v in verdicts)
    assert skipped == [
        "adoption.up.64: N=64 not measured (--sizes)",
        "adoption.destroy.64: N=64 not measured (--sizes)",
    ]

    # A listing of the account per box: M + 6 calls each, M growing with the fleet (before issue 16).
    listing = {1: (phase(1.0, 1 + 6), phase(1.0, 9)), 16: (phase(1.02, 16 * (16 + 6)), phase(1.03, 60))}
    calls = by_key(adoption_verdicts(listing)[0])["adoption.calls"]
    assert (calls.value, calls.passes) == (pytest.approx(22 / 7), False)

    serial = {64: (phase(1.30, 400), phase(1.2, 300))}
    verdicts, skipped = adoption_verdicts(serial)
    assert [(v.goal.key, v.passes) for v in verdicts] == [
        ("adoption.up.64", False),
        ("adoption.destroy.64", True),
    ]
    assert "adoption.calls: needs two sizes" in skipped


def run(resources: int, cpu: float) -> dict[str, Any]:
    return {"resources": resources, "evaluate_cpu_s": cpu}


def test_evaluate_gates_linear_growth_and_its_distance_from_the_sdk_floor_and_reports_x100() -> None:
    linear = [
        (1, run(192, 0.6), run(192, 0.24)),
        (10, run(1524, 3.9), run(1524, 2.4)),
        (100, run(14844, 39.0), run(14844, 24.0)),
    ]
    verdicts, skipped = evaluate_verdicts(linear)
    got = by_key(verdicts)
    assert skipped == []
    assert got["evaluate.exponent"].value < 1.0 and got["evaluate.exponent"].passes
    floor = got["evaluate.floor"]
    assert (floor.value, floor.passes) == (pytest.approx(39.0 / 24.0), True)  # the largest size's
    assert (got["evaluate.x100"].value, got["evaluate.x100"].met, got["evaluate.x100"].passes) == (
        39.0,
        False,
        True,
    )

    quadratic = [(1, run(100, 0.1), run(100, 0.1)), (10, run(1000, 10.0), run(1000, 1.0))]
    got = by_key(evaluate_verdicts(quadratic)[0])
    assert got["evaluate.exponent"].value == pytest.approx(2.0)
    assert not got["evaluate.exponent"].passes and not got["evaluate.floor"].passes
    assert evaluate_verdicts(quadratic)[1] == ["evaluate.x100: x100 not measured (--times)"]


def test_the_suite_reports_its_floor_only_for_a_whole_run() -> None:
    result = {"busy_cpu_s": 811.0, "cores": 2}
    (verdict,), _ = suite_verdicts(result, whole=True)
    assert (verdict.goal.key, verdict.value, verdict.met, verdict.passes) == (
        "suite.floor",
        405.5,
        False,
        True,
    )
    assert suite_verdicts(result, whole=False) == (
        [],
        ["suite.floor: not the whole suite (--command or arguments after --)"],
    )


def test_every_goal_names_a_command_that_takes_gate_and_python_m_bench_goals_lists_them() -> None:
    helps: dict[str, str] = {}
    for g in GOALS:
        module = g.command.split(" -m ", 1)[1].split()
        name, rest = (f"bench.{module[1]}", module[2:]) if module[0] == "bench" else (module[0], module[1:])
        args = rest[:1] if name == "bench.preview" else []  # its subcommand
        key = " ".join([name, *args])
        if key not in helps:
            helps[key] = subprocess.run(
                [sys.executable, "-m", name, *args, "--help"],
                cwd=REPO,
                capture_output=True,
                text=True,
                check=True,
            ).stdout
        assert "--gate" in helps[key], f"{g.key}: `{key} --help` has no --gate"
        assert "--gate" in g.command
    listed = subprocess.run(
        [sys.executable, "-m", "bench", "goals"], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout
    assert [line.split()[0] for line in listed.splitlines() if not line.startswith(" ")] == [
        g.key for g in GOALS
    ]
