"""/artifacts/<file>: the release artifacts the Robot post-install downloads, served over real HTTP, with
the bytes the dev stack pins in Pulumi.dev.yaml."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
import requests
import yaml

from tests.vendorsim.conftest import Served
from vendorsim import artifacts

REPO = Path(__file__).resolve().parents[2]


def dev_pins() -> dict[str, str]:
    doc = yaml.safe_load((REPO / "Pulumi.dev.yaml").read_text())
    (robot_fleet,) = [f for f in doc["config"]["tuist-infra:fleets"] if f["vendor"] == "robot"]
    return dict(robot_fleet["install_artifacts"])


def test_each_artifact_is_served_with_the_sha256_the_dev_stack_pins(served: Served) -> None:
    pins = dev_pins()
    served_sums = {}
    for name in artifacts.FILES:
        first = requests.get(f"{served.url}/artifacts/{name}", timeout=5)
        again = requests.get(f"{served.url}/artifacts/{name}", timeout=5)
        assert (first.status_code, first.headers["Content-Type"]) == (200, "application/octet-stream")
        assert first.content == again.content == (artifacts.ARTIFACTS_DIR / name).read_bytes()
        served_sums[name] = hashlib.sha256(first.content).hexdigest()
    assert pins == {
        "runc_url": f"http://127.0.0.1:8710/artifacts/{artifacts.RUNC}",
        "runc_sha256": served_sums[artifacts.RUNC],
        "containerd_url": f"http://127.0.0.1:8710/artifacts/{artifacts.CONTAINERD}",
        "containerd_sha256": served_sums[artifacts.CONTAINERD],
        "kata_static_url": f"http://127.0.0.1:8710/artifacts/{artifacts.KATA_STATIC}",
        "kata_static_sha256": served_sums[artifacts.KATA_STATIC],
    }
    # The Mac fleet's node agent, pinned the same way.
    doc = yaml.safe_load((REPO / "Pulumi.dev.yaml").read_text())
    (mac_fleet,) = [f for f in doc["config"]["tuist-infra:fleets"] if f["vendor"] == "applesilicon"]
    assert mac_fleet["node_agent"] == {
        "url": f"http://127.0.0.1:8710/artifacts/{artifacts.NODE_AGENT}",
        "sha256": served_sums[artifacts.NODE_AGENT],
        "registers_node": False,
    }


def test_rebuilding_the_artifacts_gives_the_same_bytes(tmp_path: Path) -> None:
    # The committed files are what `python -m vendorsim.artifacts` makes: a rebuild must not move a pin.
    artifacts.build(tmp_path)
    for name in artifacts.FILES:
        assert (tmp_path / name).read_bytes() == (artifacts.ARTIFACTS_DIR / name).read_bytes(), name


@pytest.mark.parametrize(
    "name",
    ["runc.arm64", "..%2Finventory.py", "%2E%2E%2Fapp.py", "", "artifacts.py"],
)
def test_anything_else_is_404_naming_what_is_served(served: Served, name: str) -> None:
    r = requests.get(f"{served.url}/artifacts/{name}", timeout=5)
    assert r.status_code == 404
    assert r.json()["message"].endswith(
        "; vendorsim serves runc.amd64, containerd-2.2.3-linux-amd64.tar.gz, "
        "kata-static-3.30.0-amd64.tar.zst, tart-kubelet-darwin-arm64"
    )


def test_an_artifact_is_read_only(served: Served) -> None:
    r = requests.post(f"{served.url}/artifacts/{artifacts.RUNC}", data=b"x", timeout=5)
    assert (r.status_code, r.json()) == (405, {"message": "method POST not allowed on /artifacts/runc.amd64"})
    assert served.admin("GET", "audit").json()["entries"] == []


def test_unknown_artifact_message_names_the_file(served: Served) -> None:
    r = requests.get(f"{served.url}/artifacts/kata-static-3.31.0-amd64.tar.zst", timeout=5)
    assert (r.status_code, r.json()) == (
        404,
        {
            "message": "no artifact 'kata-static-3.31.0-amd64.tar.zst'; vendorsim serves runc.amd64, "
            "containerd-2.2.3-linux-amd64.tar.gz, kata-static-3.30.0-amd64.tar.zst, tart-kubelet-darwin-arm64"
        },
    )
