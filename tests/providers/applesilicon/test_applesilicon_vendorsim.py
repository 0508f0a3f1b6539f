"""AppleSiliconClient against the vendorsim process: claim by rename, release by reinstall, under
injected faults; the audit shows the writes, and no delete."""

from __future__ import annotations

import re
import time

import pytest
import requests

from providers.applesilicon.client import AppleSiliconClient
from providers.errors import TransientVendorError, VendorInputError
from providers.retry import RetryPolicy
from providers.vendor import Claim, InstallState, Reinstall, Vendor

KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIJpselPEwoXIjP2bkKTBeNMrbyt7kCy0a+yHcLfRN+W7 tuist-dev-fleet"
SECRET = "3b0e2f4c-55d6-4c3a-9b1e-7d2f6a8c9e01"
PROJECT = "5c1e0a7d-2b3f-4e8a-9c6d-0f1e2d3c4b5a"
MAC1 = "fr-par-3/a5000000-0000-4000-8000-000000000001"
PN = "9e700000-0000-4000-8000-000000000001"


def make_client(sim, attempts: int = 12) -> AppleSiliconClient:
    return AppleSiliconClient(
        api_url=f"{sim.url}/scaleway",
        access_key="SCWDEVSIMULATOR00001",
        secret_key=SECRET,
        project_id=PROJECT,
        zones=["fr-par-1", "fr-par-3"],
        retry=RetryPolicy(max_attempts=attempts, base_delay=0.01, max_delay=0.05),
    )


def wait_for(predicate, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.05)


def release_cycle(client: AppleSiliconClient) -> str:
    fleet = {b.id: b for b in client.boxes_with_marker("tuist-macos-dev")}
    assert len(fleet) == 4 and fleet[MAC1].claim is None
    assert not client.boxes_with_marker("tuist-macos-staging")[0].id.endswith("0001")
    client.set_claim(MAC1, Claim("0123456789ab"))
    assert client.get_box(MAC1).name == "tuist-macos-dev-1--c-0123456789ab"
    before = client.login(MAC1).sudo_password
    client.set_claim(MAC1, Claim("0123456789ab", releasing=True))
    ticket = client.start_reinstall(
        MAC1, hostname="ignored", ssh_public_key=KEY, user_login="m1", user_password="ignored"
    )
    assert client.install_state(MAC1, ticket) is InstallState.RUNNING
    client.wait_reinstall(ticket, timeout=10)
    client.set_claim(MAC1, None)
    box = client.get_box(MAC1)
    assert (box.name, box.claim) == ("tuist-macos-dev-1", None)
    after = client.login(MAC1).sudo_password
    assert after and after != before  # Scaleway set a new one
    return after


def test_the_release_cycle_against_vendorsim(vendorsim) -> None:
    vendorsim.admin("POST", "/timings", json={"task_seconds": 3})  # still running when read, however loaded
    password = release_cycle(make_client(vendorsim))
    entries = vendorsim.admin("GET", "/audit?since=0")["entries"]
    server = "/scaleway/apple-silicon/v1alpha1/zones/fr-par-3/servers/a5000000-0000-4000-8000-000000000001"
    assert [(e["vendor"], e["method"], e["path"], e["body"]) for e in entries] == [
        ("applesilicon", "PATCH", server, {"name": "tuist-macos-dev-1--c-0123456789ab"}),
        ("applesilicon", "PATCH", server, {"name": "tuist-macos-dev-1--r-0123456789ab"}),
        ("scaleway_em", "POST", "/scaleway/iam/v1alpha1/ssh-keys", entries[2]["body"]),
        (
            "applesilicon",
            "POST",
            f"{server}/reinstall",
            {"enable_kext": False, "os_id": "0a500000-0000-4000-8000-000000000002"},
        ),
        ("applesilicon", "PATCH", server, {"name": "tuist-macos-dev-1"}),
    ]
    assert password not in requests.get(f"{vendorsim.url}/_admin/state", timeout=5).text


def test_the_release_cycle_survives_flaky_answers(vendorsim) -> None:
    vendorsim.admin(
        "POST", "/faults", json={"vendor": "applesilicon", "error_rate": 0.4, "status": 502, "seed": 11}
    )
    vendorsim.admin("POST", "/timings", json={"task_seconds": 3})  # still running when read, however loaded
    release_cycle(make_client(vendorsim, attempts=20))
    assert [e for e in vendorsim.admin("GET", "/audit?since=0")["entries"] if e["method"] == "DELETE"] == []


def test_a_second_release_follows_the_running_reinstall(vendorsim) -> None:
    client = make_client(vendorsim)
    first = client.start_reinstall(MAC1, hostname="h", ssh_public_key=KEY, user_login="m1", user_password="")
    again = client.start_reinstall(MAC1, hostname="h", ssh_public_key=KEY, user_login="m1", user_password="")
    # The first was sent (not seen running yet); the second saw it running and follows it.
    assert first == Reinstall(Vendor.APPLESILICON, MAC1, started_running=False, baseline=first.baseline)
    assert again == Reinstall(Vendor.APPLESILICON, MAC1, started_running=True)
    entries = vendorsim.admin("GET", "/audit?since=0")["entries"]
    assert [e["path"] for e in entries if e["path"].endswith("/reinstall")] == [
        "/scaleway/apple-silicon/v1alpha1/zones/fr-par-3/servers/a5000000-0000-4000-8000-000000000001/reinstall"
    ]


