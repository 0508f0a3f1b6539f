"""The state machine, table-driven, with a fake clock and the in-process record: no sleeps, no network.

The real tables are checked for shape (every next state exists, every state its own budget); the
runner's routing (success, retryable error in place and elsewhere, permanent failure, budgets, the loop
cap), what it persists (state, phase, error type and count, attempt, facts, no secrets), and the Robot
install's resume: a create that died in INSTALLIMAGE starts there, with the rescue host key it recorded,
and never resets the box again.
"""

from __future__ import annotations

import datetime as dt
import itertools
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any

import pytest

from providers.constants import fleet_key_name
from providers.errors import OutcomeUnknownError, TransientVendorError
from providers.machine import robot_install
from providers.machine.errors import ClaimLostError, MachineHostKeyMismatchError, MachineStepError
from providers.machine.fsm import (
    DONE,
    FAILED,
    MAX_ENTRIES_PER_RUN,
    MIN_STEP_TIMEOUT,
    Complete,
    Continue,
    Error,
    Failed,
    Result,
    Row,
    Run,
    Runner,
    check_table,
    classify,
    poll_delay,
)
from providers.machine.record import Holder, Phase, ProcessClaimRecord, Progress
from providers.machine.release import release_table, resume_state
from providers.machine.spec import DEFAULT_TIMEOUTS, Timeouts, Vendor
from providers.machine.states import adopt_table, leave_table, rejoin_table
from providers.ssh.runner import HostKeyMismatchError, RemoteCommandError, SshConnectError, SshTarget
from providers.vendor import Claim, InstallState, Reinstall, RescueInfo

SECRET = "s3cret-sudo-password"
HOLDER = Holder("tuist-infra", "dev", "kura-ovh-0", "0123456789ab")
T0 = dt.datetime(2026, 5, 1, 12, 0, tzinfo=dt.UTC)


@dataclass
class FakeClock:
    t: float = 0.0
    sleeps: list[float] = field(default_factory=list)

    def now(self) -> float:
        return self.t

    def wall(self) -> dt.datetime:
        return T0 + dt.timedelta(seconds=self.t)

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.t += seconds


@dataclass
class World:
    clock: FakeClock
    record: ProcessClaimRecord
    progress: Progress
    lines: list[str]
    run: Run
    saved: list[tuple[str, str]]  # (phase, state) of every save, in order


@pytest.fixture
def world() -> World:
    store: dict[str, Progress] = {}
    record = ProcessClaimRecord(store)
    saved: list[tuple[str, str]] = []
    real_save = record.save

    def save(progress: Progress) -> Progress:
        saved.append((progress.phase, progress.state))
        return real_save(progress)

    record.save = save  # type: ignore[method-assign]
    progress = record.acquire(Progress("ovh", "ns1", "kura-ovh", HOLDER, state="CLAIMED"))
    clock = FakeClock()
    lines: list[str] = []
    run = Run(
        machine="kura-ovh-0",
        vendor=Vendor.OVH,
        box_id="ns1",
        box_label="ovh box ns1",
        timeout=Timeouts({"retry_delay": 10, "a": 100, "b": 100}),
        clock=clock,
        log=lines.append,
        secrets=[SECRET],
    )
    return World(clock, record, progress, lines, run, saved)


def scripted(*results: Result | BaseException) -> Callable[[Run], Result]:
    """A handler answering `results` in turn (an exception is raised)."""
    answers: Iterator[Result | BaseException] = iter(results)

    def handler(_run: Run) -> Result:
        answer = next(answers)
        if isinstance(answer, BaseException):
            raise answer
        return answer

    return handler


def start(world: World, table: dict[str, Row], first: str) -> Progress:
    """Run `table` from `first`; the test tables' budgets "a" and "b" are 100 s, retry_delay 10 s."""
    return Runner(table, world.run, world.record, world.progress, Phase.ADOPTING).start(first)


@dataclass(frozen=True)
class Case:
    name: str
    a: tuple[Result | BaseException, ...]  # what state A answers, in turn
    b: tuple[Result | BaseException, ...]
    a_on_error: str  # A's next state on a retryable error
    outcome: str  # "done" or the error type of the MachineStepError raised
    failed_in: str | None  # the state named in the failure
    visits: list[str]  # states entered, in order
    sleeps: list[float]
    error_count: int


