"""Apple silicon (apple-silicon/v1alpha1) under /scaleway, route by route, raw and through the scaleway
SDK as it ships; then a Mac box over real SSH, answering as macOS does.

Real answers these follow: terraform-provider-scaleway's recorded Apple silicon interactions (server
bodies with `vnc_port` 59010, `ssh_username` m1, DELETE 204 with no body), the Scaleway SDKs'
PreconditionFailedError / TransientStateError bodies, and the reference implementation's own tests
(a delete inside the 24-hour licence floor is 412 `precondition_failed`, precondition
`unknown_precondition`, "this server cannot be deleted before <time>"; a reinstall during a
reinstall is 409 `transient_state`).
"""

from __future__ import annotations

import json
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from scaleway import Client
from scaleway.applesilicon.v1alpha1 import ApplesiliconV1Alpha1API, ApplesiliconV1Alpha1PrivateNetworkAPI
from scaleway.applesilicon.v1alpha1 import marshalling as applesilicon_m
from scaleway_core.api import ScalewayException
from werkzeug.serving import make_server

from tests.vendorsim.conftest import DEV_INVENTORY, FakeClock, Served
from tests.vendorsim.test_boxes import _free_port, _keypair, ssh
from tests.vendorsim.test_contract import CONTRACT, _kept_fields, shape_differences
from vendorsim.app import App
from vendorsim.boxes import BoxFarm
from vendorsim.core import Sim
from vendorsim.inventory import load_inventory

REPO = Path(__file__).resolve().parents[2]
Z = "/apple-silicon/v1alpha1/zones/fr-par-3"
MAC1 = "a5000000-0000-4000-8000-000000000001"
MAC2 = "a5000000-0000-4000-8000-000000000002"  # VPC option already on
MAC3 = "a5000000-0000-4000-8000-000000000003"  # Sequoia, ordered 30 hours ago
TAHOE_26_0 = "0a500000-0000-4000-8000-000000000001"
TAHOE_26_1 = "0a500000-0000-4000-8000-000000000002"
SEQUOIA = "0a500000-0000-4000-8000-000000000003"
PN_PAR = "9e700000-0000-4000-8000-000000000001"
KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIJpselPEwoXIjP2bkKTBeNMrbyt7kCy0a+yHcLfRN+W7 fleet"


def scw(served: Served, method: str, path: str, body: Any = None, *, params: Any = None) -> requests.Response:
    creds = served.inventory.credentials.scaleway
    assert creds is not None
    return requests.request(
        method,
        f"{served.url}/scaleway{path}",
        json=body,
        params=params,
        headers={"X-Auth-Token": creds.secret_key},
        timeout=5,
    )


def sdk(served: Served) -> ApplesiliconV1Alpha1API:
    creds = served.inventory.credentials.scaleway
    assert creds is not None
    client = Client(
        access_key=creds.access_key,
        secret_key=creds.secret_key,
        default_project_id=creds.project_id,
        default_zone="fr-par-3",
        api_url=f"{served.url}/scaleway",
    )
    return ApplesiliconV1Alpha1API(client)


# --- servers ----------------------------------------------------------------------------------------


def test_server_list_pages_and_hides_the_sudo_password(served: Served) -> None:
    r = scw(served, "GET", f"{Z}/servers", params={"page_size": 4})
    assert r.json()["total_count"] == 6 and r.headers["X-Total-Count"] == "6"
    names = [s["name"] for s in r.json()["servers"]]
    # Oldest order first: the 30-hour-old Mac leads.
    assert names == [
        "tuist-macos-dev-3",
        "tuist-macos-dev-1",
        "tuist-macos-dev-2",
        "tuist-macos-dev-4--c-5a1ce0de0001",
    ]
    assert {s["sudo_password"] for s in r.json()["servers"]} == {""}
    assert (
        scw(served, "GET", f"{Z}/servers", params={"order_by": "newest"}).json()["type"]
        == "invalid_arguments"
    )


