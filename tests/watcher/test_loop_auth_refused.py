"""The watcher after the vendor refused its credential (AuthError): it leaves the vendor alone for
longer than Robot's 10-minute block of the source IP after 3 failed logins, alerts, and resumes on
the first read that succeeds. Kubernetes is a pair of fixed listers here; the clock is the loop's own,
injected, so every poll and vendor read happens at a time the test names."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import pytest

from providers.errors import AuthError
from providers.retry import PollPolicy, RetryPolicy
from providers.robot.client import RobotClient

# The in-process vendorsim with a clock the test moves (tests/vendorsim/conftest.py), as `robot_sim`.
from tests.vendorsim.conftest import Served
from tests.vendorsim.conftest import served as robot_sim  # noqa: F401
from watcher.decision import NodeView, PodView
from watcher.loop import AUTH_REFUSED_PAUSE_SECONDS, FailoverWatcher, WatcherSettings

IP = "198.51.100.30"
A, B = "2345601", "2345602"
NODES = [NodeView("node-a", A, ready=True), NodeView("node-b", B, ready=True)]
PODS = [PodView("demux-a", "node-a", ready=True), PodView("demux-b", "node-b", ready=True)]
REFUSED = "robot: GET /failover/{ip} [198.51.100.30] failed (HTTP 401 UNAUTHORIZED): Unauthorized"


def refused(call: str = "GET /failover/{ip}") -> AuthError:
    return AuthError(
        vendor="robot", call=call, subject=IP, status=401, code="UNAUTHORIZED", message="Unauthorized"
    )


@dataclass
class Clock:
    t: float = 0.0

    def __call__(self) -> float:
        return self.t


@dataclass
class RefusingMover:
    """Refuses the credential for its first `refusals` route reads, then answers `route`; moves are
    refused while `refuse_moves` lasts."""

    route: str | None
    refusals: int = 0
    refuse_moves: int = 0
    calls: list[tuple[float, str]] = field(default_factory=list)
    clock: Clock = field(default_factory=Clock)

    def failover_target(self, ip: str) -> str | None:
        self.calls.append((self.clock.t, "read"))
        if self.refusals:
            self.refusals -= 1
            raise refused()
        return self.route

    def move_failover(self, ip: str, box_id: str) -> None:
        self.calls.append((self.clock.t, f"move {box_id}"))
        if self.refuse_moves:
            self.refuse_moves -= 1
            raise refused("POST /failover/{ip}")
        self.route = box_id


def make_watcher(
    mover: RefusingMover, nodes: list[NodeView] = NODES, route_read_seconds: float = 0.0
) -> FailoverWatcher:
    settings = WatcherSettings(
        ip=IP, region="eu-central", node_pool="p", poll_seconds=5, route_read_seconds=route_read_seconds
    )
    return FailoverWatcher(settings, lambda: nodes, lambda: PODS, mover, clock=mover.clock)


def poll_every_5s(w: FailoverWatcher, clock: Clock, until: float) -> list[float]:
    """Poll at clock.t, clock.t + 5, ... up to `until`; the times of the polls that decided."""
    decided = []
    while clock.t <= until:
        if w.poll_once() is not None:
            decided.append(clock.t)
        clock.t += 5
    return decided


def test_the_pause_outlasts_robots_block_of_the_source_ip() -> None:
    assert AUTH_REFUSED_PAUSE_SECONDS == 660 > 10 * 60
    assert WatcherSettings(ip=IP, region="r", node_pool="p").auth_refused_pause_seconds == 660


def test_a_refused_credential_pauses_vendor_reads_for_eleven_minutes_and_alerts(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """OVH and Dedibox read the route every poll (5 s here): after a refusal, the next vendor call is
    660 s later, whatever the polls in between; a read that succeeds puts the loop back to every poll."""
    mover = RefusingMover(route=A, refusals=2)
    w = make_watcher(mover)
    with caplog.at_level(logging.INFO, logger="watcher"):
        decided = poll_every_5s(w, mover.clock, until=1330)
    assert mover.calls == [(0, "read"), (660, "read"), (1320, "read"), (1325, "read"), (1330, "read")]
    assert decided == [1320, 1325, 1330]
    alerts = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert (
        alerts
        == [
            f"failover {IP}: ALERT vendor credential refused (reading the route); "
            f"not calling the vendor again for 660s: {REFUSED}"
        ]
        * 2
    )
    assert f"failover {IP}: the vendor accepts the credential again" in caplog.messages
    # Between the refusals the loop keeps polling Kubernetes and says when it reads the vendor next.
    assert (
        f"failover {IP}: route unknown (a read or move failed): next vendor read in 655s" in caplog.messages
    )


def test_a_budgeted_robot_watcher_waits_the_pause_not_its_read_period() -> None:
    """Robot's watcher reads every 72 s; a refused read waits 660 s, not 72, then reads every 72 s."""
    mover = RefusingMover(route=A, refusals=1)
    w = make_watcher(mover, route_read_seconds=72)
    assert poll_every_5s(w, mover.clock, until=735) == list(range(660, 736, 5))
    assert mover.calls == [(0, "read"), (660, "read"), (735, "read")]


