"""Contract: vendorsim's responses have the shape the real APIs document.

contract/{ovh,robot}/*.json are documented example bodies: vendorsim's body for the same call
must have the same keys, recursively, with values of the same JSON type (null in the example
means "nullable, any type"). Dedibox bodies go through the scaleway SDK's own unmarshal
functions, which must not raise and must keep every field the documented example sets.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from scaleway.dedibox.v1 import marshalling as dedibox_m
from scaleway.iam.v1alpha1 import marshalling as iam_m

from tests.vendorsim.conftest import Served, dedibox, ovh_signed, robot

CONTRACT = Path(__file__).parent / "contract"
SVC = "ns1001.ip-203-0-113.net"
KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIJpselPEwoXIjP2bkKTBeNMrbyt7kCy0a+yHcLfRN+W7 fleet"


def _doc(vendor: str, name: str) -> Any:
    return json.loads((CONTRACT / vendor / f"{name}.json").read_text())


def _json_type(v: Any) -> str:
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, int | float):
        return "number"
    return {str: "string", list: "array", dict: "object"}.get(type(v), "null")


# Keys the vendor documents as nullable although its example shows a value.
NULLABLE = frozenset({"linked_storagebox"})


def shape_differences(doc: Any, got: Any, where: str = "$") -> list[str]:
    if doc is None or (got is None and where.rsplit(".", 1)[-1] in NULLABLE):
        return []
    if _json_type(doc) != _json_type(got):
        return [f"{where}: documented {_json_type(doc)}, got {_json_type(got)} ({got!r})"]
    if isinstance(doc, dict):
        problems = [f"{where}.{k}: documented key missing" for k in sorted(set(doc) - set(got))]
        problems += [f"{where}.{k}: key not in the documented shape" for k in sorted(set(got) - set(doc))]
        for k in sorted(set(doc) & set(got)):
            problems += shape_differences(doc[k], got[k], f"{where}.{k}")
        return problems
    if isinstance(doc, list) and doc:
        return [p for i, item in enumerate(got) for p in shape_differences(doc[0], item, f"{where}[{i}]")]
    return []


def test_shape_comparison_catches_drift() -> None:
    doc = {"a": 1, "b": {"c": "x"}, "d": [{"e": True}], "n": None}
    assert shape_differences(doc, {"a": 2, "b": {"c": "y"}, "d": [{"e": False}], "n": 5}) == []
    assert shape_differences(doc, {"a": "2", "b": {}, "d": [{"e": 1}], "n": None, "z": 0}) == [
        "$.z: key not in the documented shape",
        "$.a: documented number, got string ('2')",
        "$.b.c: documented key missing",
        "$.d[0].e: documented boolean, got number (1)",
    ]


OVH_CALLS: list[tuple[str, str, str, Any]] = [
    ("dedicated_server", "GET", f"/dedicated/server/{SVC}", None),
    ("service_infos", "GET", f"/dedicated/server/{SVC}/serviceInfos", None),
    ("service", "GET", "/services/10001001", None),
    ("hardware", "GET", f"/dedicated/server/{SVC}/specifications/hardware", None),
    ("compatible_templates", "GET", f"/dedicated/server/{SVC}/install/compatibleTemplates", None),
    (
        "task",
        "POST",
        f"/dedicated/server/{SVC}/reinstall",
        {"operatingSystem": "ubuntu2404-server_64", "customizations": {"hostname": "h", "sshKey": KEY}},
    ),
    ("ip", "GET", f"/ip/{quote('198.51.100.10/32', safe='')}", None),
    ("ip_task", "POST", f"/ip/{quote('198.51.100.10/32', safe='')}/move", {"to": "ns1002.ip-203-0-113.net"}),
]


@pytest.mark.parametrize(("name", "method", "path", "body"), OVH_CALLS, ids=[c[0] for c in OVH_CALLS])
def test_ovh_matches_documented_shape(served: Served, name: str, method: str, path: str, body: Any) -> None:
    r = ovh_signed(served, method, path, body)
    assert r.status_code == 200, r.text
    assert shape_differences(_doc("ovh", name), r.json()) == []


def test_robot_matches_documented_shapes(served: Served) -> None:
    n = 2345601
    check: list[tuple[str, Any]] = [
        ("server_list_item", robot(served, "GET", "/server").json()[0]),
        ("server", robot(served, "GET", f"/server/{n}").json()),
        (
            "server",
            robot(served, "POST", f"/server/{n}", {"server_name": "tuist-bm-dev-1--c-0123456789ab"}).json(),
        ),
        ("key", robot(served, "POST", "/key", {"name": "fleet", "data": KEY}).json()),
        ("rescue_inactive", robot(served, "GET", f"/boot/{n}/rescue").json()),
        ("reset_options", robot(served, "GET", f"/reset/{n}").json()),
        ("failover", robot(served, "GET", "/failover/198.51.100.30").json()),
        ("error_invalid_input", robot(served, "POST", f"/server/{n}", {}).json()),
    ]
    fingerprint = robot(served, "GET", "/key").json()[0]["key"]["fingerprint"]
    check.append(
        (
            "rescue_active",
            robot(served, "POST", f"/boot/{n}/rescue", {"os": "linux", "authorized_key": fingerprint}).json(),
        )
    )
    check.append(("reset", robot(served, "POST", f"/reset/{n}", {"type": "hw"}).json()))
    for _ in range(49):
        robot(served, "POST", f"/reset/{n}", {"type": "sw"})
    check.append(("error_rate_limit", robot(served, "POST", f"/reset/{n}", {"type": "sw"}).json()))
    for name, got in check:
        assert shape_differences(_doc("robot", name), got) == [], name


def _kept_fields(doc_obj: Any, got_obj: Any, where: str = "$") -> list[str]:
    """Every field the documented example sets must come through the SDK set in ours too."""
    problems = []
    for f in dataclasses.fields(doc_obj):
        want, have = getattr(doc_obj, f.name), getattr(got_obj, f.name)
        if want is None:
            continue
        if have is None:
            problems.append(f"{where}.{f.name}: documented, lost by vendorsim")
        elif dataclasses.is_dataclass(want) and dataclasses.is_dataclass(have):
            problems += _kept_fields(want, have, f"{where}.{f.name}")
        elif isinstance(want, list) and want and dataclasses.is_dataclass(want[0]):
            if not have:
                problems.append(f"{where}.{f.name}: documented non-empty, empty from vendorsim")
            else:
                problems += _kept_fields(want[0], have[0], f"{where}.{f.name}[0]")
    return problems


def _dedibox_key(served: Served) -> str:
    r = dedibox(
        served,
        "POST",
        "/iam/v1alpha1/ssh-keys",
        {"name": "fleet", "public_key": KEY, "project_id": served.inventory.credentials.dedibox.project_id},
    )
    return str(r.json()["id"])


def test_dedibox_decodes_with_the_scaleway_sdk(served: Served) -> None:
    project = served.inventory.credentials.dedibox.project_id
    z = "/dedibox/v1/zones/fr-par-2"
    key_id = _dedibox_key(served)
    cases: list[tuple[str, Callable[[Any], Any], Any]] = [
        ("server", dedibox_m.unmarshal_Server, dedibox(served, "GET", f"{z}/servers/200101").json()),
        (
            "list_servers",
            dedibox_m.unmarshal_ListServersResponse,
            dedibox(served, "GET", f"{z}/servers", params={"project_id": project}).json(),
        ),
        (
            "list_os",
            dedibox_m.unmarshal_ListOSResponse,
            dedibox(served, "GET", f"{z}/os", params={"server_id": 200101}).json(),
        ),
        (
            "failover_ip",
            dedibox_m.unmarshal_FailoverIP,
            dedibox(served, "GET", f"{z}/failover-ips/3001").json(),
        ),
        (
            "ssh_key",
            iam_m.unmarshal_SSHKey,
            dedibox(served, "GET", f"/iam/v1alpha1/ssh-keys/{key_id}").json(),
        ),
        (
            "server_install",
            dedibox_m.unmarshal_ServerInstall,
            dedibox(
                served,
                "POST",
                f"{z}/servers/200101/install",
                {
                    "os_id": 501,
                    "hostname": "sd-200101",
                    "user_login": "tuist",
                    "user_password": "dev-only-sudo",
                    "ssh_key_ids": [key_id],
                },
            ).json(),
        ),
    ]
    for name, unmarshal, body in cases:
        doc = _doc("dedibox", name)
        documented, ours = unmarshal(doc), unmarshal(body)
        assert _kept_fields(documented, ours) == [], name
        assert shape_differences(doc, body) == [], name
    # The list endpoints for failover IPs decode too.
    fips = dedibox(served, "GET", f"{z}/failover-ips", params={"project_id": project}).json()
    assert len(dedibox_m.unmarshal_ListFailoverIPsResponse(fips).failover_ips) == 3