def test_server_detail_is_the_recorded_shape(served: Served) -> None:
    body = scw(served, "GET", f"{Z}/servers/{MAC1}").json()
    prep = served.inventory.prep.sudo_password
    assert (body["ssh_username"], body["vnc_port"], body["sudo_password"]) == ("m1", 59010, prep)
    assert body["vnc_url"] == f"vnc://m1:{prep}@198.18.5.71:59010"
    assert (body["status"], body["delivered"], body["vpc_status"], body["type"]) == (
        "ready",
        True,
        "vpc_disabled",
        "M2-L",
    )
    assert body["commitment"] == {"type": "duration_24h", "cancelled": False}
    assert body["deletable_at"] == "2027-01-16T08:00:00Z"  # created + 24 h on the test clock
    assert body["os"]["name"] == "macos-tahoe-26.0"
    server = sdk(served).get_server(server_id=MAC1)
    assert (server.name, server.os.family, server.tags) == ("tuist-macos-dev-1", "Tahoe", [])


def test_only_the_name_is_writable_among_identity_fields(served: Served) -> None:
    r = scw(served, "PATCH", f"{Z}/servers/{MAC1}", {"name": "tuist-macos-dev-1--c-0123456789ab"})
    assert r.status_code == 200 and r.json()["name"] == "tuist-macos-dev-1--c-0123456789ab"
    r = scw(served, "PATCH", f"{Z}/servers/{MAC1}", {"tags": ["tuist-macos-dev"]})
    assert (r.status_code, r.json()["message"], r.json()["fields"]) == (
        400,
        "Validation Error",
        {"tags": ["unknown field"]},
    )
    assert scw(served, "PATCH", f"{Z}/servers/{MAC1}", {"name": ""}).json()["type"] == "invalid_arguments"


def test_server_types_and_os_images(served: Served) -> None:
    api = sdk(served)
    types = {t.name: t for t in api.list_server_types().server_types}
    assert set(types) == {"M2-L", "M4-S"}
    assert (types["M2-L"].minimum_lease_duration, types["M2-L"].default_os.name) == (
        "86400s",
        "macos-tahoe-26.1",
    )
    assert api.get_server_type(server_type="M4-S").memory.capacity == 16 * 2**30
    m4 = [o.name for o in api.list_os_all(server_type="M4-S")]
    assert m4 == ["macos-tahoe-26.0", "macos-tahoe-26.1", "macos-sequoia-15.6"]  # the beta is M2-L only
    assert [o.name for o in api.list_os_all(name="macos-tahoe")] == [
        "macos-tahoe-26.0",
        "macos-tahoe-26.1",
        "macos-tahoe-26.2",
    ]
    assert api.get_os(os_id=SEQUOIA).family == "Sequoia"


# --- reinstall ------------------------------------------------------------------------------------------


def test_reinstall_runs_reinstalling_then_ready_with_a_new_sudo_password(served: Served) -> None:
    creds = served.inventory.credentials.scaleway
    assert creds is not None
    scw(
        served,
        "POST",
        "/iam/v1alpha1/ssh-keys",
        {"name": "f", "public_key": KEY, "project_id": creds.project_id},
    )
    r = scw(served, "POST", f"{Z}/servers/{MAC1}/reinstall", {"enable_kext": False, "os_id": TAHOE_26_1})
    assert (r.status_code, r.json()["status"]) == (200, "reinstalling")
    served.clock.advance(5)
    assert scw(served, "GET", f"{Z}/servers/{MAC1}").json()["status"] == "reinstalling"
    assert served.farm.reinstalls() == []
    served.clock.advance(6)
    body = scw(served, "GET", f"{Z}/servers/{MAC1}").json()
    assert (body["status"], body["os"]["name"]) == ("ready", "macos-tahoe-26.1")
    password = body["sudo_password"]
    assert password != served.inventory.prep.sudo_password and len(password) == 12
    ((box, kw),) = served.farm.reinstalls()
    assert box == f"mac-{MAC1}"
    assert (kw["user"], kw["authorized_key"], kw["sudo_password"]) == ("m1", KEY, password)
    assert kw["platform"] == {
        "os": "macos",
        "name": "macos-tahoe-26.1",
        "version": "26.1",
        "build": "25B78",
        "model": "Mac14,12",
        "cpu": "Apple M2 Pro",
        "cores": 10,
        "memory_bytes": 32 * 2**30,
    }
    assert password not in served.admin("GET", "state").text


