"""Each box shows its offer's CPU threads and memory to the kubelet (vendorsim/inventory.py
OFFER_HARDWARE, or the server's own `hardware`): the dev stack's Nodes get an AX42-U's capacity."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from vendorsim.inventory import InventoryError, box_hardware, load_inventory

DEV_INVENTORY = Path(__file__).resolve().parents[2] / "vendorsim" / "inventory.dev.yaml"


def test_each_dev_box_has_its_offers_threads_and_memory() -> None:
    hardware = box_hardware(load_inventory(DEV_INVENTORY))
    shown = {key: (h.threads, h.memory_gib) for key, h in hardware.items()}
    assert shown["robot-2345601"] == (16, 64)  # AX42-U: Ryzen 7 PRO 8700GE, 64 GB
    assert shown["robot-2345606"] == (96, 256)  # AX162-R: EPYC 9454P, 256 GB
    assert shown["ovh-ns1001.ip-203-0-113.net"] == (12, 32)  # Advance-1 2024: EPYC 4244P, 32 GB
    assert shown["dedibox-200101"] == (8, 16)  # Start-1-M-SSD: Atom C2750, 16 GB
    # Elastic Metal: the offer's cores with SMT and its memory; a Mac: its server type's cores, no SMT.
    assert shown["em-e1000000-0000-4000-8000-000000000001"] == (12, 64)  # EM-A610R-NVME: Ryzen PRO 3600
    assert shown["em-e1000000-0000-4000-8000-000000000003"] == (16, 64)  # EM-B220E-NVME: Xeon E-2288G
    assert shown["mac-a5000000-0000-4000-8000-000000000001"] == (10, 32)  # M2-L: M2 Pro
    assert shown["mac-a5000000-0000-4000-8000-000000000007"] == (10, 16)  # M4-S: M4


def test_a_servers_own_hardware_wins_and_an_unknown_offer_must_list_it(tmp_path: Path) -> None:
    doc = yaml.safe_load(DEV_INVENTORY.read_text())
    doc["dedibox"]["servers"][0]["hardware"] = {"threads": 4, "memory_gib": 8}
    doc["ovh"]["servers"][0]["commercial_range"] = "Rise-3"
    path = tmp_path / "inventory.yaml"
    path.write_text(yaml.safe_dump(doc))
    with pytest.raises(InventoryError) as caught:
        load_inventory(path)
    assert str(caught.value) == (
        f"inventory {path} is invalid:\n  ovh.servers[0]: hardware: commercial_range 'Rise-3' has no known "
        "threads and memory (known: AX42-U, AX162-R, Advance-1-2024, Start-1-M-SSD); "
        "list them as hardware: {threads, memory_gib}"
    )
    doc["ovh"]["servers"][0]["hardware"] = {"threads": 24, "memory_gib": 128}
    path.write_text(yaml.safe_dump(doc))
    hardware = box_hardware(load_inventory(path))
    assert (hardware["dedibox-200101"].threads, hardware["dedibox-200101"].memory_gib) == (4, 8)
    assert (
        hardware["ovh-ns1001.ip-203-0-113.net"].threads,
        hardware["ovh-ns1001.ip-203-0-113.net"].memory_gib,
    ) == (
        24,
        128,
    )
