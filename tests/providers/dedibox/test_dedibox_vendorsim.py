"""DediboxClient against the vendorsim process, with injected faults."""

from __future__ import annotations

import time

import pytest

from providers.dedibox.client import DediboxClient
from providers.dedibox.models import install_digest
from providers.errors import AuthError, TaskFailedError, VendorError
from providers.retry import PollPolicy, RetryPolicy
from providers.vendor import Claim, InstallState, Reinstall

KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIJpselPEwoXIjP2bkKTBeNMrbyt7kCy0a+yHcLfRN+W7 tuist-dev-fleet"
SECRET = "f24d2ad3-cea4-48c1-a6bd-1b0d15fb94c3"
BOX = "fr-par-2/200102"


def make_client(sim, secret=SECRET, attempts=12) -> DediboxClient:
    return DediboxClient(
        api_url=f"{sim.url}/dedibox",
        secret_key=secret,
        project_id="b781bdf3-6efc-4c4a-a11d-f57edf663188",
        zones=["fr-par-1", "fr-par-2", "nl-ams-1"],
        retry=RetryPolicy(max_attempts=attempts, base_delay=0.01, max_delay=0.05),
        poll=PollPolicy(first=0.05, max_interval=0.05),
        task_timeout=10,
    )


def exercise(client: DediboxClient) -> None:
    boxes = {b.id: b for b in client.list_boxes()}
    assert boxes[BOX].tags == ("tuist-kura-dev",) and boxes[BOX].has_os
    assert boxes["fr-par-2/200104"].claim == Claim("a1ce00000002")
    assert "fr-par-2/200105" not in {b.id for b in client.boxes_with_marker("tuist-kura-dev")}
    client.set_claim(BOX, Claim("0123456789ab"))
    assert client.get_box(BOX).claim == Claim("0123456789ab")
    assert client.failover_target("198.51.100.20") == "fr-par-2/200101"
    client.move_failover("198.51.100.20", BOX)
    assert client.failover_target("198.51.100.20") == BOX
    key_id = client.register_ssh_key("tuist-fleet", KEY)
    assert client.register_ssh_key("tuist-fleet", KEY + "\n") == key_id
    client.set_claim(BOX, Claim("0123456789ab", releasing=True))
    ticket = client.start_reinstall(
        BOX, hostname="kura-eu-1", ssh_public_key=KEY, user_login="tuist", user_password="sudo-pw"
    )
    assert client.install_state(BOX, ticket) in (InstallState.RUNNING, InstallState.DONE)
    client.wait_reinstall(ticket, timeout=10)
    client.set_claim(BOX, None)
    assert client.get_box(BOX).tags == ("tuist-kura-dev",)


def test_every_method_against_vendorsim(vendorsim):
    exercise(make_client(vendorsim))
    writes = [
        (e["method"], e["path"], e["body"]) for e in vendorsim.admin("GET", "/audit?since=0")["entries"]
    ]
    assert writes[0] == (
        "POST",
        "/dedibox/dedibox/v1/zones/fr-par-2/servers/200102/tags",
        {"tags": ["tuist-kura-dev", "tuist-claim-0123456789ab"]},
    )
    assert writes[1] == (
        "POST",
        "/dedibox/dedibox/v1/zones/fr-par-2/failover-ips/attach",
        {"server_id": 200102, "fips_ids": [3001]},
    )
    install = next(w for w in writes if w[1].endswith("/install"))
    assert install[2]["os_id"] == 501 and install[2]["user_login"] == "tuist"
    assert install[2]["root_password"] == "" and len(install[2]["ssh_key_ids"]) == 1
    assert "sudo-pw" not in str(install[2])  # the simulator's audit redacts passwords


def test_wrong_secret_is_an_auth_error(vendorsim):
    with pytest.raises(AuthError) as raised:
        make_client(vendorsim, secret="00000000-0000-4000-8000-000000000000").get_box(BOX)
    assert raised.value.status in (401, 403)


def test_thirty_percent_transient_errors_every_call_still_succeeds(vendorsim):
    vendorsim.admin(
        "POST", "/faults", json={"vendor": "dedibox", "error_rate": 0.3, "status": 503, "seed": 11}
    )
    exercise(make_client(vendorsim))


def test_non_transient_injected_error_names_vendor_and_call(vendorsim):
    vendorsim.admin(
        "POST",
        "/faults",
        json={
            "vendor": "dedibox",
            "route": "/dedibox/dedibox/v1/zones/*/servers/*/tags",
            "error_rate": 1.0,
            "status": 400,
        },
    )
    with pytest.raises(VendorError) as raised:
        make_client(vendorsim).set_claim(BOX, Claim("0123456789ab"))
    assert str(raised.value).startswith(
        f"dedibox: POST /dedibox/v1/zones/{{zone}}/servers/{{server_id}}/tags [{BOX}] failed (HTTP 400"
    )