def test_a_reinstall_during_a_reinstall_is_a_transient_state(served: Served) -> None:
    api = sdk(served)
    assert api.reinstall_server(server_id=MAC1, enable_kext=False).status == "reinstalling"
    with pytest.raises(ScalewayException) as raised:
        api.reinstall_server(server_id=MAC1, enable_kext=False)
    assert raised.value.status_code == 409
    assert raised.value.response.json() == {
        "current_state": "reinstalling",
        "message": "resource is in a transient state",
        "resource": "apple_silicon_server",
        "resource_id": MAC1,
        "type": "transient_state",
    }


def test_reinstall_body_is_checked(served: Served) -> None:
    r = scw(served, "POST", f"{Z}/servers/{MAC1}/reinstall", {"os_id": TAHOE_26_0})
    assert r.json()["fields"] == {"enable_kext": ["required key not provided"]}
    # The Tahoe beta is published for M2-L only; MAC... are M2-L, the unmarked one an M4-S.
    beta = "0a500000-0000-4000-8000-000000000004"
    m4 = "a5000000-0000-4000-8000-000000000007"
    r = scw(served, "POST", f"{Z}/servers/{m4}/reinstall", {"enable_kext": False, "os_id": beta})
    assert (r.status_code, r.json()["details"][0]["argument_name"]) == (400, "os_id")


def test_a_failed_reinstall_leaves_the_server_in_error(served: Served) -> None:
    served.admin("POST", "faults", {"task_failure": {"kind": "applesilicon.reinstall", "count": 1}})
    scw(served, "POST", f"{Z}/servers/{MAC1}/reinstall", {"enable_kext": False})
    served.clock.advance(11)
    assert scw(served, "GET", f"{Z}/servers/{MAC1}").json()["status"] == "error"
    assert served.farm.reinstalls() == []


def test_server_answers_have_the_recorded_shape(served: Served) -> None:
    """contract/applesilicon/server.json is an Apple silicon server as terraform-provider-scaleway
    recorded it (values replaced; `kext_enabled` added, a field of SDK 2.12's Server newer than the
    recording): GET, PATCH and reboot answers have its keys and types and decode through the SDK."""
    doc = json.loads((CONTRACT / "applesilicon" / "server.json").read_text())
    answers = [
        scw(served, "GET", f"{Z}/servers/{MAC2}").json(),
        scw(served, "PATCH", f"{Z}/servers/{MAC2}", {"public_bandwidth_bps": 10_000_000_000}).json(),
        scw(served, "POST", f"{Z}/servers/{MAC2}/reboot", {}).json(),
        scw(served, "GET", f"{Z}/servers").json()["servers"][0],
    ]
    for body in answers:
        assert shape_differences(doc, body) == []
    documented = applesilicon_m.unmarshal_Server(doc)
    for body in answers[:3]:
        assert _kept_fields(documented, applesilicon_m.unmarshal_Server(body)) == []
    # Listed, the password is left out, as the reference found.
    assert answers[3]["sudo_password"] == ""
    assert answers[2]["status"] == "rebooting"


# --- the 24-hour licence floor ---------------------------------------------------------------------------


