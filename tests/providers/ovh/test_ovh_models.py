"""Pure OVH decisions: the storage plan, template choice, task states, disk groups."""

from __future__ import annotations

import pytest

from providers.errors import VendorInputError
from providers.ovh.models import (
    disk_groups_from_hardware,
    install_state_of_task,
    ip_block_segment,
    plan_storage,
    raid_level,
    resolve_template,
)
from providers.vendor import DiskGroup, InstallState


def layout(level: int) -> list[dict]:
    return [
        {"fileSystem": "ext4", "mountPoint": "/boot", "raidLevel": level, "size": 1024},
        {"fileSystem": "ext4", "mountPoint": "/", "raidLevel": level, "size": 65536},
        {"fileSystem": "xfs", "mountPoint": "/data", "raidLevel": level, "size": 0},
    ]


@pytest.mark.parametrize(
    ("disks", "level"), [(1, 0), (2, 1), (3, 1), (4, 10), (5, 1), (6, 10), (7, 1), (8, 10)]
)
def test_raid_level_rule(disks, level):
    assert raid_level(disks) == level


@pytest.mark.parametrize(
    ("groups", "chosen", "disks", "level"),
    [
        ([DiskGroup(1, 2, 512_000)], 1, 2, 1),
        # The larger raw capacity wins, whatever its order.
        ([DiskGroup(1, 2, 512_000), DiskGroup(2, 4, 1_920_000)], 2, 4, 10),
        ([DiskGroup(2, 4, 1_920_000), DiskGroup(1, 2, 512_000)], 2, 4, 10),
        # A tie goes to the lower diskGroupId.
        ([DiskGroup(3, 2, 1_000_000), DiskGroup(2, 1, 2_000_000)], 2, 1, 0),
        # Groups without disks are skipped.
        ([DiskGroup(1, 0, 9_000_000), DiskGroup(2, 3, 480_000)], 2, 3, 1),
    ],
)
def test_plan_storage_one_entry_on_largest_group(groups, chosen, disks, level):
    assert plan_storage(groups) == [
        {"diskGroupId": chosen, "partitioning": {"disks": disks, "layout": layout(level)}}
    ]


def test_plan_storage_refuses_without_usable_group():
    with pytest.raises(VendorInputError, match=r"OVH storage plan for ns1: no disk group with disks"):
        plan_storage([DiskGroup(1, 0, 1_000_000)], box_id="ns1")
    with pytest.raises(VendorInputError, match=r"no disk group with disks"):
        plan_storage([])
    with pytest.raises(VendorInputError, match=r"disk group 1 \(2 x 60000 MB, RAID 1\) cannot hold"):
        plan_storage([DiskGroup(1, 2, 60_000)])


def test_disk_groups_from_hardware_normalises_units():
    groups = disk_groups_from_hardware(
        {
            "diskGroups": [
                {
                    "diskGroupId": 1,
                    "numberOfDisks": 2,
                    "diskSize": {"unit": "GB", "value": 512},
                    "diskType": "SSD",
                },
                {"diskGroupId": 2, "numberOfDisks": 2, "diskSize": {"unit": "TB", "value": 1.92}},
            ]
        },
        box_id="ns1",
    )
    assert groups == [DiskGroup(1, 2, 512_000, "SSD"), DiskGroup(2, 2, 1_920_000, "")]
    with pytest.raises(VendorInputError, match=r"ns1 diskGroups\[0\]: unknown diskSize unit 'PB'"):
        disk_groups_from_hardware(
            {"diskGroups": [{"diskGroupId": 1, "diskSize": {"unit": "PB", "value": 1}}]}, box_id="ns1"
        )


def test_resolve_template_personal_first_then_ovh():
    compatible = {"ovh": ["ubuntu2204-server_64", "ubuntu2404-server_64"], "personal": ["my-ubuntu2404-kata"]}
    assert resolve_template("ubuntu_24.04", compatible) == "my-ubuntu2404-kata"
    assert resolve_template("ubuntu_22.04", compatible) == "ubuntu2204-server_64"
    with pytest.raises(
        VendorInputError, match=r"no OVH template matches OS 'debian_12'; compatible: my-ubuntu"
    ):
        resolve_template("debian_12", compatible)


def test_task_status_mapping_and_ip_segment():
    assert install_state_of_task("waitingAck") is InstallState.RUNNING
    assert install_state_of_task("problem") is InstallState.FAILED
    assert ip_block_segment("198.51.100.7") == "198.51.100.7%2F32"
    assert ip_block_segment("198.51.100.8/29") == "198.51.100.8%2F29"