def writes(sim, suffix: str) -> list[dict]:
    return [e for e in sim.admin("GET", "/audit?since=0")["entries"] if e["path"].endswith(suffix)]


@pytest.mark.parametrize("fault", [{"status": 502}, {"drop": True}], ids=["502", "dropped"])
def test_install_whose_answer_is_lost_wipes_the_box_once(vendorsim, fault):
    vendorsim.admin(
        "POST",
        "/faults",
        json={
            "vendor": "dedibox",
            "route": "/dedibox/dedibox/v1/zones/*/servers/*/install",
            "method": "POST",
            "error_rate": 1.0,
            "count": 1,
            "answer": "lost",
            **fault,
        },
    )
    client = make_client(vendorsim)
    ticket = client.start_reinstall(
        BOX, hostname="kura-eu-1", ssh_public_key=KEY, user_login="tuist", user_password="pw"
    )
    assert vendorsim.admin("GET", "/faults")["rules"][0]["fired"] == 1
    assert len(writes(vendorsim, "/install")) == 1
    client.wait_reinstall(ticket, timeout=10)
    assert client.get_box(BOX).name == "kura-eu-1"


@pytest.mark.parametrize("status", ["unknown", "missing"])
def test_a_failed_install_is_a_typed_failure(vendorsim, status):
    """Dedibox has no failed install status: it reads `unknown` (or the record is gone) and the
    server goes to `error`."""
    vendorsim.admin(
        "POST", "/faults", json={"task_failure": {"kind": "dedibox.install", "count": 1, "status": status}}
    )
    client = make_client(vendorsim)
    ticket = client.start_reinstall(
        BOX, hostname="kura-eu-1", ssh_public_key=KEY, user_login="tuist", user_password="pw"
    )
    with pytest.raises(TaskFailedError, match=r"server error"):
        client.wait_reinstall(ticket, timeout=10)
    assert client.install_state(BOX, ticket) is InstallState.FAILED


def test_custom_partitioning_is_read_from_the_partitioning_route_and_sent(vendorsim):
    client = make_client(vendorsim)
    ticket = client.start_reinstall(
        BOX,
        hostname="kura-eu-1",
        ssh_public_key=KEY,
        user_login="root",
        user_password="root-pw",
        os_label="debian_12",
    )
    [install] = writes(vendorsim, "/install")
    assert install["body"]["os_id"] == 502
    # The partitioning answer's Partitions carry a `type`, which vendorsim's install refuses: the body
    # has InstallPartition's fields only.
    assert install["status"] == 200
    assert install["body"]["partitions"] == [
        {
            "file_system": "efi",
            "raid_level": "no_raid",
            "capacity": 536870912,
            "connectors": ["sda"],
            "mount_point": "/boot/efi",
        },
        {
            "file_system": "swap",
            "raid_level": "no_raid",
            "capacity": 4294967296,
            "connectors": ["sda"],
            "mount_point": None,
        },
        {
            "file_system": "ext4",
            "raid_level": "no_raid",
            "capacity": 0,
            "connectors": ["sda"],
            "mount_point": "/",
        },
    ]
    assert install["body"]["root_password"] == "<redacted>"
    client.wait_reinstall(ticket, timeout=10)


def test_tag_write_whose_answer_is_lost_converges(vendorsim):
    vendorsim.admin(
        "POST",
        "/faults",
        json={
            "vendor": "dedibox",
            "route": "/dedibox/*/tags",
            "method": "POST",
            "error_rate": 1.0,
            "count": 1,
            "answer": "lost",
        },
    )
    client = make_client(vendorsim)
    client.set_claim(BOX, Claim("0123456789ab"))
    assert client.get_box(BOX).claim == Claim("0123456789ab")


@pytest.mark.parametrize("fault", [{"status": 500}, {"drop": True}], ids=["500", "dropped"])
def test_attach_whose_answer_is_lost_attaches_once(vendorsim, fault):
    vendorsim.admin(
        "POST",
        "/faults",
        json={
            "vendor": "dedibox",
            "route": "/dedibox/*/failover-ips/attach",
            "error_rate": 1.0,
            "count": 1,
            "answer": "lost",
            **fault,
        },
    )
    client = make_client(vendorsim)
    client.move_failover("198.51.100.20", BOX)
    assert client.failover_target("198.51.100.20") == BOX
    assert len(writes(vendorsim, "/attach")) == 1