def test_delete_inside_the_first_24_hours_is_refused_as_scaleway_does(served: Served) -> None:
    with pytest.raises(ScalewayException) as raised:
        sdk(served).delete_server(server_id=MAC1)
    assert raised.value.status_code == 412
    assert raised.value.response.json() == {
        "help_message": "this server cannot be deleted before 2027-01-16 08:00:00",
        "message": "precondition is not respected",
        "precondition": "unknown_precondition",
        "type": "precondition_failed",
    }
    assert scw(served, "GET", f"{Z}/servers/{MAC1}").status_code == 200


def test_delete_after_24_hours_is_a_204_and_the_server_is_gone(served: Served) -> None:
    r = scw(served, "DELETE", f"{Z}/servers/{MAC3}")  # ordered 30 hours ago
    assert (r.status_code, r.content) == (204, b"")
    assert scw(served, "GET", f"{Z}/servers/{MAC3}").json()["type"] == "not_found"
    served.clock.advance(24 * 3600)
    assert scw(served, "DELETE", f"{Z}/servers/{MAC1}").status_code == 204
    entries = served.admin("GET", "audit").json()["entries"]
    assert [(e["vendor"], e["method"], e["status"]) for e in entries] == [("applesilicon", "DELETE", 204)] * 2


# --- VPC and private networks ---------------------------------------------------------------------------


def test_vpc_then_private_network_with_its_vlan(served: Served) -> None:
    pn = ApplesiliconV1Alpha1PrivateNetworkAPI(sdk(served).client)
    with pytest.raises(ScalewayException) as raised:
        pn.add_server_private_network(server_id=MAC1, private_network_id=PN_PAR)
    assert (raised.value.status_code, raised.value.response.json()["precondition"]) == (
        412,
        "attribute_must_be_set",
    )
    assert sdk(served).update_server(server_id=MAC1, enable_vpc=True).vpc_status == "vpc_updating"
    served.clock.advance(11)
    attached = pn.add_server_private_network(server_id=MAC1, private_network_id=PN_PAR)
    assert (attached.status, attached.vlan) == ("attaching", 2000)
    served.clock.advance(11)
    got = pn.get_server_private_network(server_id=MAC1, private_network_id=PN_PAR)
    assert (got.status, got.vlan, len(got.ipam_ip_ids)) == ("attached", 2000, 1)
    assert [a.server_id for a in pn.list_server_private_networks_all()] == [MAC1]
    assert (
        scw(
            served, "POST", f"{Z}/servers/{MAC1}/private-networks", {"private_network_id": PN_PAR}
        ).status_code
        == 409
    )


# --- a Mac box over real SSH ------------------------------------------------------------------------------


@pytest.fixture
def mac_box(tmp_path: Path) -> Iterator[tuple[Served, BoxFarm, int, Path]]:
    """vendorsim's Apple silicon API with MAC1 a real box (sshd on 127.0.0.1), prepped with a key."""
    farm = BoxFarm(tmp_path / "boxes")
    clock = FakeClock()
    inventory = load_inventory(DEV_INVENTORY)
    sim = Sim(inventory, tmp_path, task_seconds=10, farm=farm, clock=clock)
    key_path, public = _keypair(tmp_path, "prep")
    port = _free_port()
    record = sim.store.get("box", f"mac-{MAC1}")
    assert record is not None
    farm.ensure(
        f"mac-{MAC1}",
        ssh_port=port,
        user="m1",
        authorized_key=public,
        sudo_password="prep-sudo-pass",
        platform=record["platform"],
    )
    server = make_server("127.0.0.1", 0, App(sim), threaded=True)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield Served(sim, f"http://127.0.0.1:{server.port}", clock, farm, inventory), farm, port, key_path  # type: ignore[arg-type]
    finally:
        server.shutdown()
        server.server_close()
        farm.stop_all()
        sim.store.close()


