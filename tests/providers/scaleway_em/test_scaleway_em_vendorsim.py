"""ElasticMetalClient against the vendorsim process: the whole release cycle the machine provider drives,
under injected faults, and the writes it leaves in the audit (never a delete, never a decoy)."""

from __future__ import annotations

import time

import pytest

from providers.errors import AuthError
from providers.retry import RetryPolicy
from providers.scaleway_em.client import ElasticMetalClient
from providers.vendor import Claim, InstallState, Reinstall, Vendor

KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIJpselPEwoXIjP2bkKTBeNMrbyt7kCy0a+yHcLfRN+W7 tuist-dev-fleet"
SECRET = "3b0e2f4c-55d6-4c3a-9b1e-7d2f6a8c9e01"
PROJECT = "5c1e0a7d-2b3f-4e8a-9c6d-0f1e2d3c4b5a"
DEV1 = "fr-par-2/e1000000-0000-4000-8000-000000000001"
PN = "9e700000-0000-4000-8000-000000000001"


def make_client(sim, secret: str = SECRET, attempts: int = 12) -> ElasticMetalClient:
    return ElasticMetalClient(
        api_url=f"{sim.url}/scaleway",
        access_key="SCWDEVSIMULATOR00001",
        secret_key=secret,
        project_id=PROJECT,
        zones=["fr-par-1", "fr-par-2", "nl-ams-1"],
        retry=RetryPolicy(max_attempts=attempts, base_delay=0.01, max_delay=0.05),
    )


def wait_for(predicate, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.05)


def release_cycle(client: ElasticMetalClient) -> None:
    fleet = client.boxes_with_marker("tuist-kura-scw-dev")
    assert [b.id.split("-")[-1] for b in fleet] == [
        "000000000001",
        "000000000002",
        "000000000003",
        "000000000004",
    ]
    assert fleet[3].claim == Claim("5a1ce0de0001")  # another stack's
    client.set_claim(DEV1, Claim("0123456789ab"))
    assert client.get_box(DEV1).claim == Claim("0123456789ab")
    client.set_claim(DEV1, Claim("0123456789ab", releasing=True))
    ticket = client.start_reinstall(
        DEV1, hostname="kura-scw-1", ssh_public_key=KEY, user_login="ubuntu", user_password="Sudo-9"
    )
    assert client.install_state(DEV1, ticket) is InstallState.RUNNING
    client.wait_reinstall(ticket, timeout=10)
    assert client.install_state(DEV1, ticket) is InstallState.DONE
    client.set_claim(DEV1, None)
    assert client.get_box(DEV1).tags == ("tuist-kura-scw-dev",) and client.get_box(DEV1).claim is None


def test_the_release_cycle_against_vendorsim(vendorsim) -> None:
    vendorsim.admin("POST", "/timings", json={"task_seconds": 3})  # still running when read, however loaded
    release_cycle(make_client(vendorsim))
    writes = [
        (e["method"], e["path"], e["body"]) for e in vendorsim.admin("GET", "/audit?since=0")["entries"]
    ]
    server = "/scaleway/baremetal/v1/zones/fr-par-2/servers/e1000000-0000-4000-8000-000000000001"
    assert [(m, p) for m, p, _ in writes] == [
        ("PATCH", server),
        ("PATCH", server),
        ("POST", "/scaleway/iam/v1alpha1/ssh-keys"),
        ("POST", f"{server}/install"),
        ("PATCH", server),
    ]
    assert writes[0][2] == {"tags": ["tuist-kura-scw-dev", "tuist-claim-0123456789ab"]}
    assert writes[3][2] == {
        "os_id": "05000000-0000-4000-8000-000000000001",
        "hostname": "kura-scw-1",
        "ssh_key_ids": [writes[3][2]["ssh_key_ids"][0]],
        "password": "<redacted>",
    }


def test_the_release_cycle_survives_flaky_answers(vendorsim) -> None:
    vendorsim.admin(
        "POST", "/faults", json={"vendor": "scaleway_em", "error_rate": 0.4, "status": 503, "seed": 7}
    )
    vendorsim.admin(
        "POST", "/faults", json={"vendor": "scaleway_em", "error_rate": 0.2, "status": 429, "seed": 3}
    )
    vendorsim.admin("POST", "/timings", json={"task_seconds": 3})  # still running when read, however loaded
    release_cycle(make_client(vendorsim, attempts=20))
    injected = [e for e in vendorsim.admin("GET", "/audit?since=0")["entries"] if e["method"] == "DELETE"]
    assert injected == []


def test_a_retried_release_follows_the_running_install(vendorsim) -> None:
    """A release retried after its install was accepted (the engine restarted) finds the install
    running and follows it: one install, never a second."""
    client = make_client(vendorsim)
    first = client.start_reinstall(
        DEV1, hostname="kura-scw-1", ssh_public_key=KEY, user_login="ubuntu", user_password="p"
    )
    again = client.start_reinstall(
        DEV1, hostname="kura-scw-1", ssh_public_key=KEY, user_login="ubuntu", user_password="p"
    )
    # The first was sent (not seen running yet); the second saw it running and follows it.
    assert first == Reinstall(Vendor.SCALEWAY_EM, DEV1, started_running=False, baseline=first.baseline)
    assert again == Reinstall(Vendor.SCALEWAY_EM, DEV1, started_running=True)
    client.wait_reinstall(again, timeout=10)
    installs = [
        e for e in vendorsim.admin("GET", "/audit?since=0")["entries"] if e["path"].endswith("/install")
    ]
    assert len(installs) == 1


