"""The *_read_after_post behaviours (vendorsim/faults.py BEHAVIOURS): the first read of a server's install
state just after an accepted reinstall POST answers the state from before the POST under
`previous_once` (a read the vendor has not caught up with the write yet), the current one under the
default `current`. Over real HTTP, raw, one vendor after another: Dedibox (GET .../install), Elastic
Metal and Apple silicon (GET .../servers/{id}).
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.vendorsim.conftest import Served, dedibox
from tests.vendorsim.test_dedibox import _install_body
from tests.vendorsim.test_scaleway_em import key_id, scw

DEDIBOX_Z = "/dedibox/v1/zones/fr-par-2"
EM_Z = "/baremetal/v1/zones/fr-par-2"
MAC_Z = "/apple-silicon/v1alpha1/zones/fr-par-3"
EM1 = "e1000000-0000-4000-8000-000000000001"
EM2 = "e1000000-0000-4000-8000-000000000002"
UBUNTU = "05000000-0000-4000-8000-000000000001"
MAC1 = "a5000000-0000-4000-8000-000000000001"
MAC2 = "a5000000-0000-4000-8000-000000000002"
TAHOE_26_1 = "0a500000-0000-4000-8000-000000000002"

BEHAVIOURS = (
    "dedibox.install_read_after_post",
    "scaleway_em.install_read_after_post",
    "applesilicon.reinstall_read_after_post",
)


def _behave(served: Served, name: str, value: str) -> None:
    r = served.admin("POST", "behaviour", {name: value})
    assert (r.status_code, r.json()[name]["value"]) == (200, value), r.text


def test_the_behaviours_are_listed_with_current_first_and_reset(served: Served) -> None:
    described = served.admin("GET", "behaviour").json()
    for name in BEHAVIOURS:
        assert described[name] == {"value": "current", "values": ["current", "previous_once"]}
    _behave(served, BEHAVIOURS[0], "previous_once")
    bad = served.admin("POST", "behaviour", {BEHAVIOURS[1]: "previous"})
    assert bad.status_code == 400
    assert "is not one of ['current', 'previous_once']" in bad.json()["error"]
    served.admin("POST", "reset")
    assert served.admin("GET", "behaviour").json()[BEHAVIOURS[0]]["value"] == "current"


# --- Dedibox: GET .../servers/{id}/install -----------------------------------------------------------


def _dedibox_install(served: Served, server_id: int = 200101) -> Any:
    r = dedibox(served, "POST", f"{DEDIBOX_Z}/servers/{server_id}/install", _install_body(served))
    assert (r.status_code, r.json()["status"]) == (200, "booting"), r.text
    return r


def _dedibox_read(served: Served, server_id: int = 200101) -> Any:
    return dedibox(served, "GET", f"{DEDIBOX_Z}/servers/{server_id}/install")


def test_dedibox_previous_once_answers_the_previous_record_once(served: Served) -> None:
    _dedibox_install(served)
    served.clock.advance(11)
    assert _dedibox_read(served).json()["status"] == "rebooting"  # finished unseen: read running once
    previous = _dedibox_read(served).json()
    assert previous["status"] == "installed"
    _behave(served, "dedibox.install_read_after_post", "previous_once")
    _dedibox_install(served)
    first = _dedibox_read(served)
    assert (first.status_code, first.json()) == (200, previous)
    second = _dedibox_read(served)
    assert (second.status_code, second.json()["status"]) == (200, "booting")
    # Consumed: the reads after the second are current too.
    assert _dedibox_read(served).json()["status"] == "booting"


def test_dedibox_previous_once_answers_the_404_of_no_record_once(served: Served) -> None:
    _behave(served, "dedibox.install_read_after_post", "previous_once")
    _dedibox_install(served)
    # The server itself is read current (only the install record is stale).
    assert dedibox(served, "GET", f"{DEDIBOX_Z}/servers/200101").json()["status"] == "installing"
    first = _dedibox_read(served)
    assert (first.status_code, first.json()) == (
        404,
        {
            "message": "resource is not found",
            "resource": "dedibox_server_install",
            "resource_id": "200101",
            "type": "not_found",
        },
    )
    second = _dedibox_read(served)
    assert (second.status_code, second.json()["status"]) == (200, "booting")


def test_dedibox_current_default_reads_the_new_install_at_once(served: Served) -> None:
    _dedibox_install(served)
    served.clock.advance(11)
    assert [_dedibox_read(served).json()["status"] for _ in range(2)] == ["rebooting", "installed"]
    _dedibox_install(served)
    first = _dedibox_read(served)
    assert (first.status_code, first.json()["status"]) == (200, "booting")


def test_dedibox_keeps_nothing_for_a_refused_post_and_per_server(served: Served) -> None:
    _behave(served, "dedibox.install_read_after_post", "previous_once")
    refused = dedibox(served, "POST", f"{DEDIBOX_Z}/servers/200101/install", _install_body(served, os_id=999))
    assert refused.status_code == 400
    assert _dedibox_read(served).status_code == 404  # no install: the current answer
    _dedibox_install(served)
    # A read of another server takes nothing of 200101's.
    assert _dedibox_read(served, 200102).status_code == 404
    assert _dedibox_read(served).status_code == 404
    assert _dedibox_read(served).json()["status"] == "booting"
    # A second POST while it runs is refused: it keeps nothing either.
    assert (
        dedibox(served, "POST", f"{DEDIBOX_Z}/servers/200101/install", _install_body(served)).status_code
        == 400
    )
    assert _dedibox_read(served).json()["status"] == "booting"


# --- Elastic Metal: GET /baremetal/v1/zones/{zone}/servers/{id} ----------------------------------------


def _em_install(served: Served, server_id: str = EM1, hostname: str = "kura-scw-1") -> Any:
    body = {"os_id": UBUNTU, "hostname": hostname, "ssh_key_ids": [key_id(served)]}
    r = scw(served, "POST", f"{EM_Z}/servers/{server_id}/install", body)
    assert (r.status_code, r.json()["install"]["status"]) == (200, "to_install"), r.text
    return r.json()


def _em_read(served: Served, server_id: str = EM1) -> Any:
    r = scw(served, "GET", f"{EM_Z}/servers/{server_id}")
    assert r.status_code == 200, r.text
    return r.json()


@pytest.mark.parametrize("earlier_install", [False, True])
def test_em_previous_once_answers_the_server_from_before_the_post_once(
    served: Served, earlier_install: bool
) -> None:
    if earlier_install:
        _em_install(served, hostname="kura-scw-0")
        served.clock.advance(11)
        assert _em_read(served)["install"]["status"] == "installing"  # finished unseen: read running once
    before = _em_read(served)
    served.clock.advance(60)  # so that the POST's updated_at differs
    _behave(served, "scaleway_em.install_read_after_post", "previous_once")
    posted = _em_install(served)
    assert posted["updated_at"] != before["updated_at"]
    first = _em_read(served)
    assert (first["install"], first["status"], first["updated_at"], first["ping_status"]) == (
        before["install"],
        before["status"],
        before["updated_at"],
        "ping_status_up",
    )
    assert first["install"] is None or first["install"]["status"] == "completed"
    # Only the single-server GET is stale: the list is current.
    listed = scw(served, "GET", f"{EM_Z}/servers").json()["servers"]
    assert next(s for s in listed if s["id"] == EM1)["install"]["status"] == "to_install"
    second = _em_read(served)
    assert (second["install"]["status"], second["install"]["hostname"], second["updated_at"]) == (
        "to_install",
        "kura-scw-1",
        posted["updated_at"],
    )
    served.clock.advance(6)
    assert _em_read(served)["install"]["status"] == "installing"


def test_em_current_default_reads_the_new_install_at_once(served: Served) -> None:
    served.clock.advance(60)
    posted = _em_install(served)
    first = _em_read(served)
    assert (first["install"]["status"], first["updated_at"]) == ("to_install", posted["updated_at"])


def test_em_previous_once_is_per_server(served: Served) -> None:
    before = _em_read(served)
    served.clock.advance(60)
    _behave(served, "scaleway_em.install_read_after_post", "previous_once")
    _em_install(served)
    assert _em_read(served, EM2)["id"] == EM2  # another server's read takes nothing
    assert _em_read(served)["updated_at"] == before["updated_at"]
    assert _em_read(served)["install"]["status"] == "to_install"


# --- Apple silicon: GET /apple-silicon/v1alpha1/zones/{zone}/servers/{id} --------------------------------


def _mac_reinstall(served: Served, server_id: str = MAC1) -> Any:
    body = {"enable_kext": False, "os_id": TAHOE_26_1}
    r = scw(served, "POST", f"{MAC_Z}/servers/{server_id}/reinstall", body)
    assert (r.status_code, r.json()["status"]) == (200, "reinstalling"), r.text
    return r.json()


def _mac_read(served: Served, server_id: str = MAC1) -> Any:
    r = scw(served, "GET", f"{MAC_Z}/servers/{server_id}")
    assert r.status_code == 200, r.text
    return r.json()


def test_mac_previous_once_answers_the_mac_from_before_the_post_once(served: Served) -> None:
    before = _mac_read(served)
    assert before["status"] == "ready"
    served.clock.advance(60)  # so that the POST's updated_at differs
    _behave(served, "applesilicon.reinstall_read_after_post", "previous_once")
    posted = _mac_reinstall(served)
    assert posted["updated_at"] != before["updated_at"]
    first = _mac_read(served)
    assert (first["status"], first["updated_at"], first["os"]) == (
        "ready",
        before["updated_at"],
        before["os"],
    )
    # Only the single-server GET is stale: the list is current.
    listed = scw(served, "GET", f"{MAC_Z}/servers").json()["servers"]
    assert next(s for s in listed if s["id"] == MAC1)["status"] == "reinstalling"
    second = _mac_read(served)
    assert (second["status"], second["updated_at"]) == ("reinstalling", posted["updated_at"])
    assert _mac_read(served)["status"] == "reinstalling"


def test_mac_current_default_reads_reinstalling_at_once(served: Served) -> None:
    posted = _mac_reinstall(served)
    first = _mac_read(served)
    assert (first["status"], first["updated_at"]) == ("reinstalling", posted["updated_at"])


def test_mac_keeps_nothing_for_a_refused_post_and_is_per_server(served: Served) -> None:
    _behave(served, "applesilicon.reinstall_read_after_post", "previous_once")
    refused = scw(served, "POST", f"{MAC_Z}/servers/{MAC1}/reinstall", {"os_id": TAHOE_26_1})
    assert refused.status_code == 400
    before = _mac_read(served)
    served.clock.advance(60)
    _mac_reinstall(served)
    assert _mac_read(served, MAC2)["id"] == MAC2
    assert _mac_read(served)["updated_at"] == before["updated_at"]
    assert _mac_read(served)["status"] == "reinstalling"
    # A reinstall during the reinstall is refused (409): it keeps nothing.
    assert scw(served, "POST", f"{MAC_Z}/servers/{MAC1}/reinstall", {"enable_kext": False}).status_code == 409
    assert _mac_read(served)["status"] == "reinstalling"


def test_set_back_to_current_before_the_read_answers_current(served: Served) -> None:
    _behave(served, "applesilicon.reinstall_read_after_post", "previous_once")
    _mac_reinstall(served)
    _behave(served, "applesilicon.reinstall_read_after_post", "current")
    assert _mac_read(served)["status"] == "reinstalling"
    _behave(served, "applesilicon.reinstall_read_after_post", "previous_once")
    assert _mac_read(served)["status"] == "reinstalling"  # the kept answer was dropped


def test_dedibox_an_install_finished_before_any_read_is_read_in_progress_once(served: Served) -> None:
    """Time runs faster in the sim than for a client: a real install lasts 10 to 30 minutes, so a client
    polling at most a minute apart always reads it in progress. Two identical installs in a row would
    otherwise read exactly alike, and a client that waits to see its install running (reference 2.4:
    "done but never observed in progress: keep waiting") would wait forever."""
    _dedibox_install(served)
    served.clock.advance(11)
    assert [_dedibox_read(served).json()["status"] for _ in range(2)] == ["rebooting", "installed"]
    _dedibox_install(served)
    assert _dedibox_read(served).json()["status"] == "booting"  # read running: nothing held back
    served.clock.advance(11)
    assert _dedibox_read(served).json()["status"] == "installed"
    # The box itself was reinstalled when the install finished, read or not.
    assert dedibox(served, "GET", f"{DEDIBOX_Z}/servers/200101").json()["status"] == "ready"


def test_em_an_install_finished_before_any_read_is_read_in_progress_once(served: Served) -> None:
    """As Dedibox's: two identical installs in a row read alike once done; a client polling a real
    install (many minutes) reads it running at least once, and so does one polling vendorsim's."""
    _em_install(served, hostname="kura-scw-0")
    served.clock.advance(11)
    assert [_em_read(served)["install"]["status"] for _ in range(2)] == ["installing", "completed"]


def test_mac_a_reinstall_finished_before_any_read_is_read_in_progress_once(served: Served) -> None:
    """As Dedibox's: a Mac reinstalled twice with one image reads alike once done; a client polling a
    real reinstall (many minutes) reads it running at least once, and so does one polling vendorsim's."""
    _mac_reinstall(served)
    served.clock.advance(11)
    assert [_mac_read(served)["status"] for _ in range(2)] == ["reinstalling", "ready"]