def test_the_mac_box_answers_as_macos(mac_box: tuple[Served, BoxFarm, int, Path]) -> None:
    _, _, port, key = mac_box

    def run(command: str, stdin: str = "") -> tuple[int, str, str]:
        done = ssh(port, key, command, user="m1", stdin=stdin)
        return done.returncode, done.stdout, done.stderr

    assert run("sw_vers") == (
        0,
        "ProductName:\t\tmacOS\nProductVersion:\t\t26.0\nBuildVersion:\t\t25A354\n",
        "",
    )
    assert run("sw_vers -productVersion; uname -s; uname -r; uname -m") == (
        0,
        "26.0\nDarwin\n25.0.0\narm64\n",
        "",
    )
    assert run("id; pwd") == (
        0,
        "uid=501(m1) gid=20(staff) groups=20(staff),12(everyone),61(localaccounts),80(admin)\n/Users/m1\n",
        "",
    )
    assert run("sysctl -n hw.model machdep.cpu.brand_string hw.ncpu") == (
        0,
        "Mac14,12\nApple M2 Pro\n10\n",
        "",
    )
    # What a Mac does not have.
    for tool in ("apt-get", "systemctl", "dpkg", "lsblk", "modprobe", "ip"):
        assert run(f"command -v {tool}")[0] == 1, tool
    assert run("test -e /etc/os-release")[0] == 1
    # sudo wants the Mac's password, with macOS's prompt.
    assert run("sudo -S id -u", stdin="prep-sudo-pass\n") == (0, "0\n", "Password:")
    assert run("sudo -n launchctl list")[2] == "sudo: a password is required\n"


PF_ANCHOR = """# the reference's SSH guard, a sub-anchor of Apple's com.apple
table <bruteforce> persist
block drop in quick proto tcp from <bruteforce> to self port 22
pass in proto tcp from any to self port 22 \\
  flags S/SA keep state (max-src-conn-rate 10/60, overload <bruteforce> flush global)
"""

PLIST = """<?xml version="1.0" encoding="UTF-8"?>
<plist version="1.0">
<dict>
  <key>Label</key>
  <string>dev.tuist.sshguard</string>
  <key>ProgramArguments</key>
  <array>
    <string>/usr/local/bin/tuist-sshguard</string>
  </array>
  <key>StartInterval</key>
  <integer>60</integer>
</dict>
</plist>
"""