def test_an_install_whose_answer_is_lost_is_read_back_not_sent_twice(vendorsim) -> None:
    vendorsim.admin(
        "POST",
        "/faults",
        json={
            "vendor": "scaleway_em",
            "route": "/scaleway/baremetal/v1/zones/*/servers/*/install",
            "method": "POST",
            "error_rate": 1,
            "count": 1,
            "status": 502,
            "answer": "lost",
        },
    )
    client = make_client(vendorsim)
    ticket = client.start_reinstall(
        DEV1, hostname="kura-scw-1", ssh_public_key=KEY, user_login="ubuntu", user_password="p"
    )
    client.wait_reinstall(ticket, timeout=10)
    installs = [
        e for e in vendorsim.admin("GET", "/audit?since=0")["entries"] if e["path"].endswith("/install")
    ]
    assert [(e["method"], e["status"]) for e in installs] == [("POST", 200)]


def test_a_failed_install_reads_failed(vendorsim) -> None:
    vendorsim.admin("POST", "/faults", json={"task_failure": {"kind": "scaleway_em.install", "count": 1}})
    client = make_client(vendorsim)
    client.start_reinstall(
        DEV1, hostname="kura-scw-1", ssh_public_key=KEY, user_login="ubuntu", user_password="p"
    )
    wait_for(lambda: client.install_state(DEV1) is not InstallState.RUNNING)
    assert client.install_state(DEV1) is InstallState.FAILED


def test_private_network_attachment_converges(vendorsim) -> None:
    client = make_client(vendorsim)
    first = client.attach_private_network(DEV1, PN)
    assert first.status == "option_enabling"
    wait_for(lambda: client.attach_private_network(DEV1, PN).ready)
    assert client.attach_private_network(DEV1, PN).vlan == 1000


def test_a_detach_whose_answer_is_lost_is_read_back_not_sent_twice(vendorsim) -> None:
    """Attached, then detached through the client with the DELETE's answer lost: the list shows the
    attachment detaching, so no second DELETE (which would be a 404); polled until it is gone, after
    which a detach costs one read."""
    client = make_client(vendorsim)
    wait_for(lambda: client.attach_private_network(DEV1, PN).ready)
    since = vendorsim.admin("GET", "/audit?since=0")["entries"][-1]["id"]
    vendorsim.admin(
        "POST",
        "/faults",
        json={
            "vendor": "scaleway_em",
            "route": "/scaleway/baremetal/v1/zones/*/servers/*/private-networks/*",
            "method": "DELETE",
            "error_rate": 1,
            "count": 1,
            "status": 502,
            "answer": "lost",
        },
    )
    assert client.detach_private_network(DEV1, PN).status == "detaching"
    wait_for(lambda: client.detach_private_network(DEV1, PN).gone)
    assert client.private_networks(DEV1) == []
    server = "/scaleway/baremetal/v1/zones/fr-par-2/servers/e1000000-0000-4000-8000-000000000001"
    entries = vendorsim.admin("GET", f"/audit?since={since}")["entries"]
    assert [(e["method"], e["path"], e["status"]) for e in entries] == [
        ("DELETE", f"{server}/private-networks/{PN}", 204)
    ]
    # Attached again, the server gets a VLAN of its own again, not the one it left.
    wait_for(lambda: client.attach_private_network(DEV1, PN).ready)
    assert client.attach_private_network(DEV1, PN).vlan == 1001


def test_a_wrong_key_is_an_auth_error(vendorsim) -> None:
    with pytest.raises(AuthError):
        make_client(vendorsim, secret="00000000-0000-4000-8000-000000000000").list_boxes()


def test_a_stale_completed_read_just_after_the_post_is_not_this_installs(vendorsim) -> None:
    """The first read after the POST shows the server as it was (`previous_once`): its `completed`
    is the previous install's, and the wait goes on until this one has finished."""
    vendorsim.admin("POST", "/behaviour", json={"scaleway_em.install_read_after_post": "previous_once"})
    vendorsim.admin("POST", "/timings", json={"task_seconds": 2})
    client = make_client(vendorsim)
    ticket = client.start_reinstall(
        DEV1, hostname="kura-scw-9", ssh_public_key=KEY, user_login="ubuntu", user_password="Sudo-9"
    )
    assert client.install_state(DEV1, ticket) is InstallState.PENDING  # the previous install's record
    client.wait_reinstall(ticket, timeout=10)
    server = client._server(DEV1)
    assert server.install is not None
    assert (server.install.hostname, str(server.install.status)) == ("kura-scw-9", "completed")