@pytest.mark.parametrize("behaviour", ["move", "reject"])
def test_attach_of_an_ip_attached_elsewhere_under_either_answer(vendorsim, behaviour):
    vendorsim.admin("POST", "/behaviour", json={"dedibox.attach_when_attached": behaviour})
    client = make_client(vendorsim)
    client.move_failover("198.51.100.20", BOX)
    assert client.failover_target("198.51.100.20") == BOX
    paths = [w["path"].rsplit("/", 1)[-1] for w in vendorsim.admin("GET", "/audit?since=0")["entries"]]
    assert paths == (["attach"] if behaviour == "move" else ["attach", "detach", "attach"])


def test_vendorsim_refuses_a_tag_outside_the_assumed_limits(vendorsim):
    client = make_client(vendorsim)
    for bad in ("tuist-claim:0123456789ab", "t" * 65):
        with pytest.raises(VendorError) as raised:
            client._call(
                "POST",
                "/dedibox/v1/zones/{zone}/servers/{server_id}/tags",
                "/dedibox/v1/zones/fr-par-2/servers/200102/tags",
                body={"tags": ["tuist-kura-dev", bad]},
                idempotent=True,
            )
        assert (raised.value.status, raised.value.code) == (400, "invalid_arguments")


def test_a_stale_installed_read_just_after_the_post_is_not_this_installs(vendorsim):
    """The first read after the POST shows the previous install (`previous_once`): the wait goes on
    until this install was seen running and has finished (reference/tuist-anchor.md 2.4)."""
    vendorsim.admin("POST", "/timings", json={"task_seconds": 2})
    client = make_client(vendorsim)

    def reinstall() -> Reinstall:
        return client.start_reinstall(
            BOX, hostname="kura-eu-1", ssh_public_key=KEY, user_login="tuist", user_password="sudo-pw"
        )

    client.wait_reinstall(reinstall(), timeout=10)  # a first release: the record reads `installed`
    previous = client._install_record("fr-par-2", 200102, BOX)
    assert previous is not None and previous["status"] == "installed"
    vendorsim.admin("POST", "/behaviour", json={"dedibox.install_read_after_post": "previous_once"})
    # The second release's record will read exactly as the first's once it is done: only having
    # seen it running tells the two apart.
    ticket = reinstall()
    assert ticket.baseline == install_digest(previous)
    assert client.install_state(BOX, ticket) is InstallState.PENDING  # the previous record
    assert client._install_record("fr-par-2", 200102, BOX)["status"] != "installed"  # this one runs
    client.wait_reinstall(ticket, timeout=10)
    record = client._install_record("fr-par-2", 200102, BOX)
    assert record is not None and (record["hostname"], record["status"]) == ("kura-eu-1", "installed")


def test_a_second_identical_reinstall_that_ends_before_any_read_is_followed_to_its_end(vendorsim):
    """The killed-CLI end-to-end test's hang (2026-12-03): a box released twice in a row gets two
    installs whose records read exactly alike once done, and with the sim's half-second installs the
    second one ended before the client's first look. The client rightly waits to see its install
    running; vendorsim now keeps to what a real install of 10 to 30 minutes gives any poller, one
    read in progress (vendorsim/dedibox.py get_install), so the wait ends."""
    vendorsim.admin("POST", "/timings", json={"task_seconds": 0.01})
    client = make_client(vendorsim)
    for _ in range(2):
        ticket = client.start_reinstall(
            BOX, hostname="kura-eu-1", ssh_public_key=KEY, user_login="tuist", user_password="sudo-pw"
        )
        time.sleep(0.1)  # the install ends before the first read
        client.wait_reinstall(ticket, timeout=5)
    record = client._install_record("fr-par-2", 200102, BOX)
    assert record is not None and record["status"] == "installed"


FIPS = "/dedibox/dedibox/v1/zones/fr-par-2/failover-ips"
PROJECT = "b781bdf3-6efc-4c4a-a11d-f57edf663188"
LISTED = [f"GET /dedibox/dedibox/v1/zones/{z}/failover-ips" for z in ("fr-par-1", "fr-par-2")]


def fip_calls(sim, since: int = 0) -> list[str]:
    """The failover-IP requests since call `since`, as `METHOD path status`, the listing without its
    query and each run of identical reads of the IP (a wait's polls, as many as the wall clock gave)
    as one."""
    seen: list[str] = []
    for call in sim.admin("GET", f"/calls?since={since}")["entries"]:
        if "/failover-ips" not in call["path"]:
            continue
        line = f"{call['method']} {call['path'].split('?')[0]} {call['status']}"
        if not (seen and seen[-1] == line and line.startswith("GET ")):
            seen.append(line)
    return seen


