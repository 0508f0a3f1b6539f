"""Robot's hourly request budgets against the production fleet (Pulumi.production.yaml).

The calls one Robot box costs are counted by vendorsim (which enforces Robot's documented limits)
while the real client runs a box's whole life: claim, install through rescue, release through
rescue. Those counts times the production fleet must stay inside every budget within one hour,
and the failover watchers' polling inside half of theirs.
"""

from __future__ import annotations

from pathlib import Path

from config.loader import read_stack_file
from providers.retry import PollPolicy, RetryPolicy
from providers.robot.client import RobotClient
from providers.robot.models import RATE_LIMITS, RATE_WINDOW_S
from providers.vendor import Claim, Vendor
from watcher.mover import min_poll_seconds

REPO = Path(__file__).resolve().parents[3]
KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIJpselPEwoXIjP2bkKTBeNMrbyt7kCy0a+yHcLfRN+W7 tuist-dev-fleet"
BOX = "2345602"


def production_robot_fleet() -> tuple[int, int]:
    """(Robot boxes, Robot failover IPs) of the production stack."""
    raw = read_stack_file(REPO / "Pulumi.production.yaml")
    robot_fleets = {f["name"] for f in raw["fleets"] if f["vendor"] == Vendor.ROBOT.value}
    boxes = sum(int(f["size"]) for f in raw["fleets"] if f["name"] in robot_fleets)
    ips = sum(1 for ip in raw.get("failover_ips") or [] if ip["vendor"] == Vendor.ROBOT.value)
    return boxes, ips


def one_box_life(client: RobotClient) -> None:
    """The Robot calls of one box, as the machine provider sequences them (adopt, then release)."""
    boxes = client.list_boxes()
    assert BOX in {b.id for b in boxes}
    client.set_claim(BOX, Claim("0123456789ab"))
    assert client.get_box(BOX).claim == Claim("0123456789ab")
    for _ in ("adopt", "release"):
        fingerprint = client.register_ssh_key("tuist-fleet", KEY)
        client.activate_rescue(BOX, fingerprint)
        client.reset(BOX, "hw")  # into rescue
        client.reset(BOX, "hw")  # into the installed OS
    client.set_claim(BOX, Claim("0123456789ab", releasing=True))
    client.set_claim(BOX, None)


def test_a_production_sized_robot_fleet_fits_every_hourly_budget(vendorsim):
    client = RobotClient(
        api_url=f"{vendorsim.url}/robot",
        username="dev-robot-user",
        password="dev-robot-password",
        retry=RetryPolicy(max_attempts=1),
        poll=PollPolicy(first=0.05, max_interval=0.05),
    )
    one_box_life(client)
    per_box = vendorsim.admin("GET", "/state")["robot"]["requests_this_hour"]
    boxes, failover_ips = production_robot_fleet()
    assert boxes >= 1
    # The whole fleet adopted and released within one hour, every box at once.
    over = {
        route: (count * boxes, RATE_LIMITS[_client_route(route)])
        for route, count in per_box.items()
        if count * boxes > RATE_LIMITS[_client_route(route)]
    }
    assert over == {}, f"{boxes} Robot boxes exceed Robot's hourly budgets: {over}"
    # Resets are the scarcest: two per install, 50 an hour.
    assert per_box["POST /reset/<n>"] == 4
    # The watchers of the Robot failover IPs, each polling GET /failover/{ip} at its floor, spend
    # at most half of that budget between them.
    if failover_ips:
        interval = min_poll_seconds(Vendor.ROBOT, watchers=failover_ips)
        assert failover_ips * RATE_WINDOW_S / interval <= RATE_LIMITS["GET /failover/{ip}"] / 2


def test_the_watcher_poll_floor_keeps_half_the_budget():
    assert min_poll_seconds(Vendor.ROBOT) == 72.0  # 100 calls an hour, half of them: one every 72 s
    assert min_poll_seconds(Vendor.ROBOT, watchers=3) == 216.0
    assert min_poll_seconds(Vendor.OVH) == 0.0


def _client_route(route: str) -> str:
    return route.replace("<n>", "{server-number}").replace("<ip>", "{ip}")
