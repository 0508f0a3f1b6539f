"""demux/failover-address.sh, the demux pod's init container, run with the machine's `ip` in a network
namespace of its own (a box's lo with whatever earlier runs and other software left on it)."""

from __future__ import annotations

import subprocess

from components.peer_demux import FAILOVER_ADDRESS_SCRIPT

OTHERS = "10.0.0.5/32"  # somebody else's address on lo: never touched


def run_on_a_box(before: list[str], *runs: list[str]) -> tuple[list[tuple[str, str]], str]:
    """lo brought up with `before` (ip addr add arguments), the script run once per entry of `runs`
    (its arguments); the IPv4 addresses on lo afterwards as (address, label), and stderr."""
    lines = ["set -eu", "ip link set lo up", f"ip addr add {OTHERS} dev lo"]
    lines += [f"ip addr add {spec} dev lo" for spec in before]
    lines += [f"sh {FAILOVER_ADDRESS_SCRIPT} {' '.join(args)}" for args in runs]
    lines.append("ip -4 -o addr show dev lo")
    done = subprocess.run(
        ["unshare", "--net", "sh", "-c", "\n".join(lines)], capture_output=True, text=True, timeout=30
    )
    assert done.returncode == 0, done.stderr
    found = []
    for line in done.stdout.splitlines():
        words = line.split("\\")[0].split()
        found.append((words[3], words[-1]))
    return sorted(found), done.stderr


def test_the_failover_ip_becomes_an_address_of_the_box_labelled_as_the_script_s() -> None:
    addresses, _ = run_on_a_box([], ["198.51.100.10"])
    assert addresses == sorted([("127.0.0.1/8", "lo"), (OTHERS, "lo"), ("198.51.100.10/32", "lo:failover")])


def test_a_second_run_changes_nothing() -> None:
    addresses, errors = run_on_a_box([], ["198.51.100.10"], ["198.51.100.10"])
    assert ("198.51.100.10/32", "lo:failover") in addresses and len(addresses) == 3
    assert errors == ""


def test_a_changed_failover_ip_takes_the_old_one_off_the_box() -> None:
    # The old IP may go back to the vendor and to another customer: a box that kept it would keep
    # that customer's packets for itself.
    addresses, errors = run_on_a_box([], ["198.51.100.10"], ["203.0.113.7"])
    assert addresses == sorted([("127.0.0.1/8", "lo"), (OTHERS, "lo"), ("203.0.113.7/32", "lo:failover")])
    assert "removing 198.51.100.10/32" in errors


def test_without_a_failover_ip_it_only_removes() -> None:
    addresses, _ = run_on_a_box(["198.51.100.10/32 label lo:failover"], [])
    assert addresses == sorted([("127.0.0.1/8", "lo"), (OTHERS, "lo")])


def test_an_address_added_without_the_label_is_relabelled_so_a_later_change_finds_it() -> None:
    addresses, _ = run_on_a_box(["198.51.100.10/32"], ["198.51.100.10"])
    assert ("198.51.100.10/32", "lo:failover") in addresses and len(addresses) == 3
    addresses, _ = run_on_a_box(["198.51.100.10/32"], ["198.51.100.10"], ["203.0.113.7"])
    assert [a for a, _ in addresses if a.startswith(("198.", "203."))] == ["203.0.113.7/32"]