def calls_so_far(sim) -> int:
    return len(sim.admin("GET", "/calls")["entries"])


def test_attach_refused_while_the_ip_is_busy_waits_for_it_then_attaches_again(vendorsim):
    """Another detach of the IP runs when the move starts: vendorsim refuses the attach (400 "failover
    ip ... is busy"), the client reads `busy`, waits until `ready`, and attaches again."""
    import requests

    # Long enough that the detach still runs when the client's attach arrives on a loaded machine.
    vendorsim.admin("POST", "/timings", json={"task_seconds": 1.5})
    detached = requests.post(
        f"{vendorsim.url}{FIPS}/detach",
        json={"fips_ids": [3001]},
        headers={"X-Auth-Token": SECRET},
        timeout=5,
    )
    assert detached.status_code == 200, detached.text
    since = calls_so_far(vendorsim)
    client = make_client(vendorsim)
    client.move_failover("198.51.100.20", BOX)
    assert client.failover_target("198.51.100.20") == BOX
    assert fip_calls(vendorsim, since)[:-2] == [
        *(f"{listed} 200" for listed in LISTED),
        f"POST {FIPS}/attach 400",
        f"GET {FIPS}/3001 200",  # busy, then ready on no server
        f"POST {FIPS}/attach 200",
        f"GET {FIPS}/3001 200",  # busy, then ready on the box
    ]
    paths = [w["path"].rsplit("/", 1)[-1] for w in vendorsim.admin("GET", "/audit?since=0")["entries"]]
    assert paths == ["detach", "attach", "attach"]  # the refused attach is audited too


def test_attach_refused_while_the_ip_is_elsewhere_is_detach_then_attach(vendorsim):
    vendorsim.admin("POST", "/behaviour", json={"dedibox.attach_when_attached": "reject"})
    client = make_client(vendorsim)
    client.move_failover("198.51.100.20", BOX)
    assert client.failover_target("198.51.100.20") == BOX
    assert fip_calls(vendorsim) == [
        *(f"{listed} 200" for listed in LISTED),
        f"POST {FIPS}/attach 400",
        f"GET {FIPS}/3001 200",  # ready on fr-par-2/200101
        f"POST {FIPS}/detach 200",
        f"GET {FIPS}/3001 200",  # busy, then ready on no server
        f"POST {FIPS}/attach 200",
        f"GET {FIPS}/3001 200",  # busy, then ready on the box
        *(f"{listed} 200" for listed in LISTED),  # failover_target
    ]


def test_a_refusal_whose_text_says_nothing_is_settled_by_the_ips_state(vendorsim):
    """An injected 400 ("injected fault": no wording the client knows) while the IP is ready on
    another server: detach, then attach. The same refusal while it is on no server is raised."""
    vendorsim.admin(
        "POST",
        "/faults",
        json={
            "vendor": "dedibox",
            "route": f"{FIPS}/attach",
            "method": "POST",
            "error_rate": 1.0,
            "count": 1,
            "status": 400,
        },
    )
    client = make_client(vendorsim)
    client.move_failover("198.51.100.20", BOX)
    assert client.failover_target("198.51.100.20") == BOX
    assert fip_calls(vendorsim)[:-2] == [
        *(f"{listed} 200" for listed in LISTED),
        f"POST {FIPS}/attach 400",
        f"GET {FIPS}/3001 200",
        f"POST {FIPS}/detach 200",
        f"GET {FIPS}/3001 200",
        f"POST {FIPS}/attach 200",
        f"GET {FIPS}/3001 200",
    ]

    vendorsim.admin(
        "POST",
        "/faults",
        json={
            "vendor": "dedibox",
            "route": f"{FIPS}/attach",
            "method": "POST",
            "error_rate": 1.0,
            "count": 1,
            "status": 400,
        },
    )
    since = calls_so_far(vendorsim)
    with pytest.raises(
        VendorError, match=r"\(HTTP 400 invalid_request_error\): injected fault \(request id [0-9a-f-]+\)$"
    ):
        client.move_failover("198.51.100.21", BOX)  # on no server
    assert fip_calls(vendorsim, since) == [
        *(f"{listed} 200" for listed in LISTED),
        f"POST {FIPS}/attach 400",
        f"GET {FIPS}/3002 200",
    ]
