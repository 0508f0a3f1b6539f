"""What a preview warns about rather than refuses (config.rules.install_warnings; __main__ logs each as
a Pulumi warning): a Robot fleet with boxes to install and no Kata pin, a routed failover IP with one
box to go to, a NoExecute fleet taint."""

from __future__ import annotations

from config.loader import load_stack_config
from config.rules import install_warnings
from tests.config.stacks import stack_raw


def test_an_unpinned_robot_fleet_is_warned_about_by_name_and_key() -> None:
    cfg = load_stack_config(stack_raw("production"), stack="production")
    assert install_warnings(cfg) == [
        "fleets[name=runners-linux].install_artifacts.kata_static_sha256 is not pinned: any Robot box "
        "this fleet must still install is refused (the claim stops the up there, before any vendor "
        "write); pin the sha256 of kata-static-3.30.0-amd64.tar.zst"
    ]


def test_a_pinned_or_idle_robot_fleet_is_not() -> None:
    # dev pins its Kata (vendorsim serves the artifact).
    assert install_warnings(load_stack_config(stack_raw("dev"), stack="dev")) == []
    raw = stack_raw("production")
    raw["fleets"] = [dict(f, size=0) if f["vendor"] == "robot" else f for f in raw["fleets"]]
    assert install_warnings(load_stack_config(raw, stack="production")) == []


def test_a_routed_failover_ip_with_one_box_to_go_to_is_warned_about_outside_dev() -> None:
    raw = stack_raw("production")
    raw["failover_ips"] = [
        dict(f, address="62.210.16.61") if f["name"] == "kura-peer-eu-central" else f
        for f in raw["failover_ips"]
    ]
    warnings = install_warnings(load_stack_config(raw, stack="production"))
    assert warnings[1:] == [
        "regions[id=eu-central]: its failover IP kura-peer-eu-central has one box to go to "
        "(fleets[name=kura-dedibox].size: 1): when that box fails, the watcher has nowhere to move it "
        "and the region's peer plane is down until the box is back; grow the fleet to 2"
    ]
    # Parked (no address yet, as in the stack file): nothing is routed, nothing to say.
    assert install_warnings(load_stack_config(stack_raw("production"), stack="production"))[1:] == []
    # Two boxes: the IP has somewhere to go.
    raw["fleets"] = [dict(f, size=2) if f["name"] == "kura-dedibox" else f for f in raw["fleets"]]
    assert install_warnings(load_stack_config(raw, stack="production"))[1:] == []


def test_a_no_execute_fleet_taint_is_warned_about_in_every_environment() -> None:
    raw = stack_raw("dev")
    raw["fleets"] = [
        dict(f, taints=[{"key": "tuist.dev/kura-cache", "value": "true", "effect": "NoExecute"}])
        if f["name"] == "kura-ovh"
        else f
        for f in raw["fleets"]
    ]
    assert install_warnings(load_stack_config(raw, stack="dev")) == [
        "fleets[name=kura-ovh].taints[key=tuist.dev/kura-cache]: NoExecute evicts at once every pod on "
        "the fleet's boxes that lacks its toleration; added or changed in one up with the workloads, it "
        "takes down a region's gateways, demux and Kura pods together (docs/runbook.md \"Changing a "
        "fleet's node_pool or taints\"); prefer NoSchedule"
    ]
