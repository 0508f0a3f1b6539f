"""The vendor-neutral rules: which failures a write may be retried on, polling that backs off,
the marker limits config validation reads, and the reinstall ticket a release persists."""

from __future__ import annotations

import socket

import pytest
import requests

from providers.errors import (
    InfraError,
    OutcomeUnknownError,
    RateLimitError,
    TransientVendorError,
    VendorConfigError,
    VendorError,
    VendorInputError,
    scrub,
    transport_error,
)
from providers.retry import (
    PollPolicy,
    PollTimeout,
    RetryPolicy,
    call_guard,
    call_with_retries,
    poll,
    verified_write,
)
from providers.vendor import MARKER_LIMITS, InstallState, Reinstall, Vendor, marker_problem

FAST = RetryPolicy(max_attempts=3, base_delay=0, max_delay=0)


def transient(*, maybe_applied: bool) -> TransientVendorError:
    return TransientVendorError(
        vendor="ovh", call="POST /x", message="boom", status=503, maybe_applied=maybe_applied
    )


class Flaky:
    """Fails with `errors` in turn, then answers "ok"; counts the calls."""

    def __init__(self, *errors: Exception) -> None:
        self.errors = list(errors)
        self.calls = 0

    def __call__(self) -> str:
        self.calls += 1
        if self.errors:
            raise self.errors.pop(0)
        return "ok"


def test_a_read_is_retried_on_any_transient_failure() -> None:
    op = Flaky(transient(maybe_applied=True), transient(maybe_applied=True))
    assert call_with_retries(FAST, op, idempotent=True, sleep=lambda _: None) == "ok"
    assert op.calls == 3


def test_a_write_is_retried_only_when_it_surely_never_reached_the_vendor() -> None:
    op = Flaky(transient(maybe_applied=False))
    assert call_with_retries(FAST, op, idempotent=False, sleep=lambda _: None) == "ok"
    assert op.calls == 2

    op = Flaky(transient(maybe_applied=True))
    with pytest.raises(OutcomeUnknownError, match="the vendor may have carried the request out"):
        call_with_retries(FAST, op, idempotent=False, sleep=lambda _: None)
    assert op.calls == 1


def test_a_lost_write_is_sent_again_only_after_the_read_back_says_it_did_not_happen() -> None:
    lost = OutcomeUnknownError(vendor="robot", call="POST /reset/{n}", message="timeout")
    write = Flaky(lost)
    assert verified_write(FAST, write, lambda: "it happened", sleep=lambda _: None) == "it happened"
    assert write.calls == 1
    write = Flaky(lost)
    assert verified_write(FAST, write, lambda: None, sleep=lambda _: None) == "ok"
    assert write.calls == 2


def test_a_lost_write_the_vendor_shows_only_a_moment_later_is_not_sent_twice() -> None:
    lost = OutcomeUnknownError(vendor="dedibox", call="POST .../install", message="timeout")
    write = Flaky(lost)
    reads = iter([None, "the install, queued"])
    sleeps: list[float] = []
    policy = RetryPolicy(max_attempts=3, base_delay=2, max_delay=8)
    assert verified_write(policy, write, lambda: next(reads), sleep=sleeps.append) == "the install, queued"
    assert (write.calls, sleeps) == (1, [2])
    # Both reads say nothing happened: sent again, after the delay, and read twice each time.
    write, read_backs = Flaky(lost, lost), []
    assert verified_write(policy, write, lambda: read_backs.append(1), sleep=sleeps.append) == "ok"
    assert (write.calls, len(read_backs), sleeps[1:]) == (3, 4, [2, 4])


def test_the_call_guard_is_checked_before_every_attempt_of_every_call() -> None:
    """The failover watcher's lease check (watcher/loop.py): a retried POST the vendor never saw (a
    throttle, a refused connect) is not sent again once the guard says no."""
    never_arrived = transient(maybe_applied=False)
    post = Flaky(never_arrived, never_arrived)
    allowed = iter([True, True, False])

    def guard() -> None:
        if not next(allowed):
            raise PermissionError("the lease is lost")

    token = call_guard.set(guard)
    try:
        with pytest.raises(PermissionError, match="the lease is lost"):
            call_with_retries(FAST, post, idempotent=False, sleep=lambda _: None)
    finally:
        call_guard.reset(token)
    assert post.calls == 2
    assert call_with_retries(FAST, Flaky(), idempotent=False, sleep=lambda _: None) == "ok"  # unset: no check


def test_transport_failures_say_whether_the_request_may_have_arrived() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # nothing listens there once closed
    try:
        requests.post(f"http://127.0.0.1:{port}/", timeout=2)
    except requests.RequestException as refused:
        assert transport_error("ovh", "POST /x", refused).maybe_applied is False  # type: ignore[attr-defined]
    assert transport_error("ovh", "POST /x", requests.ConnectTimeout()).maybe_applied is False  # type: ignore[attr-defined]
    assert transport_error("ovh", "POST /x", requests.ReadTimeout()).maybe_applied is True  # type: ignore[attr-defined]


def test_poll_starts_short_and_backs_off_to_its_cap() -> None:
    sleeps: list[float] = []
    answers = iter([None, None, None, None, None, "done"])
    result = poll(
        lambda: next(answers),
        timeout=100,
        policy=PollPolicy(first=0.5, factor=2, max_interval=3),
        what="task",
        sleep=sleeps.append,
        clock=lambda: sum(sleeps),
    )
    assert (result, sleeps) == ("done", [0.5, 1, 2, 3, 3])
    sleeps.clear()
    with pytest.raises(PollTimeout, match=r"task: not reached within 4s"):
        poll(
            lambda: None,
            timeout=4,
            policy=PollPolicy(first=1, max_interval=2),
            what="task",
            sleep=sleeps.append,
            clock=lambda: sum(sleeps),
        )
    assert sum(sleeps) == 4  # the last wait is cut to what the budget has left