def test_launchctl_and_pfctl_keep_state_as_macos_does(mac_box: tuple[Served, BoxFarm, int, Path]) -> None:
    _, _, port, key = mac_box

    def root(command: str, stdin: str = "") -> tuple[int, str, str]:
        done = ssh(
            port, key, f"sudo -S -p '' bash -c {command!r}", user="m1", stdin="prep-sudo-pass\n" + stdin
        )
        return done.returncode, done.stdout, done.stderr

    # Not root: launchd and pf say no.
    assert ssh(port, key, "launchctl bootstrap system /x.plist", user="m1").stderr == (
        "Bootstrap failed: 1: Operation not permitted\n"
    )
    assert ssh(port, key, "pfctl -s info", user="m1").stderr == "pfctl: /dev/pf: Permission denied\n"

    # A job whose program is missing loads but does not run; once the program exists, it runs. This
    # one has no KeepAlive (a StartInterval job, as the guard's re-arm): it runs, exits 0, and between
    # runs reads not running.
    assert root("cat > /Library/LaunchDaemons/dev.tuist.sshguard.plist", stdin=PLIST)[0] == 0
    assert root("launchctl bootstrap system /Library/LaunchDaemons/dev.tuist.sshguard.plist")[0] == 0
    assert root("launchctl bootstrap system /Library/LaunchDaemons/dev.tuist.sshguard.plist")[1:] == (
        "",
        "Bootstrap failed: 5: Input/output error\n",
    )
    printed = root("launchctl print system/dev.tuist.sshguard")[1]
    assert "state = not running" in printed and "last exit code = 78: EX_CONFIG" in printed
    root("printf '#!/bin/sh\\n' > /usr/local/bin/tuist-sshguard && chmod +x /usr/local/bin/tuist-sshguard")
    printed = root("launchctl print system/dev.tuist.sshguard")[1]
    assert "\tstate = not running\n" in printed and "\truns = 1\n" in printed
    assert "\tlast exit code = 0\n" in printed and "\tpid = " not in printed
    assert root("launchctl list dev.tuist.sshguard")[1] == "PID\tStatus\tLabel\n-\t0\tdev.tuist.sshguard\n"
    assert root("launchctl bootout system/dev.tuist.sshguard")[0] == 0
    assert root("launchctl kickstart -k system/dev.tuist.sshguard")[:3:2] == (
        113,
        'Could not find service "dev.tuist.sshguard" in domain for system\n',
    )

    # pf: Apple's anchor point is there; a sub-anchor under it loads, a bad line does not.
    assert root("pfctl -s Anchors")[1] == "  com.apple\n"
    assert root("cat > /etc/pf.anchors/tuist.sshguard", stdin=PF_ANCHOR)[0] == 0
    loaded = root("pfctl -a com.apple/tuist.sshguard -f /etc/pf.anchors/tuist.sshguard")
    assert loaded == (0, "", "No ALTQ support in kernel\nALTQ related functions disabled\n")
    rules = root("pfctl -a com.apple/tuist.sshguard -s rules")[1].splitlines()
    assert rules[0] == "table <bruteforce> persist" and rules[2].startswith(
        "pass in proto tcp from any to self port 22"
    )
    assert "com.apple/tuist.sshguard" in root("pfctl -a com.apple -s Anchors")[1]
    assert (
        root("pfctl -a com.apple/tuist.sshguard -t bruteforce -T add 203.0.113.9")[2]
        == "1/1 addresses added.\n"
    )
    assert root("pfctl -a com.apple/tuist.sshguard -t bruteforce -T show")[1] == "   203.0.113.9\n"
    # -T expire N deletes what went in at least N seconds ago.
    expire = "pfctl -a com.apple/tuist.sshguard -t bruteforce -T expire"
    assert root(f"{expire} 3600")[2] == "0/1 addresses expired.\n"
    assert root(f"{expire} 0")[2] == "1/1 addresses expired.\n"
    assert root("pfctl -a com.apple/tuist.sshguard -t bruteforce -T show")[1] == ""
    assert root("pfctl -e")[2] == "pf enabled\n"
    assert root("pfctl -e")[::2] == (1, "pfctl: pf already enabled\n")
    bad = root("printf 'pass in all\\nallow ssh\\n' > /tmp/bad.conf && pfctl -a com.apple/x -f /tmp/bad.conf")
    assert bad == (
        1,
        "",
        "/tmp/bad.conf:2: syntax error\npfctl: Syntax error in config file: pf rules not loaded\n",
    )


AGENT_PLIST = """<?xml version="1.0" encoding="UTF-8"?>
<plist version="1.0">
<dict>
  <key>Label</key>
  <string>dev.tuist.node-agent</string>
  <key>ProgramArguments</key>
  <array>
    <string>/usr/local/libexec/tuist/tart-kubelet</string>
    <string>--register-node=false</string>
  </array>
  <key>KeepAlive</key>
  <true/>
</dict>
</plist>
"""


def sim_pid(label: str) -> int:
    """The pid vendorsim's launchctl gives a job's first life: the label's cksum, as the shim takes it."""
    done = subprocess.run(["cksum"], input=label, capture_output=True, text=True, check=True)
    return int(done.stdout.split()[0]) % 90000 + 400


