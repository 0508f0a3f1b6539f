"""Release: the box goes back to its fleet's pool, clean. Never cancelled, never terminated.

RELEASE_MARKING       the vendor marker says `releasing` (nobody else adopts a box being wiped)
RELEASE_REINSTALL     OVH / Dedibox: start the reinstall with the fleet key (an install already
                      running counts: a retried release, or OVH still busy)
RELEASE_WAIT_INSTALL  until the vendor reports it done (Dedibox reads DONE for an old install too,
                      so only a DONE after RUNNING is ours)
  Robot instead:      RESCUE_BOOT .. WAIT_NEW_HOST_KEY (providers/machine/robot_install.py)
RELEASE_CLEARING      the claim leaves the vendor marker; the fleet marker stays

Then the record is deleted. In production the release is refused unless the claim's inputs carry
both switches. No Pulumi import here.
"""

from __future__ import annotations

from providers.errors import TaskAlreadyExistsError
from providers.machine.fsm import DONE, FAILED, Complete, Continue, Failed, Result, Row, Run
from providers.machine.robot_install import install_rows
from providers.machine.spec import ClaimSpec, Vendor, node_name_for
from providers.vendor import Claim, InstallState, VendorClient

SEEN_RUNNING = "install_seen_running"


def release_refusal(spec: ClaimSpec) -> str | None:
    """Why a production release is refused, naming exactly the switch(es) to set; None if allowed."""
    if not spec.production:
        return None
    missing = []
    if not spec.allow_release:
        missing.append(f"fleets[name={spec.fleet}].allow_release: true")
    if not spec.allow_production_release:
        missing.append("allow_production_release: true")
    if not missing:
        return None
    return (
        f"{spec.resource_name}: refusing to release production box (fleet {spec.fleet}): releasing "
        f"reinstalls it. To allow it set {' and '.join(missing)} in Pulumi.production.yaml, run "
        "`pulumi up` so the claim records it, then unprotect and delete (config forbids "
        "allow_release on production Kura fleets)"
    )


def _client(run: Run) -> VendorClient:
    client: VendorClient = run.get("client")
    return client


def _claim(run: Run) -> ClaimSpec:
    spec: ClaimSpec = run.get("claim")
    return spec


def marking(run: Run) -> Result:
    _client(run).set_claim(run.box_id, Claim(_claim(run).token, releasing=True))
    return Complete()


def reinstall(run: Run) -> Result:
    spec, client, settings = _claim(run), _client(run), run.get("settings")
    try:
        client.start_reinstall(
            run.box_id,
            hostname=node_name_for(spec.fleet, run.box_id),
            ssh_public_key=settings.fleet_public_key,
            user_login=spec.ssh_user,
            user_password=settings.sudo_password,
            os_label=spec.os,
        )
    except TaskAlreadyExistsError:
        if client.install_state(run.box_id) is not InstallState.RUNNING:
            raise
        return Complete({SEEN_RUNNING: "true"})
    return Complete()


def wait_install(run: Run) -> Result:
    state = _client(run).install_state(run.box_id)
    if state is InstallState.FAILED:
        return Failed("InstallFailed", f"the {run.vendor.value} reinstall of {run.box_id} failed")
    if state is InstallState.RUNNING:
        run.facts[SEEN_RUNNING] = "true"
    if state is InstallState.DONE and (run.facts.get(SEEN_RUNNING) or run.vendor is Vendor.OVH):
        return Complete()
    return Continue(run.timeout("poll_interval"), "the reinstall to finish")


def clearing(run: Run) -> Result:
    _client(run).set_claim(run.box_id, None)
    return Complete()


def release_table(vendor: Vendor) -> dict[str, Row]:
    first_install = "RESCUE_BOOT" if vendor is Vendor.ROBOT else "RELEASE_REINSTALL"
    rows = {
        "RELEASE_MARKING": Row(
            "RELEASE_MARKING", marking, "release_marking", first_install, "RELEASE_MARKING"
        ),
        "RELEASE_CLEARING": Row("RELEASE_CLEARING", clearing, "release_clearing", DONE, "RELEASE_CLEARING"),
    }
    if vendor is Vendor.ROBOT:
        rows.update(install_rows(then="RELEASE_CLEARING"))
    else:
        rows["RELEASE_REINSTALL"] = Row(
            "RELEASE_REINSTALL", reinstall, "release_reinstall", "RELEASE_WAIT_INSTALL", "RELEASE_REINSTALL"
        )
        rows["RELEASE_WAIT_INSTALL"] = Row(
            "RELEASE_WAIT_INSTALL", wait_install, "release_wait_install", "RELEASE_CLEARING", FAILED
        )
    return rows
