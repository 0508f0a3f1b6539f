"""VendorMover against the vendorsim process: the watcher's decision moving a real (simulated) failover
IP over HTTP, with credentials read from files as the Secret mount provides them."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import watcher.__main__ as watcher_main
from providers.errors import AuthError
from providers.retry import HttpTimeouts, PollPolicy, RetryPolicy
from tests.providers.conftest import (
    DEV_INVENTORY,
    Vendorsim,
    start_vendorsim,
    stop_vendorsim,
    writes_since,
)
from watcher.decision import Action, NodeView, PodView
from watcher.lease import CALL_MARGIN_SECONDS
from watcher.loop import FailoverWatcher, WatcherSettings
from watcher.mover import (
    MOVER_TIMEOUTS,
    MOVER_TIMING,
    ClientTiming,
    MoverConfigError,
    VendorMover,
    build_mover,
    mover_from_env,
)

TIMING = ClientTiming(
    retry=RetryPolicy(max_attempts=2, base_delay=0.01, max_delay=0.02),
    timeouts=MOVER_TIMEOUTS,
    poll=PollPolicy(first=0.05, max_interval=0.05),
    task_timeout=10,
)
CREDENTIALS = {
    "ovh": {"ovhApplicationSecret": "dev-ovh-application-secret", "ovhConsumerKey": "dev-ovh-consumer-key"},
    "dedibox": {"dediboxSecretKey": "f24d2ad3-cea4-48c1-a6bd-1b0d15fb94c3"},
    "robot": {"robotPassword": "dev-robot-password"},
}


@pytest.fixture(scope="module")
def sim_process(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Vendorsim]:
    sim = start_vendorsim(DEV_INVENTORY, tmp_path_factory.mktemp("vendorsim"))
    try:
        yield sim
    finally:
        stop_vendorsim(sim)


@pytest.fixture
def sim(sim_process: Vendorsim) -> Vendorsim:
    sim_process.admin("POST", "/reset")
    return sim_process


def account(sim: Vendorsim, vendor: str) -> dict[str, Any]:
    return {
        "ovh": {"endpoint": f"{sim.url}/ovh/1.0", "application_key": "dev-ovh-application-key"},
        "dedibox": {
            "api_url": f"{sim.url}/dedibox",
            "project_id": "b781bdf3-6efc-4c4a-a11d-f57edf663188",
            "zones": ["fr-par-2"],
        },
        "robot": {"api_url": f"{sim.url}/robot", "username": "dev-robot-user"},
    }[vendor]


def mount(directory: Path, values: dict[str, str]) -> Path:
    """Files as a Secret volume presents them: one file per key."""
    directory.mkdir(exist_ok=True)
    for key, value in values.items():
        (directory / key).write_text(value, encoding="utf-8")
    return directory


@dataclass(frozen=True)
class Case:
    vendor: str
    ip: str
    boxes: tuple[str, str, str]  # the inventory routes `ip` to boxes[0]
    move: tuple[str, str, Any]  # the exact write moving it to boxes[1]


CASES = [
    Case(
        "ovh",
        "198.51.100.10",
        ("ns1001.ip-203-0-113.net", "ns1002.ip-203-0-113.net", "ns1003.ip-203-0-113.net"),
        ("POST", "/ovh/1.0/ip/198.51.100.10%2F32/move", {"to": "ns1002.ip-203-0-113.net"}),
    ),
    Case(
        "dedibox",
        "198.51.100.20",
        ("fr-par-2/200101", "fr-par-2/200102", "fr-par-2/200103"),
        (
            "POST",
            "/dedibox/dedibox/v1/zones/fr-par-2/failover-ips/attach",
            {"server_id": 200102, "fips_ids": [3001]},
        ),
    ),
    Case(
        "robot",
        "198.51.100.30",
        ("2345601", "2345602", "2345603"),
        ("POST", "/robot/failover/198.51.100.30", {"active_server_ip": "198.18.3.52"}),
    ),
]
BY_VENDOR = pytest.mark.parametrize("case", CASES, ids=[c.vendor for c in CASES])


def views(case: Case, ready: tuple[bool, bool, bool]) -> tuple[list[NodeView], list[PodView]]:
    nodes = [
        NodeView(name=f"kura-{i}", box_id=box, ready=is_ready)
        for i, (box, is_ready) in enumerate(zip(case.boxes, ready, strict=True))
    ]
    pods = [PodView(name=f"demux-{n.name}", node_name=n.name, ready=True) for n in nodes]
    return nodes, pods


def watcher_for(case: Case, mover: VendorMover, ready: tuple[bool, bool, bool]) -> FailoverWatcher:
    nodes, pods = views(case, ready)
    settings = WatcherSettings(ip=case.ip, region="eu-central", node_pool="kura", confirm_polls=1)
    return FailoverWatcher(settings, lambda: nodes, lambda: pods, mover)


def writes(sim: Vendorsim) -> list[tuple[str, str, Any]]:
    return [(e["method"], e["path"], e["body"]) for e in writes_since(sim, 0)]


@BY_VENDOR
def test_moves_the_ip_off_a_box_whose_node_went_not_ready(sim: Vendorsim, case: Case, tmp_path: Path) -> None:
    mover = build_mover(
        case.vendor,
        account=json.dumps(account(sim, case.vendor)),
        credentials_dir=mount(tmp_path / "creds", CREDENTIALS[case.vendor]),
        timing=TIMING,
    )
    assert mover.failover_target(case.ip) == case.boxes[0]
    decision = watcher_for(case, mover, ready=(False, True, True)).poll_once()
    assert decision is not None
    assert (decision.action, decision.target, decision.node) == (Action.MOVE, case.boxes[1], "kura-1")
    assert writes(sim) == [case.move]
    assert mover.failover_target(case.ip) == case.boxes[1]
    # The next poll finds the IP on an eligible box and keeps it there.
    again = watcher_for(case, mover, ready=(False, True, True)).poll_once()
    assert again is not None and again.action is Action.KEEP
    assert writes(sim) == [case.move]


@BY_VENDOR
def test_does_not_move_when_no_box_is_eligible(sim: Vendorsim, case: Case, tmp_path: Path) -> None:
    mover = build_mover(
        case.vendor,
        account=account(sim, case.vendor),
        credentials_dir=mount(tmp_path / "creds", CREDENTIALS[case.vendor]),
        timing=TIMING,
    )
    decision = watcher_for(case, mover, ready=(False, False, False)).poll_once()
    assert decision is not None and decision.action is Action.STAY
    assert writes(sim) == []
    assert mover.failover_target(case.ip) == case.boxes[0]


def test_a_rotated_credential_file_is_picked_up_without_restart(sim: Vendorsim, tmp_path: Path) -> None:
    wrong = "rotated-away-password-42"
    creds = mount(tmp_path / "creds", {"robotPassword": wrong + "\n"})
    mover = build_mover("robot", account=account(sim, "robot"), credentials_dir=creds, timing=TIMING)
    with pytest.raises(AuthError) as raised:
        mover.failover_target("198.51.100.30")
    assert wrong not in str(raised.value)
    mount(creds, {"robotPassword": "dev-robot-password\n"})  # an echo'd file ends in a newline
    assert mover.failover_target("198.51.100.30") == "2345601"
    assert wrong not in repr(mover) and "dev-robot-password" not in repr(mover)
    assert repr(mover) == f"VendorMover(vendor='robot', credentials_dir='{creds}')"


def test_a_missing_credential_file_names_the_file_and_key(sim: Vendorsim, tmp_path: Path) -> None:
    creds = mount(tmp_path / "creds", {"ovhApplicationSecret": "dev-ovh-application-secret"})
    mover = build_mover("ovh", account=account(sim, "ovh"), credentials_dir=creds, timing=TIMING)
    with pytest.raises(MoverConfigError) as raised:
        mover.failover_target("198.51.100.10")
    assert str(raised.value) == (
        f"credential file {creds}/ovhConsumerKey is missing: the mounted vendor credentials Secret has "
        "no key ovhConsumerKey"
    )
    mount(creds, {"ovhConsumerKey": ""})
    with pytest.raises(MoverConfigError) as empty:
        mover.failover_target("198.51.100.10")
    assert str(empty.value) == f"credential file {creds}/ovhConsumerKey is empty"
    assert writes(sim) == []


def env_for(tmp_path: Path, **overrides: str) -> dict[str, str]:
    env = {
        "FAILOVER_VENDOR": "robot",
        "FAILOVER_VENDOR_ACCOUNT": json.dumps({"api_url": "http://127.0.0.1:9/robot", "username": "u"}),
        "FAILOVER_CREDENTIALS_DIR": str(mount(tmp_path / "creds", {"robotPassword": "pw"})),
    }
    env.update(overrides)
    return {k: v for k, v in env.items() if v}


def test_mover_from_env_builds_the_vendors_mover(tmp_path: Path) -> None:
    mover = mover_from_env(env_for(tmp_path))
    assert (mover.vendor.value, mover.credentials_dir) == ("robot", tmp_path / "creds")


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ({"FAILOVER_VENDOR": ""}, "environment variable FAILOVER_VENDOR is required"),
        ({"FAILOVER_VENDOR_ACCOUNT": ""}, "environment variable FAILOVER_VENDOR_ACCOUNT is required"),
        (
            {"FAILOVER_VENDOR": "hetzner"},
            "FAILOVER_VENDOR: vendor 'hetzner' is not one of ovh, dedibox, robot, scaleway_em, applesilicon",
        ),
        ({"FAILOVER_VENDOR_ACCOUNT": "{not json"}, "FAILOVER_VENDOR_ACCOUNT: not JSON"),
        (
            {"FAILOVER_VENDOR_ACCOUNT": json.dumps({"api_url": "http://x", "user": "u"})},
            "FAILOVER_VENDOR_ACCOUNT: not a valid robot account: username: Field required; "
            "user: Extra inputs are not permitted",
        ),
        (
            {"FAILOVER_CREDENTIALS_DIR": "/nonexistent/tuist-failover"},
            "credentials directory /nonexistent/tuist-failover does not exist (is the Secret mounted?)",
        ),
    ],
)
def test_mover_from_env_says_what_is_wrong(tmp_path: Path, override: dict[str, str], message: str) -> None:
    with pytest.raises(MoverConfigError) as raised:
        mover_from_env(env_for(tmp_path, **override))
    assert str(raised.value) == message


def test_the_watcher_entry_point_exits_with_the_reason(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for key, value in env_for(tmp_path, FAILOVER_VENDOR_ACCOUNT="").items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("FAILOVER_VENDOR_ACCOUNT", raising=False)
    with pytest.raises(SystemExit) as raised:
        watcher_main.build_mover()
    assert raised.value.code == "watcher: environment variable FAILOVER_VENDOR_ACCOUNT is required"


def test_a_vendor_request_of_the_mover_ends_within_the_leases_call_margin(tmp_path: Path) -> None:
    """The fence lets a move's vendor call start with more than 20 s of the Lease left
    (watcher/lease.py): one request of the mover's clients takes at most 3 s to connect and 12 s to
    answer, so it lands before any contender could take the Lease over."""
    assert HttpTimeouts(connect=3.0, read=12.0) == MOVER_TIMEOUTS
    assert ClientTiming(timeouts=MOVER_TIMEOUTS) == MOVER_TIMING  # retries, polls, task timeout: the defaults
    assert MOVER_TIMEOUTS.connect + MOVER_TIMEOUTS.read == 15.0 < CALL_MARGIN_SECONDS == 20.0
    # The watcher's mover (no timing given) builds its clients on them.
    mover = mover_from_env(env_for(tmp_path))
    assert mover._client()._timeouts == MOVER_TIMEOUTS  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("timeouts", "message"),
    [
        (HttpTimeouts(), "10s to connect + 30s to answer = 40s"),  # the clients' default
        (HttpTimeouts(connect=5.0, read=15.0), "5s to connect + 15s to answer = 20s"),
    ],
)
def test_a_mover_whose_requests_could_outlast_the_call_margin_is_refused(
    tmp_path: Path, timeouts: HttpTimeouts, message: str
) -> None:
    with pytest.raises(MoverConfigError) as raised:
        mover_from_env(env_for(tmp_path), timing=ClientTiming(timeouts=timeouts))
    assert str(raised.value) == (
        f"the mover's HTTP timeouts ({message}) must end within the lease's call margin (20s)"
    )