def test_a_move_refused_for_the_credential_is_tried_again_after_the_pause(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Box A is cordoned: the move to B is decided at once. Its refusal is no failed move (no doubling
    wait): the vendor is left alone for the pause, then read, and the move made."""
    cordoned = [NodeView("node-a", A, ready=True, unschedulable=True), NODES[1]]
    mover = RefusingMover(route=A, refuse_moves=1)
    w = make_watcher(mover, nodes=cordoned)
    with caplog.at_level(logging.ERROR, logger="watcher"):
        decided = poll_every_5s(w, mover.clock, until=665)
    assert mover.calls == [(0, "read"), (0, f"move {B}"), (660, "read"), (660, f"move {B}"), (665, "read")]
    assert decided == [0, 660, 665]
    assert mover.route == B
    assert caplog.messages == [
        f"failover {IP}: ALERT vendor credential refused (moving to {B}); not calling the vendor again "
        f"for 660s: robot: POST /failover/{{ip}} [198.51.100.30] failed (HTTP 401 UNAUTHORIZED): Unauthorized"
    ]


# --- against the simulated Robot: a real RobotClient with a wrong password ------------------------------


def robot_client(served: Served, password: str) -> RobotClient:
    return RobotClient(
        api_url=f"{served.url}/robot",
        username=served.inventory.credentials.robot.username,
        password=password,
        retry=RetryPolicy(max_attempts=3, base_delay=0.01, max_delay=0.02),
        poll=PollPolicy(first=0.01, max_interval=0.01),
        sleep=lambda _: None,
    )


@dataclass
class SwappableMover:
    """The watcher's mover with its credential replaced mid-test (a rotated Secret)."""

    client: RobotClient

    def failover_target(self, ip: str) -> str | None:
        return self.client.failover_target(ip)

    def move_failover(self, ip: str, box_id: str) -> None:
        self.client.move_failover(ip, box_id)


def test_a_wrong_robot_password_never_has_the_watcher_hit_a_block(request: pytest.FixtureRequest) -> None:
    """Every poll 5 s, reads as Robot's budget allows (72 s). With a wrong password the watcher logs
    in once every 660 s instead of every 72 s: it is never answered by a block (vendorsim: 10 minutes
    after the third failure in a row), and the egress IP is blocked 10 minutes in 33 at most (from
    its third failure in a row, at 1320), not for good; a successful login from that IP in between
    (another stack) starts the count over. The password fixed, the first read after the pause
    succeeds and reads go back to every 72 s."""
    served: Served = request.getfixturevalue("robot_sim")
    mover = SwappableMover(robot_client(served, "not-the-password"))
    settings = WatcherSettings(
        ip=IP, region="eu-central", node_pool="p", poll_seconds=5, route_read_seconds=72
    )
    start = served.clock()

    def now() -> float:
        return served.clock() - start

    w = FailoverWatcher(settings, lambda: NODES, lambda: PODS, mover, clock=now)
    while now() < 4 * 660:
        w.poll_once()
        served.clock.advance(5)
    mover.client = robot_client(served, served.inventory.credentials.robot.password)
    while now() <= 4 * 660 + 75:
        w.poll_once()
        served.clock.advance(5)
    answered = [
        (round(c["time"] - start), c["method"], c["path"], c["status"])
        for c in served.admin("GET", "calls").json()["entries"]
    ]
    failover = f"/robot/failover/{IP}"
    assert answered == [
        (0, "GET", failover, 401),
        (660, "GET", failover, 401),
        (1320, "GET", failover, 401),  # the third in a row: the IP is blocked until 1920
        (1980, "GET", failover, 401),  # the block is over; this one counts from one again
        (2640, "GET", failover, 200),
        (2640, "GET", "/robot/server", 200),  # main IP -> server number, read once
        (2715, "GET", failover, 200),  # the first poll 72 s after
    ]