def test_a_mac_rebooted_from_the_console_is_reinstalled_once_ready_not_followed(vendorsim) -> None:
    """The review's case: an operator rebooted a hung Mac, then the release came. `rebooting` is no
    reinstall: nothing is sent while it lasts, the retry once the Mac is `ready` sends the reinstall,
    and the Mac comes back wiped (a new sudo password), DONE only after that."""
    vendorsim.admin("POST", "/timings", json={"task_seconds": 3})  # the reboot outlasts the first try
    client = make_client(vendorsim)
    before = client.login(MAC1).sudo_password
    zone, sid = MAC1.split("/")
    server = f"/scaleway/apple-silicon/v1alpha1/zones/{zone}/servers/{sid}"
    rebooted = requests.post(
        f"{vendorsim.url}{server}/reboot", json={}, headers={"X-Auth-Token": SECRET}, timeout=10
    )
    assert rebooted.json()["status"] == "rebooting"
    with pytest.raises(TransientVendorError, match="the Mac is rebooting") as raised:
        client.start_reinstall(MAC1, hostname="h", ssh_public_key=KEY, user_login="m1", user_password="")
    assert raised.value.maybe_applied is False
    assert client.install_state(MAC1) is InstallState.PENDING
    entries = vendorsim.admin("GET", "/audit?since=0")["entries"]
    assert [(e["method"], e["path"]) for e in entries] == [("POST", f"{server}/reboot")]

    wait_for(lambda: client.get_box(MAC1).state == "ready")
    assert client.login(MAC1).sudo_password == before  # a reboot wipes nothing
    ticket = client.start_reinstall(MAC1, hostname="h", ssh_public_key=KEY, user_login="m1", user_password="")
    assert client.install_state(MAC1, ticket) is InstallState.RUNNING
    client.wait_reinstall(ticket, timeout=10)
    assert client.install_state(MAC1, ticket) is InstallState.DONE
    assert client.login(MAC1).sudo_password != before
    entries = vendorsim.admin("GET", "/audit?since=0")["entries"]
    assert [(e["method"], e["path"], e["status"]) for e in entries] == [
        ("POST", f"{server}/reboot", 200),
        ("POST", "/scaleway/iam/v1alpha1/ssh-keys", 200),
        ("POST", f"{server}/reinstall", 200),
    ]


def test_a_reinstall_whose_answer_is_lost_is_read_back_not_sent_twice(vendorsim) -> None:
    vendorsim.admin(
        "POST",
        "/faults",
        json={
            "vendor": "applesilicon",
            "route": "/scaleway/apple-silicon/v1alpha1/zones/*/servers/*/reinstall",
            "method": "POST",
            "error_rate": 1,
            "count": 1,
            "status": 503,
            "answer": "lost",
        },
    )
    client = make_client(vendorsim)
    ticket = client.start_reinstall(MAC1, hostname="h", ssh_public_key=KEY, user_login="m1", user_password="")
    client.wait_reinstall(ticket, timeout=10)
    entries = vendorsim.admin("GET", "/audit?since=0")["entries"]
    assert [(e["method"], e["status"]) for e in entries if e["path"].endswith("/reinstall")] == [
        ("POST", 200)
    ]


def test_a_failed_reinstall_reads_failed(vendorsim) -> None:
    vendorsim.admin("POST", "/faults", json={"task_failure": {"kind": "applesilicon.reinstall", "count": 1}})
    client = make_client(vendorsim)
    client.start_reinstall(MAC1, hostname="h", ssh_public_key=KEY, user_login="m1", user_password="")
    wait_for(lambda: client.install_state(MAC1) is not InstallState.RUNNING)
    assert client.install_state(MAC1) is InstallState.FAILED


def test_a_pin_to_a_retired_image_is_refused_before_anything_is_written(vendorsim) -> None:
    client = make_client(vendorsim)
    with pytest.raises(VendorInputError, match=re.escape("macos-tahoe-26.3")):
        client.start_reinstall(
            MAC1,
            hostname="h",
            ssh_public_key=KEY,
            user_login="m1",
            user_password="",
            os_label="macos-tahoe-26.3",
        )
    assert vendorsim.admin("GET", "/audit?since=0")["entries"] == []


def test_vpc_and_private_network_converge(vendorsim) -> None:
    client = make_client(vendorsim)
    assert client.attach_private_network(MAC1, PN).status == "vpc_updating"
    wait_for(lambda: client.attach_private_network(MAC1, PN).ready)
    assert client.attach_private_network(MAC1, PN).vlan == 2000


def test_a_stale_ready_read_just_after_the_post_is_not_this_reinstalls(vendorsim) -> None:
    """The first read after the POST shows the Mac `ready` as it was (`previous_once`): the wait goes
    on until this reinstall was seen and has finished."""
    vendorsim.admin("POST", "/behaviour", json={"applesilicon.reinstall_read_after_post": "previous_once"})
    vendorsim.admin("POST", "/timings", json={"task_seconds": 2})
    client = make_client(vendorsim)
    ticket = client.start_reinstall(MAC1, hostname="h", ssh_public_key=KEY, user_login="m1", user_password="")
    assert client.install_state(MAC1, ticket) is InstallState.PENDING  # the Mac as it was
    assert str(client._server(MAC1).status) == "reinstalling"  # the second read: this reinstall runs
    client.wait_reinstall(ticket, timeout=10)
    assert str(client._server(MAC1).status) == "ready"