def test_one_error_tree() -> None:
    for error in (
        VendorError(vendor="ovh", call="GET /x", message="m"),
        RateLimitError(vendor="robot", call="GET /server", message="m", max_request=200, interval=3600),
        VendorInputError("bad id"),
        VendorConfigError("no account"),
    ):
        assert isinstance(error, InfraError)
    assert isinstance(VendorInputError("x"), ValueError)
    assert scrub("token s3cret and s3cret-longer", ["s3cret", "s3cret-longer"]) == "token *** and ***"
    assert scrub("x" * 600, []) == "x" * 500 + "..."
    assert scrub("x" * 600, [], limit=None) == "x" * 600


@pytest.mark.parametrize(
    ("vendor", "marker", "problem"),
    [
        (Vendor.OVH, "tuist-kura-production-us-east", None),
        (Vendor.OVH, "x" * 35, "ovh markers take at most 34 (a claim adds 16)"),
        (Vendor.ROBOT, "x" * 84, None),
        (Vendor.ROBOT, "tuist bm", "must consist of letters, digits"),
        (Vendor.ROBOT, "tuist--bm", "must not contain '--'"),
        (Vendor.DEDIBOX, "x" * 64, None),
        (Vendor.DEDIBOX, "tuist-claim-kura", "must not start with 'tuist-claim-'"),
        (Vendor.DEDIBOX, "", "is empty"),
        (Vendor.OVH, "tuist:kura", "must consist of"),
        (Vendor.SCALEWAY_EM, "tuist-kura-scw-dev", None),
        (
            Vendor.SCALEWAY_EM,
            "tuist-releasing-kura",
            "must not start with 'tuist-claim-' or 'tuist-releasing-'",
        ),
        (Vendor.APPLESILICON, "tuist-macos-dev-", None),
        (Vendor.APPLESILICON, "x" * 48, "applesilicon markers take at most 47 (a claim adds 16)"),
        (Vendor.APPLESILICON, "Tuist-Macos", "must consist of lowercase letters, digits and '-'"),
    ],
)
def test_marker_problems_for_config_validation(vendor: Vendor, marker: str, problem: str | None) -> None:
    found = marker_problem(vendor, marker)
    assert (found is None) if problem is None else (found is not None and problem in found)


def test_marker_limits_name_their_source_and_whether_documented() -> None:
    assert {v: (m.max_length, m.documented) for v, m in MARKER_LIMITS.items()} == {
        Vendor.OVH: (50, False),
        Vendor.DEDIBOX: (64, False),
        Vendor.ROBOT: (100, True),
        Vendor.SCALEWAY_EM: (64, False),
        Vendor.APPLESILICON: (63, False),
    }
    assert all(m.source for m in MARKER_LIMITS.values())


def test_a_reinstall_ticket_survives_a_record_round_trip() -> None:
    ticket = Reinstall(vendor=Vendor.OVH, box_id="ns1.ip-1.eu", task_id="991")
    assert ticket.to_record() == {
        "vendor": "ovh",
        "box_id": "ns1.ip-1.eu",
        "task_id": "991",
        "started_running": True,
        "baseline": None,
    }
    assert Reinstall.from_record(ticket.to_record()) == ticket
    sent = Reinstall(vendor=Vendor.DEDIBOX, box_id="fr-par-2/1", started_running=False, baseline="b")
    assert Reinstall.from_record(sent.to_record()) == sent
    # A record written before baselines existed reads as a ticket seen running, as it was then.
    old = {"vendor": "dedibox", "box_id": "fr-par-2/1", "task_id": None}
    assert Reinstall.from_record(old) == Reinstall(vendor=Vendor.DEDIBOX, box_id="fr-par-2/1")
    with pytest.raises(VendorInputError, match="not a reinstall record"):
        Reinstall.from_record({"vendor": "vultr", "box_id": "1"})


def test_a_done_counts_for_a_sent_reinstall_only_once_seen_or_changed() -> None:
    sent = Reinstall(vendor=Vendor.DEDIBOX, box_id="fr-par-2/1", started_running=False, baseline="before")
    # The previous install's `done`, read just after the POST: not this install's.
    assert sent.unseen_done(InstallState.DONE, "before") is True
    # The install record moved on: this install's.
    assert sent.unseen_done(InstallState.DONE, "after") is False
    assert sent.unseen_done(InstallState.RUNNING, "before") is False
    # A stale `failed` (the previous install ended in error) is the previous install's too.
    assert sent.unseen_done(InstallState.FAILED, "before") is True
    seen = sent.after(InstallState.RUNNING)
    assert seen == Reinstall(
        vendor=Vendor.DEDIBOX, box_id="fr-par-2/1", started_running=True, baseline="before"
    )
    assert seen.unseen_done(InstallState.DONE, "before") is False
    assert sent.after(InstallState.PENDING) is sent and seen.after(InstallState.RUNNING) is seen


def test_only_a_rescue_installer_is_taken_for_one() -> None:
    from providers.dedibox.client import DediboxClient
    from providers.robot.client import RobotClient
    from providers.vendor import rescue_installer

    robot = RobotClient(api_url="http://127.0.0.1:9", username="u", password="p")
    assert rescue_installer(robot) is robot
    dedibox = DediboxClient(api_url="http://127.0.0.1:9", secret_key="s", project_id="p", zones=["fr-par-2"])
    with pytest.raises(VendorInputError, match="DediboxClient cannot boot a rescue system"):
        rescue_installer(dedibox)