def launchd_dump(state: str, runs: int, pid: int | None, last_exit: str) -> str:
    """What vendorsim's `launchctl print system/dev.tuist.node-agent` prints for AGENT_PLIST."""
    return (
        "system/dev.tuist.node-agent = {\n"
        f"\tactive count = {0 if pid is None else 1}\n"
        "\tpath = /Library/LaunchDaemons/dev.tuist.node-agent.plist\n"
        f"\tstate = {state}\n"
        "\tprogram = /usr/local/libexec/tuist/tart-kubelet\n"
        f"\truns = {runs}\n"
        + ("" if pid is None else f"\tpid = {pid}\n")
        + f"\tlast exit code = {last_exit}\n"
        "}\n"
    )


def test_launchctl_shows_a_crash_looping_job_in_a_new_life_at_each_look(
    mac_box: tuple[Served, BoxFarm, int, Path],
) -> None:
    """A job named in /var/lib/sim/launchd/crash-looping is seen by each `print` one step along its
    cycle: at `running` in a new life (a new pid, runs one more), else between two; a healthy job
    keeps its pid and runs = 1, as launchd shows them."""
    _, _, port, key = mac_box
    label, plist = "dev.tuist.node-agent", "/Library/LaunchDaemons/dev.tuist.node-agent.plist"
    pid = sim_pid(label)

    def root(command: str, stdin: str = "") -> tuple[int, str, str]:
        done = ssh(
            port, key, f"sudo -S -p '' bash -c {command!r}", user="m1", stdin="prep-sudo-pass\n" + stdin
        )
        return done.returncode, done.stdout, done.stderr

    def looks(n: int) -> list[str]:
        # n prints in one session, each ended by a line `--`
        done = root("; ".join([f"launchctl print system/{label}; echo --"] * n))
        assert done[0] == 0
        return done[1].split("--\n")[:-1]

    assert root(f"cat > {plist}", stdin=AGENT_PLIST)[0] == 0
    agent = "/usr/local/libexec/tuist/tart-kubelet"
    installed = f"mkdir -p /usr/local/libexec/tuist && cat > {agent} && chmod +x {agent}"
    assert root(f"{installed} && launchctl bootstrap system {plist}", stdin="#!/bin/sh\n")[0] == 0

    healthy = launchd_dump("running", 1, pid, "(never exited)")
    assert looks(2) == [healthy, healthy]
    assert root(f"launchctl list {label}")[1] == f"PID\tStatus\tLabel\n{pid}\t0\t{label}\n"

    # Respawned before every look: each finds a new life.
    assert root("cat > /var/lib/sim/launchd/crash-looping", stdin=f"{label}\n")[0] == 0
    assert looks(3) == [
        launchd_dump("running", 1, pid, "(never exited)"),
        launchd_dump("running", 2, pid + 1, "1"),
        launchd_dump("running", 3, pid + 2, "1"),
    ]
    # list reads the last look, it takes none.
    assert root(f"launchctl list {label}")[1] == f"PID\tStatus\tLabel\n{pid + 2}\t1\t{label}\n"
    assert looks(1) == [launchd_dump("running", 4, pid + 3, "1")]

    # Down between lives every other look; a reload starts the loop over.
    crash_loop = f"{label} running,spawn scheduled\n"
    assert root("cat > /var/lib/sim/launchd/crash-looping", stdin=crash_loop)[0] == 0
    assert root(f"launchctl bootout system/{label} && launchctl bootstrap system {plist}")[0] == 0
    assert looks(2) == [
        launchd_dump("running", 1, pid, "(never exited)"),
        launchd_dump("spawn scheduled", 1, None, "1"),
    ]
    assert root(f"launchctl list {label}")[1] == f"PID\tStatus\tLabel\n-\t1\t{label}\n"
    assert looks(2) == [
        launchd_dump("running", 2, pid + 1, "1"),
        launchd_dump("spawn scheduled", 2, None, "1"),
    ]