CASES = [
    Case("straight through", (Complete(),), (Complete(),), "A", "done", None, ["A", "B"], [], 0),
    Case(
        "polls until there, within the budget",
        (Continue(5, "x"), Continue(5, "x"), Complete()),
        (Complete(),),
        "A",
        "done",
        None,
        ["A", "B"],
        [5, 5],
        0,
    ),
    Case(
        "a retryable error is tried again in place, backing off",
        (Error("Flaky", "1"), Error("Flaky", "2"), Complete()),
        (Complete(),),
        "A",
        "done",
        None,
        ["A", "B"],
        [10, 20],
        2,
    ),
    Case(
        "three retries, then the fourth error is permanent",
        tuple(Error("Flaky", str(i)) for i in range(4)),
        (),
        "A",
        "Flaky",
        "A",
        ["A"],
        [10, 20, 40],
        4,
    ),
    Case(
        "a permanent failure is not retried",
        (Failed("Refused", "no"),),
        (),
        "A",
        "Refused",
        "A",
        ["A"],
        [],
        1,
    ),
    Case(
        # A polls 40 s at a time in a 100 s budget: two sleeps, then the third pause is cut to the 20 s
        # left for a last look at the budget's end: a Timeout, routed to B, which does the same and routes
        # back to A ... until a state would be entered a fourth time in one run.
        "the budget is spent polling: timeouts route between states until the loop cap",
        tuple(Continue(40, "the box") for _ in range(4 * MAX_ENTRIES_PER_RUN)),
        (),
        "B",
        "Timeout",
        "B",
        ["A", "B"] * MAX_ENTRIES_PER_RUN,
        [40.0, 40.0, 20.0] * (2 * MAX_ENTRIES_PER_RUN),
        2 * MAX_ENTRIES_PER_RUN,
    ),
    Case(
        "a retryable error routed to another state, which then succeeds",
        (Error("Gone", "away"), Complete()),
        (Complete(), Complete()),
        "B",
        "done",
        None,
        ["A", "B"],
        [],
        1,
    ),
    Case(
        "an exception is classified: transport trouble is retried",
        (SshConnectError("refused"), Complete()),
        (Complete(),),
        "A",
        "done",
        None,
        ["A", "B"],
        [10],
        1,
    ),
    Case(
        "an exception is classified: a failed script is permanent",
        (RemoteCommandError(SshTarget("h", 22, "u"), "join", 1, "boom"),),
        (),
        "A",
        "RemoteCommandFailed",
        "A",
        ["A"],
        [],
        1,
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_transitions(world: World, case: Case) -> None:
    if case.name.startswith("the budget"):
        table = {
            "A": Row("A", scripted(*case.a), "a", "B", "B"),
            "B": Row("B", scripted(*case.a), "b", DONE, "A"),
        }
    else:
        table = {
            "A": Row("A", scripted(*case.a), "a", "B", case.a_on_error),
            "B": Row("B", scripted(*case.b), "b", DONE, "B"),
        }
    if case.outcome == "done":
        done = start(world, table, "A")
        assert done.state == DONE
        assert (done.error_type, done.last_error) == (None, None)
    else:
        with pytest.raises(MachineStepError) as caught:
            start(world, table, "A")
        error = caught.value
        assert (error.state, error.error_type, error.attempt) == (case.failed_in, case.outcome, 1)
        assert error.failures == case.error_count
        assert str(error).startswith(f"kura-ovh-0: {case.failed_in} failed on ovh box ns1 after ")
        assert f"(attempt 1, {case.outcome}, failure {case.error_count})" in str(error)
        stored = world.record.get("ovh", "ns1")
        assert stored is not None
        assert (stored.state, stored.error_type, stored.error_count) == (
            case.failed_in,
            case.outcome,
            case.error_count,
        )
    entered = [state for phase, state in world.saved if phase == Phase.ADOPTING]
    assert [s for i, s in enumerate(entered) if i == 0 or s != entered[i - 1]] == (
        case.visits + (["DONE"] if case.outcome == "done" else [])
    )
    assert world.clock.sleeps == case.sleeps


# --- budgets bound the whole state ---------------------------------------------------------------------


def timed(clock: FakeClock, *steps: tuple[float, Result | BaseException]) -> Callable[[Run], Result]:
    """A handler whose calls take time: each step spends its seconds on the clock (not a sleep of the
    runner's), then answers (an exception is raised)."""
    answers = iter(steps)

    def handler(_run: Run) -> Result:
        seconds, answer = next(answers)
        clock.t += seconds
        if isinstance(answer, BaseException):
            raise answer
        return answer

    return handler


def test_a_failure_at_299s_of_a_300s_budget_is_not_retried(world: World) -> None:
    """The state's retry delay (10 s) no longer fits in its budget: no fresh try of a whole budget. The
    state fails with the error it ended on (where a later run resumes depends on its type), saying
    that no time was left."""
    world.run.timeout = Timeouts({"retry_delay": 10, "a": 300})
    handler = timed(world.clock, (299, SshConnectError("connection refused")))
    table = {"A": Row("A", handler, "a", DONE, "A", retries=3)}
    with pytest.raises(MachineStepError) as caught:
        start(world, table, "A")
    error = caught.value
    assert (error.state, error.error_type, error.failures) == ("A", "SshUnreachable", 1)
    assert str(error) == (
        "kura-ovh-0: A failed on ovh box ns1 after 299.0s (attempt 1, SshUnreachable, failure 1): "
        "SshConnectError: connection refused (no time left of A's 300s budget to try again)"
    )
    assert world.clock.sleeps == []
    stored = world.record.get("ovh", "ns1")
    assert stored is not None
    assert (stored.state, stored.error_type, stored.error_count) == ("A", "SshUnreachable", 1)
    assert stored.last_error == (
        "SshConnectError: connection refused (no time left of A's 300s budget to try again)"
    )
    assert not any("trying again" in line for line in world.lines)


@pytest.mark.parametrize(
    ("failed_at", "retried"),
    [(289, True), (290, False)],
    ids=["289s + 10s fits in 300s", "290s + 10s does not"],
)
def test_a_retry_is_taken_only_when_its_delay_fits_in_the_budget(
    world: World, failed_at: float, retried: bool
) -> None:
    world.run.timeout = Timeouts({"retry_delay": 10, "a": 300})
    handler = timed(world.clock, (failed_at, Error("Flaky", "once")), (0, Complete({"k": "v"})))
    table = {"A": Row("A", handler, "a", DONE, "A", retries=3)}
    if retried:
        done = start(world, table, "A")
        assert (done.state, done.facts, done.error_count) == (DONE, {"k": "v"}, 1)
        assert world.clock.sleeps == [10]
        assert world.clock.t == 299
        assert any("A on ovh box ns1: Flaky, trying again (1/3)" in line for line in world.lines)
    else:
        with pytest.raises(MachineStepError) as caught:
            start(world, table, "A")
        assert (caught.value.error_type, caught.value.failures) == ("Flaky", 1)
        assert str(caught.value).endswith("once (no time left of A's 300s budget to try again)")
        assert world.clock.sleeps == []


def test_the_backoff_stops_where_the_next_pause_would_overrun(world: World) -> None:
    """Errors at 0 s, 10 s and 70 s of 100 s: pauses 10 s and 20 s fit; the third (40 s, from 70 s)
    would end at 110 s: the state fails instead, at 70 s, with its last error."""
    world.run.timeout = Timeouts({"retry_delay": 10, "a": 100})
    handler = timed(
        world.clock, (0, Error("Flaky", "1")), (0, Error("Flaky", "2")), (40, Error("Flaky", "3"))
    )
    table = {"A": Row("A", handler, "a", DONE, "A", retries=3)}
    with pytest.raises(MachineStepError) as caught:
        start(world, table, "A")
    assert (caught.value.error_type, caught.value.failures) == ("Flaky", 3)
    assert str(caught.value).endswith("3 (no time left of A's 100s budget to try again)")
    assert world.clock.sleeps == [10, 20]
    assert world.clock.t == 70


def test_a_state_routed_elsewhere_on_error_keeps_its_error_type(world: World) -> None:
    """Only a retry in place is bounded by the budget; an error routed to another state is not turned
    into a timeout."""
    world.run.timeout = Timeouts({"retry_delay": 10, "a": 100, "b": 100})
    table = {
        "A": Row("A", timed(world.clock, (99, Error("Gone", "away")), (0, Complete())), "a", "B", "B"),
        "B": Row("B", scripted(Complete(), Complete()), "b", DONE, "B"),
    }
    done = start(world, table, "A")
    assert done.state == DONE and done.error_count == 1
    assert any("A on ovh box ns1: Gone, going back to B" in line for line in world.lines)


@pytest.mark.parametrize("last_look", ["still waiting", "there"])
def test_a_poll_near_the_end_sleeps_only_the_remainder_then_looks_once_more(
    world: World, last_look: str
) -> None:
    """A state that retries itself (as NODE_READY does) polls 30 s at a time in 100 s: the fourth pause is
    cut to the 10 s left, the look at 100 s is the last; still waiting there, the state times out with
    the usual error and is not tried again."""
    answers: list[Result] = [Continue(30, "the Node")] * 4
    answers.append(Continue(30, "the Node") if last_look == "still waiting" else Complete())
    calls: list[float] = []

    def handler(_run: Run) -> Result:
        calls.append(world.clock.t)
        return answers.pop(0)

    table = {"A": Row("A", handler, "a", DONE, "A", retries=3)}
    if last_look == "there":
        assert start(world, table, "A").state == DONE
    else:
        with pytest.raises(MachineStepError) as caught:
            start(world, table, "A")
        error = caught.value
        assert (error.state, error.error_type, error.failures) == ("A", "Timeout", 1)
        assert str(error) == (
            "kura-ovh-0: A failed on ovh box ns1 after 100.0s (attempt 1, Timeout, failure 1): "
            "the Node: not reached within 100s"
        )
    assert world.clock.sleeps == [30, 30, 30, 10]
    assert calls == [0, 30, 60, 90, 100]
    assert world.clock.t == 100


def test_run_remaining_is_what_is_left_of_the_current_state(world: World) -> None:
    seen: list[tuple[str, float, float, float]] = []

    def look(name: str, spend: float) -> Callable[[Run], Result]:
        def handler(run: Run) -> Result:
            world.clock.t += spend
            seen.append((name, run.remaining(), run.step_timeout(300), run.step_timeout(30)))
            return Complete()

        return handler

    world.clock.t = 1000.0  # the clock's origin is no concern of the run's
    table = {"A": Row("A", look("A", 60), "a", "B", "A"), "B": Row("B", look("B", 130), "b", DONE, "B")}
    start(world, table, "A")
    # A: 40 s left of its 100 s; B starts afresh, and has spent 30 s more than its budget: the floor.
    assert seen == [("A", 40, 40, 30), ("B", -30, MIN_STEP_TIMEOUT, MIN_STEP_TIMEOUT)]
    # Outside a Runner (a handler called on its own) nothing bounds a step but its own budget.
    assert world.run.remaining() == float("inf") and world.run.step_timeout(300) == 300


def test_what_is_persisted_on_failure_has_no_secret_and_is_cut_short(world: World) -> None:
    long = f"sudo: wrong password {SECRET} " + "x" * 5000
    table = {"A": Row("A", scripted(Failed("Refused", long)), "a", DONE, "A")}
    with pytest.raises(MachineStepError) as caught:
        start(world, table, "A")
    stored = world.record.get("ovh", "ns1")
    assert stored is not None and stored.last_error is not None
    assert SECRET not in stored.last_error and SECRET not in str(caught.value)
    assert "***" in stored.last_error
    assert len(stored.last_error) <= 1000
    assert stored.last_transition == "2026-05-01T12:00:00Z"


def test_a_host_key_mismatch_raises_the_mismatch_error(world: World) -> None:
    mismatch = HostKeyMismatchError(SshTarget("h", 22, "u"), "SHA256:a", "SHA256:b")
    table = {"A": Row("A", scripted(mismatch), "a", DONE, "A")}
    with pytest.raises(MachineHostKeyMismatchError) as caught:
        start(world, table, "A")
    assert isinstance(caught.value, HostKeyMismatchError) and caught.value.error_type == "HostKeyMismatch"


def test_facts_accumulate_and_persist_and_attempts_count(world: World) -> None:
    table = {
        "A": Row("A", scripted(Complete({"k1": "v1"})), "a", "B", "A"),
        "B": Row("B", lambda run: Complete({"k2": run.facts["k1"] + "!"}), "b", DONE, "B"),
    }
    done = start(world, table, "A")
    assert done.facts == {"k1": "v1", "k2": "v1!"} and done.attempt == 1
    stored = world.record.get("ovh", "ns1")
    assert stored is not None and stored.facts == done.facts
    again = Runner(
        {"A": Row("A", scripted(Complete()), "a", DONE, "A")}, world.run, world.record, stored, "x"
    )
    assert again.start("A").attempt == 2


def test_a_record_changed_by_another_process_stops_the_run(world: World) -> None:
    """Compare-and-set: another writer moved the record on; this run must not write over it."""

    def meddle(_run: Run) -> Result:
        current = world.record.get("ovh", "ns1")
        assert current is not None
        world.record.save(current)  # someone else's write bumps the version
        return Complete()

    table = {"A": Row("A", meddle, "a", DONE, "A")}
    with pytest.raises(ClaimLostError, match="changed or went away"):
        start(world, table, "A")


def test_classify_maps_vendor_trouble() -> None:
    transient = TransientVendorError(vendor="robot", call="POST /reset/{n}", message="503")
    assert isinstance(classify(transient), Error)
    assert classify(KeyError("x")) == Failed("KeyError", "KeyError: 'x'")


# --- the real tables ------------------------------------------------------------------------------------

TABLES = {
    "adopt robot": adopt_table(Vendor.ROBOT),
    "adopt ovh": adopt_table(Vendor.OVH),
    "adopt scaleway_em on a private network": adopt_table(Vendor.SCALEWAY_EM, private_network=True),
    "adopt applesilicon": adopt_table(Vendor.APPLESILICON),
    "rejoin": rejoin_table(),
    "rejoin applesilicon": rejoin_table(Vendor.APPLESILICON),
    "rejoin scaleway_em onto another private network": rejoin_table(
        Vendor.SCALEWAY_EM, private_network=True, detach=True
    ),
    "rejoin scaleway_em off its private network": rejoin_table(Vendor.SCALEWAY_EM, detach=True),
    "leave": leave_table(),
    "release ovh": release_table(Vendor.OVH),
    "release robot": release_table(Vendor.ROBOT),
    "release scaleway_em": release_table(Vendor.SCALEWAY_EM),
}


@pytest.mark.parametrize("name", list(TABLES))
def test_every_table_is_closed_and_each_state_has_a_budget_of_its_own(name: str) -> None:
    table = TABLES[name]
    check_table(table)
    budgets = [row.budget for row in table.values()]
    assert len(budgets) == len(set(budgets)), f"{name}: states share a budget: {budgets}"
    assert all(budget in DEFAULT_TIMEOUTS for budget in budgets)
    assert all(row.state == state for state, row in table.items())


def test_check_table_refuses_a_dangling_state() -> None:
    with pytest.raises(ValueError, match="A leads to NOWHERE"):
        check_table({"A": Row("A", scripted(), "a", "NOWHERE", "A")})


# --- the Robot install resumes where it stopped ---------------------------------------------------------


@dataclass
class FakeRobot:
    """A RescueInstaller: records its calls; the activation announces `announced`; the resets listed
    in `lost` (by their order) were carried out but their answer was lost."""

    calls: list[tuple[str, str]] = field(default_factory=list)
    announced: tuple[str, ...] = ("SHA256:rescue",)
    lost: tuple[int, ...] = ()
    resets: int = 0
    armed: bool = False  # an activation the next boot has not consumed yet

    def register_ssh_key(self, name: str, public_key: str) -> str:
        self.calls.append(("register_ssh_key", name))
        return "aa:bb"

    def rescue_state(self, box_id: str) -> RescueInfo:
        # Read only where Robot announced no key and the box did not answer before the reset.
        assert not self.announced, "the install flow reads the activation's answer, not the rescue state"
        self.calls.append(("rescue_state", box_id))
        return RescueInfo(box_id, None, self.armed, (), (), password=None)

    def activate_rescue(self, box_id: str, key_fingerprint: str) -> RescueInfo:
        self.calls.append(("activate_rescue", box_id))
        self.armed = True
        return RescueInfo(box_id, None, True, (key_fingerprint,), self.announced, password="rescue-pw")

    def reset(self, box_id: str, kind: str = "hw", *, verify: Callable[[], bool] | None = None) -> None:
        self.calls.append(("reset", kind))
        self.resets += 1
        self.armed = False  # the boot it causes consumes the activation (a lost answer's too)
        if self.resets in self.lost:
            raise OutcomeUnknownError(
                vendor="robot", call="POST /reset/{server-number}", message="read timeout; may have happened"
            )


class FakeSettings:
    fleet_public_key = "ssh-ed25519 AAAAkey"
    fleet_private_key = "not used: run_script is replaced"


@pytest.fixture
def robot_run(world: World, monkeypatch: pytest.MonkeyPatch) -> tuple[World, FakeRobot, list[Any], list[str]]:
    """The install rows' handlers with a fake Robot, host keys answered from a script, run_script
    recorded: what the box answers with on each probe is `keys` (consumed in turn, the last repeats): a
    SHA256 fingerprint, or a (SHA256, MD5) pair."""
    robot = FakeRobot()
    keys: list[Any] = []
    scripts: list[str] = []

    def probe(_target: SshTarget, timeout: float) -> tuple[str, str]:
        key = keys.pop(0) if len(keys) > 1 else keys[0]
        return key if isinstance(key, tuple) else (key, "")

    def run_script(_target: SshTarget, script: str, **kwargs: Any) -> Any:
        scripts.append(f"{kwargs['step']} pinned {kwargs['expected_host_key']}")
        disks = [{"name": name, "size": 1000, "type": "disk"} for name in ("sda", "sdb")]
        lsblk = json.dumps({"blockdevices": disks})
        return type("R", (), {"output_tail": lsblk})()

    monkeypatch.setattr(robot_install, "fetch_host_key_forms", probe)
    monkeypatch.setattr(robot_install, "run_script", run_script)
    monkeypatch.setattr(robot_install, "render_postinstall", lambda pins: "#!/bin/sh\n")
    world.run.vendor, world.run.box_id, world.run.box_label = Vendor.ROBOT, "2345601", "robot box 2345601"
    world.run.extra.update(
        client=robot,
        settings=FakeSettings(),
        target=SshTarget("127.0.0.1", 22, "root"),
        pins=None,
        hostname="runners-linux-2345601",
    )
    world.run.timeout = Timeouts({"poll_interval": 3})
    return world, robot, keys, scripts


def install(world: World, first: str = "RESCUE_BOOT", progress: Progress | None = None) -> Progress:
    table = robot_install.install_rows(then=DONE)
    return Runner(table, world.run, world.record, progress or world.progress, Phase.ADOPTING).start(first)


def test_the_robot_install_from_the_start(robot_run: tuple[World, FakeRobot, list[Any], list[str]]) -> None:
    world, robot, keys, scripts = robot_run
    # The old OS, then (after the reset) not answering twice, then the rescue system; then the new OS.
    keys += ["SHA256:old", "SHA256:old", "", "", "SHA256:rescue", "SHA256:rescue", "", "SHA256:installed"]
    done = install(world)
    assert robot.calls == [
        ("register_ssh_key", fleet_key_name(FakeSettings.fleet_public_key)),
        ("activate_rescue", "2345601"),
        ("reset", "hw"),
        ("reset", "hw"),
    ]
    # The rescue session is pinned to the key Robot announced when the rescue boot was armed.
    assert scripts == ["lsblk pinned SHA256:rescue", "installimage pinned SHA256:rescue"]
    assert done.facts == {
        "host_key_before": "SHA256:old",
        "rescue_host_keys_announced": "SHA256:rescue",
        "rescue_host_key": "SHA256:rescue",
        "installed_host_key": "SHA256:installed",
    }
    # Polled for the rescue system twice (0.5 s, then 1.5 times that), the new OS once (its own first look).
    assert world.clock.sleeps == [0.5, 0.75, 0.5]


def test_a_rescue_key_robot_did_not_announce_is_never_logged_in_to(
    robot_run: tuple[World, FakeRobot, list[Any], list[str]],
) -> None:
    """Issue 17.5: no trust on first use. After the reset the box answers with a key that is neither
    its old one nor one Robot announced at activation: the install stops before any login."""
    world, _, keys, scripts = robot_run
    keys += ["SHA256:old", "SHA256:old", "SHA256:someone-else"]
    with pytest.raises(MachineHostKeyMismatchError) as raised:
        install(world)
    assert raised.value.state == "WAIT_RESCUE_SSH"
    assert "SHA256:someone-else" in str(raised.value) and "SHA256:rescue" in str(raised.value)
    assert scripts == []


def test_an_announcement_in_md5_form_pins_the_key_it_names(
    robot_run: tuple[World, FakeRobot, list[Any], list[str]],
) -> None:
    """Robot does not document the form of `host_key`: an MD5 fingerprint is matched too, and the
    session is pinned to the SHA256 form of that same key."""
    world, robot, keys, scripts = robot_run
    robot.announced = ("MD5:0a:1b:2c:3d:4e:5f:60:71:82:93:a4:b5:c6:d7:e8:f9",)
    rescue = ("SHA256:rescue", "MD5:0a:1b:2c:3d:4e:5f:60:71:82:93:a4:b5:c6:d7:e8:f9")
    keys += [("SHA256:old", "MD5:ff"), ("SHA256:old", "MD5:ff"), rescue, rescue, "SHA256:installed"]
    done = install(world)
    assert scripts == ["lsblk pinned SHA256:rescue", "installimage pinned SHA256:rescue"]
    assert done.facts["rescue_host_key"] == "SHA256:rescue"


def test_where_the_box_did_not_answer_before_and_robot_announced_no_key_the_old_os_is_not_taken_for_rescue(
    robot_run: tuple[World, FakeRobot, list[Any], list[str]],
) -> None:
    """The box did not answer when the install began (a blip), and Robot announced no rescue key:
    the old OS answering again must not pass for the rescue system (no reset, installimage on a live
    OS, every later run stuck in INSTALLIMAGE). Until the activation is consumed it is not."""
    world, robot, keys, scripts = robot_run
    robot.announced = ()
    keys += ["", "SHA256:old", "SHA256:rescue", "SHA256:rescue", "", "SHA256:installed"]
    done = install(world)
    assert [call for call in robot.calls if call[0] == "reset"] == [("reset", "hw"), ("reset", "hw")]
    assert ("rescue_state", "2345601") in robot.calls
    assert scripts == ["lsblk pinned SHA256:rescue", "installimage pinned SHA256:rescue"]
    assert done.facts["installed_host_key"] == "SHA256:installed"


def test_a_reset_whose_answer_was_lost_is_waited_for_not_sent_again(
    robot_run: tuple[World, FakeRobot, list[Any], list[str]],
) -> None:
    """The first reset's answer is lost (it happened: the rescue system comes up): the flow waits in
    WAIT_RESCUE_SSH instead of resetting again, and the reboot out of rescue is the only other reset."""
    world, robot, keys, _ = robot_run
    robot.lost = (1,)
    keys += ["SHA256:old", "SHA256:old", "", "SHA256:rescue", "SHA256:rescue", "SHA256:installed"]
    done = install(world)
    assert [call for call in robot.calls if call[0] == "reset"] == [("reset", "hw"), ("reset", "hw")]
    assert done.facts["installed_host_key"] == "SHA256:installed"
    assert any("waiting in WAIT_RESCUE_SSH instead of resetting again" in line for line in world.lines)


def test_a_create_that_died_in_installimage_resumes_there(
    robot_run: tuple[World, FakeRobot, list[Any], list[str]],
) -> None:
    world, robot, keys, scripts = robot_run
    # The record a killed create left behind: in INSTALLIMAGE, with the host keys it had seen.
    died = world.record.save(
        Progress(
            "ovh",
            "ns1",
            "kura-ovh",
            HOLDER,
            phase=Phase.ADOPTING,
            state="INSTALLIMAGE",
            attempt=1,
            facts={
                "host_key_before": "SHA256:old",
                "rescue_host_keys_announced": "SHA256:rescue",
                "rescue_host_key": "SHA256:rescue",
            },
            version=world.progress.version,
        )
    )
    keys += ["SHA256:rescue", "SHA256:installed"]  # still in rescue; after the reboot, the new OS
    done = install(world, died.state, died)
    # No rescue arming, one reset (the reboot out of rescue): the install was not started over.
    assert robot.calls == [("reset", "hw")]
    assert scripts == ["lsblk pinned SHA256:rescue", "installimage pinned SHA256:rescue"]
    assert done.attempt == 2 and done.facts["installed_host_key"] == "SHA256:installed"


@pytest.mark.parametrize("announced", ["SHA256:rescue", ""])
def test_a_reset_is_not_sent_twice_when_the_rescue_is_already_up(
    robot_run: tuple[World, FakeRobot, list[Any], list[str]], announced: str
) -> None:
    """A create that died between the reset and WAIT_RESCUE_SSH resumes at RESET: the box already
    answers with the rescue system's key (announced; or, where Robot announced none, a new one), so
    the handler completes without resetting again."""
    world, robot, keys, _ = robot_run
    world.run.facts.update(host_key_before="SHA256:old", rescue_host_keys_announced=announced)
    keys += ["SHA256:rescue"]
    row = robot_install.install_rows(then=DONE)["RESET"]
    single = {"RESET": Row("RESET", row.handler, row.budget, DONE, FAILED)}
    Runner(single, world.run, world.record, world.progress, Phase.ADOPTING).start("RESET")
    assert robot.calls == []


def test_the_install_flow_needs_a_vendor_that_boots_a_rescue_system(
    robot_run: tuple[World, FakeRobot, list[Any], list[str]],
) -> None:
    world, _, keys, _ = robot_run
    keys += ["SHA256:old"]
    world.run.extra["client"] = object()
    with pytest.raises(MachineStepError, match="object cannot boot a rescue system"):
        install(world)


def test_installimage_and_its_lsblk_share_the_states_budget(
    robot_run: tuple[World, FakeRobot, list[Any], list[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    world, _, _, _ = robot_run
    world.run.facts.update(rescue_host_key="SHA256:rescue")
    steps: list[tuple[str, float]] = []

    def run_script(_target: SshTarget, _script: str, **kwargs: Any) -> Any:
        steps.append((kwargs["step"], kwargs["step_timeout"]))
        world.clock.t += 2000  # a slow rescue system: lsblk takes most of the budget
        disks = [{"name": name, "size": 1000, "type": "disk"} for name in ("sda", "sdb")]
        return type("R", (), {"output_tail": json.dumps({"blockdevices": disks})})()

    monkeypatch.setattr(robot_install, "run_script", run_script)
    row = robot_install.install_rows(then=DONE)["INSTALLIMAGE"]
    single = {"INSTALLIMAGE": Row("INSTALLIMAGE", row.handler, row.budget, DONE, FAILED)}
    Runner(single, world.run, world.record, world.progress, Phase.ADOPTING).start("INSTALLIMAGE")
    assert DEFAULT_TIMEOUTS["installimage"] == 2700
    assert steps == [("lsblk", 2700), ("installimage", 700)]


# --- release: the reinstall ticket ------------------------------------------------------------------------


@dataclass
class FakeVendor:
    """A VendorClient's reinstall half: `states` is what install_state answers, in turn."""

    states: list[InstallState | BaseException]
    calls: list[tuple[str, Any]] = field(default_factory=list)

    def set_claim(self, box_id: str, claim: Any) -> None:
        self.calls.append(("set_claim", claim))

    def start_reinstall(self, box_id: str, **kwargs: Any) -> Reinstall:
        self.calls.append(("start_reinstall", box_id))
        return Reinstall(vendor=Vendor.OVH, box_id=box_id, task_id="4242")

    def install_state(self, box_id: str, reinstall: Reinstall | None = None) -> InstallState:
        self.calls.append(("install_state", reinstall))
        answer = self.states.pop(0) if len(self.states) > 1 else self.states[0]
        if isinstance(answer, BaseException):
            raise answer
        return answer


class FakeClaimSpec:
    fleet, token, ssh_user, os = "kura-ovh", "0123456789ab", "ubuntu", "ubuntu_24.04"


class FakeReleaseSettings:
    fleet_public_key = "ssh-ed25519 AAAAkey"
    sudo_password = SECRET


TICKET = Reinstall(vendor=Vendor.OVH, box_id="ns1", task_id="4242")


@pytest.fixture
def releasing(world: World) -> World:
    world.run.timeout = Timeouts({"poll_interval": 5})
    # The provider passes the token the box carries (the claim's stored claim_token) as "token".
    world.run.extra.update(claim=FakeClaimSpec(), settings=FakeReleaseSettings(), token=FakeClaimSpec.token)
    return world


def release(world: World, vendor: FakeVendor, first: str = "RELEASE_MARKING") -> Progress:
    world.run.extra["client"] = vendor
    return Runner(release_table(Vendor.OVH), world.run, world.record, world.progress, Phase.RELEASING).start(
        first
    )


def test_a_release_records_its_reinstall_ticket_and_follows_it(releasing: World) -> None:
    busy = TransientVendorError(vendor="ovh", call="GET /dedicated/server/{s}/task/{t}", message="HTTP 500")
    vendor = FakeVendor([InstallState.RUNNING, busy, InstallState.RUNNING, InstallState.DONE])
    release(releasing, vendor)
    assert vendor.calls == [
        ("set_claim", Claim("0123456789ab", releasing=True)),
        ("start_reinstall", "ns1"),
        *[("install_state", TICKET)] * 4,  # every poll asks about this reinstall's own task
        ("set_claim", None),
    ]
    saved = releasing.record.get("ovh", "ns1")
    assert saved is not None and json.loads(saved.facts["reinstall"]) == TICKET.to_record()
    # Polls start short and back off; a failed read is waited out within the budget.
    assert releasing.clock.sleeps == [0.5, 0.75, 1.125]


def test_the_poll_schedule_starts_short_and_backs_off_to_twelve_intervals() -> None:
    schedule = [poll_delay(n, 5) for n in range(20)]
    assert schedule[:4] == [0.5, 0.75, 1.125, 1.6875]
    assert all(b == min(a * 1.5, 60) for a, b in itertools.pairwise(schedule))
    assert schedule[-1] == 60  # capped at twelve poll intervals
    # A two-second wait is seen done within half again its time, not after a whole poll interval.
    looks, elapsed = 0, 0.0
    while elapsed < 2:
        elapsed += poll_delay(looks, 5)
        looks += 1
    assert elapsed <= 3 and looks == 3
    # Half an hour of OVH install: a few dozen reads, not hundreds.
    looks, elapsed = 0, 0.0
    while elapsed < 1800:
        elapsed += poll_delay(looks, 5)
        looks += 1
    assert looks < 45
    # A poll interval shorter than the first look (tests, the dev stack) is the first look.
    assert poll_delay(0, 0.05) == 0.05


def test_a_retried_release_follows_its_own_ticket(releasing: World) -> None:
    """The record of a release that died while waiting holds its ticket: the retried release waits for
    that reinstall and starts none."""
    releasing.run.facts["reinstall"] = json.dumps(TICKET.to_record())
    vendor = FakeVendor([InstallState.DONE])
    release(releasing, vendor, "RELEASE_WAIT_INSTALL")
    assert vendor.calls == [("install_state", TICKET), ("set_claim", None)]


def test_a_sent_reinstall_is_recorded_as_seen_once_it_reads_running(releasing: World) -> None:
    """A ticket whose install was not seen yet (Dedibox, Scaleway: no task to follow): the stale
    read just after the POST (PENDING) is waited out, the first RUNNING is recorded in the box's
    record before the next pause, and only then is a DONE this install's, for a resumed wait too."""
    sent = Reinstall(vendor=Vendor.OVH, box_id="ns1", started_running=False, baseline="before-the-post")
    seen = Reinstall(vendor=Vendor.OVH, box_id="ns1", started_running=True, baseline="before-the-post")
    releasing.run.facts["reinstall"] = json.dumps(sent.to_record())
    vendor = FakeVendor([InstallState.PENDING, InstallState.RUNNING, InstallState.RUNNING, InstallState.DONE])
    saves: list[dict[str, Any]] = []
    real_save = releasing.record.save

    def save(progress: Progress) -> Progress:
        saves.append(json.loads(progress.facts["reinstall"]))
        return real_save(progress)

    releasing.record.save = save  # type: ignore[method-assign]
    release(releasing, vendor, "RELEASE_WAIT_INSTALL")
    assert vendor.calls == [
        ("install_state", sent),
        ("install_state", sent),
        ("install_state", seen),
        ("install_state", seen),
        ("set_claim", None),
    ]
    # Entering the wait, then the ticket seen running (once), then the states after it.
    assert saves[:2] == [sent.to_record(), seen.to_record()]
    assert all(facts == seen.to_record() for facts in saves[2:])


def test_a_failed_reinstall_fails_the_release_naming_it(releasing: World) -> None:
    vendor = FakeVendor([InstallState.FAILED])
    with pytest.raises(
        MachineStepError, match=r"RELEASE_WAIT_INSTALL failed .*InstallFailed.*reinstall of ns1 failed"
    ):
        release(releasing, vendor)
    assert ("set_claim", None) not in vendor.calls  # the box stays marked releasing: nobody adopts it

    # The next release (the next `pulumi up`) starts a new reinstall, not the dead ticket's wait.
    failed = releasing.record.get("ovh", "ns1")
    assert failed is not None and failed.error_type == "InstallFailed"
    start = resume_state(release_table(Vendor.OVH), True, failed.state, failed.facts, failed.error_type)
    assert start == "RELEASE_REINSTALL"
    again = FakeVendor([InstallState.DONE])
    releasing.progress = failed
    release(releasing, again, start)
    assert again.calls == [("start_reinstall", "ns1"), ("install_state", TICKET), ("set_claim", None)]


def test_where_a_release_resumes() -> None:
    table = release_table(Vendor.OVH)
    ticket = {"reinstall": json.dumps(TICKET.to_record())}
    assert resume_state(table, False, "READY", {}) == "RELEASE_MARKING"
    assert resume_state(table, True, "RELEASE_WAIT_INSTALL", ticket) == "RELEASE_WAIT_INSTALL"
    # A record without a ticket (written before tickets were recorded): find the running install again.
    assert resume_state(table, True, "RELEASE_WAIT_INSTALL", {}) == "RELEASE_REINSTALL"
    assert resume_state(table, True, "RELEASE_CLEARING", {}) == "RELEASE_CLEARING"
    # A wait that ended on a failed or timed-out install: its ticket would only say so again.
    assert resume_state(table, True, "RELEASE_WAIT_INSTALL", ticket, "InstallFailed") == "RELEASE_REINSTALL"
    assert resume_state(table, True, "RELEASE_WAIT_INSTALL", ticket, "Timeout") == "RELEASE_REINSTALL"
    # A wait cut short any other way (the process died) follows its own ticket.
    assert resume_state(table, True, "RELEASE_WAIT_INSTALL", ticket, None) == "RELEASE_WAIT_INSTALL"
    # ... unless its reinstall was never seen running: it may have run and ended unseen, its record
    # then reading as before the POST; RELEASE_REINSTALL follows it if it runs, else sends another.
    unseen = Reinstall(vendor=Vendor.DEDIBOX, box_id="ns1", started_running=False, baseline="b")
    sent = {"reinstall": json.dumps(unseen.to_record())}
    assert resume_state(table, True, "RELEASE_WAIT_INSTALL", sent, None) == "RELEASE_REINSTALL"
    seen = {"reinstall": json.dumps(unseen.after(InstallState.RUNNING).to_record())}
    assert resume_state(table, True, "RELEASE_WAIT_INSTALL", seen, None) == "RELEASE_WAIT_INSTALL"


# --- Elastic Metal's Private Network and the Mac's bootstrap ----------------------------------------------


def test_the_join_starts_where_each_kind_needs() -> None:
    from providers.machine.states import adopt_start, join_start

    assert list(adopt_table(Vendor.SCALEWAY_EM, private_network=True)) == [
        "PN_ATTACHING",
        "PN_VLAN",
        "JOINING",
        "NODE_READY",
    ]
    assert list(adopt_table(Vendor.SCALEWAY_EM)) == ["JOINING", "NODE_READY"]
    # A Mac never has the Linux self-join in its tables.
    assert list(adopt_table(Vendor.APPLESILICON)) == ["MAC_BOOTSTRAP", "NODE_READY"]
    assert "JOINING" not in rejoin_table(Vendor.APPLESILICON)
    assert (adopt_start(Vendor.APPLESILICON), join_start(Vendor.SCALEWAY_EM, True)) == (
        "MAC_BOOTSTRAP",
        "PN_ATTACHING",
    )


def _chain(table: dict[str, Row], state: str) -> list[str]:
    """The states a flow runs through from `state` when every one succeeds."""
    states = []
    while state != DONE:
        states.append(state)
        state = table[state].on_success
    return states


def test_a_rejoin_off_a_private_network_detaches_it_first_and_an_adoption_does_not() -> None:
    from providers.machine.states import adopt_start, join_start

    moved = rejoin_table(Vendor.SCALEWAY_EM, private_network=True, detach=True)
    dropped = rejoin_table(Vendor.SCALEWAY_EM, private_network=False, detach=True)
    assert join_start(Vendor.SCALEWAY_EM, True, detach=True) == "PN_DETACHING"
    assert join_start(Vendor.SCALEWAY_EM, False, detach=True) == "PN_DETACHING"
    assert _chain(moved, "PN_DETACHING") == [
        "PN_DETACHING",
        "PN_ATTACHING",
        "PN_VLAN",
        "JOINING",
        "NODE_READY",
    ]
    assert _chain(dropped, "PN_DETACHING") == ["PN_DETACHING", "PN_DOWN", "JOINING", "NODE_READY"]
    assert (moved["PN_DETACHING"].budget, dropped["PN_DOWN"].budget) == ("pn_detaching", "pn_down")
    assert (DEFAULT_TIMEOUTS["pn_detaching"], DEFAULT_TIMEOUTS["pn_down"]) == (600, 120)
    # The same network (or none before): the join as before, no detach.
    assert _chain(rejoin_table(Vendor.SCALEWAY_EM, True), join_start(Vendor.SCALEWAY_EM, True)) == [
        "PN_ATTACHING",
        "PN_VLAN",
        "JOINING",
        "NODE_READY",
    ]
    # An adoption never detaches anything.
    adopt = adopt_table(Vendor.SCALEWAY_EM, private_network=True)
    assert _chain(adopt, adopt_start(Vendor.SCALEWAY_EM, True)) == [
        "PN_ATTACHING",
        "PN_VLAN",
        "JOINING",
        "NODE_READY",
    ]


def test_an_elastic_metal_release_detaches_before_it_reinstalls() -> None:
    em = release_table(Vendor.SCALEWAY_EM)
    assert _chain(em, "RELEASE_MARKING") == [
        "RELEASE_MARKING",
        "RELEASE_PN_DETACHING",
        "RELEASE_REINSTALL",
        "RELEASE_WAIT_INSTALL",
        "RELEASE_CLEARING",
    ]
    assert (em["RELEASE_PN_DETACHING"].budget, DEFAULT_TIMEOUTS["release_pn_detaching"]) == (
        "release_pn_detaching",
        600,
    )
    # No other vendor's release detaches anything.
    for vendor in (Vendor.OVH, Vendor.DEDIBOX, Vendor.APPLESILICON, Vendor.ROBOT):
        assert "RELEASE_PN_DETACHING" not in release_table(vendor)
    # A release stopped there resumes there.
    assert resume_state(em, True, "RELEASE_PN_DETACHING", {}, "VendorUnavailable") == "RELEASE_PN_DETACHING"


def test_every_state_of_the_docs_table_has_a_budget_of_its_own() -> None:
    from providers.machine.states import table_rows

    budgets: dict[str, set[str]] = {}
    for _flow, _vendors, row in table_rows():
        budgets.setdefault(row.budget, set()).add(row.state)
    assert {budget: states for budget, states in budgets.items() if len(states) > 1} == {}
    states = {row.state for _, _, row in table_rows()}
    assert {"PN_DETACHING", "PN_DOWN", "RELEASE_PN_DETACHING"} <= states


@dataclass
class FakeScaleway:
    """An Elastic Metal / Apple silicon client: attachments, detachments and the server's list of
    attachments answered in turn, one Mac login."""

    attachments: list[Any] = field(default_factory=list)
    detachments: list[str] = field(default_factory=list)
    listings: list[list[tuple[str, str]]] = field(default_factory=list)
    user: str = "m1"
    calls: list[str] = field(default_factory=list)

    def attach_private_network(self, box_id: str, network: str) -> Any:
        from providers.scaleway_sdk import Attachment

        self.calls.append(f"attach {box_id} {network}")
        status, vlan = self.attachments.pop(0)
        return Attachment(network, status, vlan)

    def detach_private_network(self, box_id: str, network: str) -> Any:
        from providers.scaleway_sdk import Attachment

        self.calls.append(f"detach {box_id} {network}")
        return Attachment(network, self.detachments.pop(0), None)

    def private_networks(self, box_id: str) -> Any:
        from providers.scaleway_sdk import Attachment

        self.calls.append(f"networks {box_id}")
        return [Attachment(network, status, 1000) for network, status in self.listings.pop(0)]

    def login(self, box_id: str) -> Any:
        from providers.applesilicon.models import MacLogin

        return MacLogin(user=self.user, sudo_password="scaleway-chose-this")


class ScalewaySettings:
    fleet_private_key = "not used: run_script is replaced"
    sudo_password = SECRET

    def __init__(self, client: FakeScaleway) -> None:
        self.client = client

    def vendor_client(self, vendor: Vendor) -> FakeScaleway:
        return self.client

    def secret(self, key: str, why: str) -> str:
        return "kubeconfig-text"

    def kube_api(self) -> str:
        return "api"


def _machine(vendor: str, **overrides: Any) -> Any:
    from providers.machine.spec import parse_machine
    from tests.providers.test_machine_spec import joined

    box = "fr-par-3/a5000000-0000-4000-8000-000000000001"
    return parse_machine(
        {
            **joined(),
            "vendor": vendor,
            "box_id": box,
            "provider_id": f"applesilicon://{box}",
            "fleet": "runners-macos",
            "ssh_user": "m1",
            **overrides,
        }
    )


@pytest.fixture
def scripts(world: World, monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, dict[str, Any]]]:
    from providers.machine import states

    ran: list[tuple[str, dict[str, Any]]] = []

    def run_script(_target: SshTarget, script: str, **kwargs: Any) -> Any:
        ran.append((script, kwargs))
        return type("R", (), {"host_key_fingerprint": "SHA256:box"})()

    monkeypatch.setattr(states, "run_script", run_script)
    monkeypatch.setattr(states.kube, "create_bootstrap_token", lambda *a, **k: None)
    monkeypatch.setattr(states.kube, "cluster_ca_pem", lambda kubeconfig: "-----BEGIN CERTIFICATE-----\nx\n")
    world.run.timeout = Timeouts({"poll_interval": 3})
    return ran


def test_the_vlan_comes_up_once_the_attachment_names_it(
    world: World, scripts: list[tuple[str, dict[str, Any]]]
) -> None:
    client = FakeScaleway(attachments=[("option_enabling", None), ("attaching", None), ("attached", 212)])
    world.run.extra.update(
        settings=ScalewaySettings(client),
        spec=_machine("scaleway_em", private_network="9e700000-0000-4000-8000-000000000001"),
        target=SshTarget("127.0.0.1", 22, "ubuntu"),
    )
    table = adopt_table(Vendor.SCALEWAY_EM, private_network=True)
    rows = {k: table[k] for k in ("PN_ATTACHING", "PN_VLAN")}
    rows["PN_VLAN"] = Row("PN_VLAN", table["PN_VLAN"].handler, "pn_vlan", DONE, "PN_VLAN")
    done = start(world, rows, "PN_ATTACHING")
    assert done.facts["pn_vlan"] == "212"
    assert world.clock.sleeps == [3, 3]  # polled until the attachment had its VLAN
    ((script, kwargs),) = scripts
    assert "PN_VLAN=212\nPN_INTERFACE=pn0\n" in script
    assert kwargs["env_secrets"] == {"SUDO_PASSWORD": SECRET}


def test_a_failed_attachment_fails_the_join(world: World, scripts: list[tuple[str, dict[str, Any]]]) -> None:
    from providers.machine.states import pn_attaching

    world.run.extra.update(
        settings=ScalewaySettings(FakeScaleway(attachments=[("error", None)])),
        spec=_machine("scaleway_em", private_network="9e700000-0000-4000-8000-000000000001"),
    )
    result = pn_attaching(world.run)
    assert isinstance(result, Failed) and result.error_type == "PrivateNetworkError"


PN_A = "9e700000-0000-4000-8000-000000000001"
PN_B = "9e700000-0000-4000-8000-000000000003"
EM_BOX = "fr-par-2/e1000000-0000-4000-8000-000000000001"


def _em_world(world: World, client: FakeScaleway, network: str | None) -> None:
    world.run.extra.update(
        settings=ScalewaySettings(client),
        spec=_machine(
            "scaleway_em", box_id=EM_BOX, provider_id=f"scaleway://{EM_BOX}", private_network=network
        ),
        target=SshTarget("127.0.0.1", 22, "ubuntu"),
        old_private_network=PN_A,
    )
    # The box's record still holds the old attachment's VLAN.
    world.progress = replace(world.progress, facts={"pn_vlan": "1000"})


def test_a_move_detaches_the_old_network_until_gone_then_brings_the_new_vlan_up(
    world: World, scripts: list[tuple[str, dict[str, Any]]]
) -> None:
    from providers.scaleway_sdk import DETACHED

    client = FakeScaleway(
        detachments=["detaching", "detaching", DETACHED],
        attachments=[("attaching", 1001), ("attached", 1001)],
    )
    _em_world(world, client, PN_B)
    table = rejoin_table(Vendor.SCALEWAY_EM, private_network=True, detach=True)
    rows = {k: table[k] for k in ("PN_DETACHING", "PN_ATTACHING", "PN_VLAN")}
    rows["PN_VLAN"] = replace(table["PN_VLAN"], on_success=DONE)
    done = start(world, rows, "PN_DETACHING")

    assert client.calls == [f"detach {EM_BOX} {PN_A}"] * 3 + [f"attach {EM_BOX} {PN_B}"] * 2
    # Polled short first (Run.poll_delay), then the attachment at the poll interval.
    assert world.clock.sleeps == [0.5, 0.75, 3]
    assert done.facts["pn_vlan"] == "1001"
    ((script, kwargs),) = scripts
    assert "PN_VLAN=1001\nPN_INTERFACE=pn0\n" in script
    assert kwargs["step"] == "pn-vlan"
    assert [state for phase, state in world.saved if phase == Phase.ADOPTING][:3] == [
        "PN_DETACHING",
        "PN_ATTACHING",
        "PN_VLAN",
    ]
    assert any(f"left Private Network {PN_A}" in line for line in world.lines)


def test_a_removal_detaches_the_network_then_takes_pn0_down(
    world: World, scripts: list[tuple[str, dict[str, Any]]]
) -> None:
    from providers.scaleway_sdk import DETACHED

    client = FakeScaleway(detachments=[DETACHED])
    _em_world(world, client, None)
    table = rejoin_table(Vendor.SCALEWAY_EM, private_network=False, detach=True)
    rows = {"PN_DETACHING": table["PN_DETACHING"], "PN_DOWN": replace(table["PN_DOWN"], on_success=DONE)}
    done = start(world, rows, "PN_DETACHING")

    assert client.calls == [f"detach {EM_BOX} {PN_A}"]
    assert world.clock.sleeps == []
    assert done.facts["pn_vlan"] == ""  # no VLAN is the box's any more
    ((script, kwargs),) = scripts
    assert script.startswith(
        "# parameters, rendered by providers/ssh/privnet.py\nPN_STATE=down\nPN_INTERFACE=pn0\n"
    )
    assert (kwargs["step"], kwargs["env_secrets"]) == ("pn-down", {"SUDO_PASSWORD": SECRET})
    assert kwargs["step_timeout"] == DEFAULT_TIMEOUTS["pn_down"]


def test_an_attachment_scaleway_locked_fails_the_detach(world: World) -> None:
    from providers.machine.states import pn_detaching

    _em_world(world, FakeScaleway(detachments=["locked"]), None)
    result = pn_detaching(world.run)
    assert isinstance(result, Failed) and result.error_type == "PrivateNetworkLocked"
    assert PN_A in result.message


def test_the_release_detaches_every_private_network_of_the_box(world: World) -> None:
    from providers.machine.release import release_pn_detaching

    client = FakeScaleway(
        listings=[[(PN_A, "attached"), (PN_B, "detaching")], []],
        detachments=["detaching", "detaching"],
    )
    world.run.extra.update(client=client)
    world.run.timeout = Timeouts({"poll_interval": 3})
    row = release_table(Vendor.SCALEWAY_EM)["RELEASE_PN_DETACHING"]
    Runner(
        {row.state: replace(row, on_success=DONE)}, world.run, world.record, world.progress, Phase.RELEASING
    ).start(row.state)
    assert client.calls == ["networks ns1", "detach ns1 " + PN_A, "detach ns1 " + PN_B, "networks ns1"]
    assert world.clock.sleeps == [0.5]
    # A box on no network: one read, nothing written.
    nothing = FakeScaleway(listings=[[]])
    world.run.extra.update(client=nothing)
    assert release_pn_detaching(world.run) == Complete()
    assert nothing.calls == ["networks ns1"]


def test_a_registering_mac_gets_a_bootstrap_token_and_scaleways_sudo_password_on_stdin(
    world: World, scripts: list[tuple[str, dict[str, Any]]]
) -> None:
    from providers.machine.states import mac_bootstrap

    agent = {"url": "https://releases.example/tart-kubelet", "sha256": "a" * 64, "registers_node": True}
    world.run.extra.update(
        settings=ScalewaySettings(FakeScaleway()),
        spec=_machine("applesilicon", node_agent=agent, api_server="https://cp.example:6443"),
        target=SshTarget("127.0.0.1", 22, "m1"),
    )
    result = mac_bootstrap(world.run)
    assert result == Complete({"pin": "SHA256:box", "node_registered": "true"})
    ((script, kwargs),) = scripts
    assert "REGISTERS_NODE=true\nAPI_SERVER=https://cp.example:6443\n" in script
    assert kwargs["env_secrets"]["SUDO_PASSWORD"] == "scaleway-chose-this"
    assert len(kwargs["env_secrets"]["BOOTSTRAP_TOKEN"]) == 23
    assert "scaleway-chose-this" in world.run.secrets  # scrubbed from whatever a failure says
    assert kwargs["step"] == "macos-bootstrap" and "apt-get" not in script


def test_a_mac_that_logs_in_as_another_user_is_refused(
    world: World, scripts: list[tuple[str, dict[str, Any]]]
) -> None:
    from providers.machine.states import mac_bootstrap

    agent = {"url": "https://releases.example/tart-kubelet", "sha256": "a" * 64, "registers_node": False}
    world.run.extra.update(
        settings=ScalewaySettings(FakeScaleway(user="admin")),
        spec=_machine("applesilicon", node_agent=agent),
        target=SshTarget("127.0.0.1", 22, "m1"),
    )
    result = mac_bootstrap(world.run)
    assert isinstance(result, Failed) and result.error_type == "WrongLogin"
    assert scripts == []


# --- a step is given what is left of its state's budget -------------------------------------------------


def test_an_ssh_step_started_with_40s_left_gets_a_40s_timeout(
    world: World, scripts: list[tuple[str, dict[str, Any]]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """PN_VLAN's 120 s: the first try's connection fails after 70 s, the retry starts 10 s later with
    40 s left, and its script gets 40 s, not another 120."""
    from providers.machine import states

    timeouts: list[float] = []

    def run_script(_target: SshTarget, _script: str, **kwargs: Any) -> Any:
        timeouts.append(kwargs["step_timeout"])
        if len(timeouts) == 1:
            world.clock.t += 70
            raise SshConnectError("connection refused")
        return type("R", (), {"host_key_fingerprint": "SHA256:box"})()

    monkeypatch.setattr(states, "run_script", run_script)
    world.run.extra.update(
        settings=ScalewaySettings(FakeScaleway()),
        spec=_machine("scaleway_em", private_network="9e700000-0000-4000-8000-000000000001"),
        target=SshTarget("127.0.0.1", 22, "ubuntu"),
    )
    world.run.facts["pn_vlan"] = "212"
    row = adopt_table(Vendor.SCALEWAY_EM, private_network=True)["PN_VLAN"]
    assert (row.budget, DEFAULT_TIMEOUTS["pn_vlan"], DEFAULT_TIMEOUTS["retry_delay"]) == ("pn_vlan", 120, 10)
    start(world, {"PN_VLAN": Row("PN_VLAN", row.handler, row.budget, DONE, "PN_VLAN")}, "PN_VLAN")
    assert timeouts == [120, 40]
    assert world.clock.sleeps == [10]


def test_a_drain_gets_what_is_left_of_the_draining_budget(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    from providers.machine import states

    timeouts: list[float] = []

    def drain(_api: Any, node: str, *, timeout: float, sleep: Callable[[float], None]) -> None:
        timeouts.append(timeout)
        if len(timeouts) == 1:
            world.clock.t += 500
            raise states.kube.KubeError(f"evict a Pod of {node}: 500")

    monkeypatch.setattr(states.kube, "drain", drain)
    world.run.timeout = Timeouts({})
    world.run.extra.update(kube="api", spec=type("Spec", (), {"node_name": "n1"})())
    row = leave_table()["DRAINING"]
    start(
        world, {"DRAINING": Row("DRAINING", row.handler, row.budget, DONE, "DRAINING", retries=1)}, "DRAINING"
    )
    assert timeouts == [600, 90]