def test_the_sshguard_rearm_lets_go_of_sources_blocked_an_hour_ago(
    mac_box: tuple[Served, BoxFarm, int, Path],
) -> None:
    """providers/ssh/scripts/macos/sshguard-rearm.sh, run by launchd every minute on the Mac: a source
    `overload` put in <sshguard> is dropped for an hour, not for good."""
    _, farm, port, key = mac_box
    scripts = REPO / "providers/ssh/scripts/macos"

    def root(command: str, stdin: str = "") -> tuple[int, str, str]:
        done = ssh(
            port, key, f"sudo -S -p '' bash -c {command!r}", user="m1", stdin="prep-sudo-pass\n" + stdin
        )
        return done.returncode, done.stdout, done.stderr

    rules = (scripts / "sshguard.pf").read_text().replace("__SSH_PORT__", "22")
    assert root("cat > /etc/pf.anchors/tuist.sshguard", stdin=rules)[0] == 0
    rearm = (scripts / "sshguard-rearm.sh").read_text()
    assert root("bash -s", stdin=rearm) == (
        0,
        "sshguard: com.apple/tuist.sshguard reloaded from /etc/pf.anchors/tuist.sshguard\n"
        "sshguard: pf enabled\n",
        "",
    )
    table = "pfctl -a com.apple/tuist.sshguard -t sshguard"
    assert root(f"{table} -T add 198.51.100.7 203.0.113.9")[0] == 0
    # 198.51.100.7 went in an hour ago (pf's own record of it, as the simulator keeps it).
    times = (
        farm.info(f"mac-{MAC1}").sandbox_root
        / "var/lib/sim/pf/table-times/com.apple%tuist.sshguard%%sshguard"
    )
    lines = times.read_text().splitlines()
    times.write_text(
        "".join(f"{a} {int(t) - 3600 if a == '198.51.100.7' else t}\n" for a, t in map(str.split, lines))
    )
    assert root("bash -s", stdin=rearm) == (0, "sshguard: 1/2 addresses expired.\n", "")
    assert root(f"{table} -T show")[1] == "   203.0.113.9\n"
    # Nothing to let go of: nothing said.
    assert root("bash -s", stdin=rearm) == (0, "", "")


def test_a_reinstall_lays_down_the_new_macos_and_wipes_launchd_and_pf(
    mac_box: tuple[Served, BoxFarm, int, Path], tmp_path: Path
) -> None:
    served, _, port, key = mac_box
    fleet_key, fleet_public = _keypair(tmp_path, "fleet")
    creds = served.inventory.credentials.scaleway
    assert creds is not None
    scw(
        served,
        "POST",
        "/iam/v1alpha1/ssh-keys",
        {"name": "f", "public_key": fleet_public, "project_id": creds.project_id},
    )
    ssh(port, key, "sudo -S -p '' pfctl -E", user="m1", stdin="prep-sudo-pass\n")
    scw(served, "POST", f"{Z}/servers/{MAC1}/reinstall", {"enable_kext": False, "os_id": SEQUOIA})
    served.clock.advance(11)
    password = scw(served, "GET", f"{Z}/servers/{MAC1}").json()["sudo_password"]
    assert ssh(port, key, "true", user="m1").returncode == 255  # the prep key is gone
    done = ssh(
        port,
        fleet_key,
        "sw_vers -productVersion; uname -r; sudo -S -p '' pfctl -s info",
        user="m1",
        stdin=password + "\n",
    )
    assert (done.returncode, done.stdout.splitlines()[:2]) == (0, ["15.6", "24.0.0"])
    assert done.stdout.splitlines()[2].startswith("Status: Disabled")


def test_the_macos_shims_are_shellcheck_clean() -> None:
    shims = REPO / "vendorsim/sandbox/macos/shims"
    result = subprocess.run(
        ["shellcheck", "-x", *sorted(str(p) for p in shims.iterdir())],
        capture_output=True,
        text=True,
        cwd=shims,
    )
    assert (result.returncode, result.stdout) == (0, "")
