"""Scaleway Apple silicon client on the scaleway SDK (`applesilicon.v1alpha1` + IAM ssh keys),
vendor-neutral outside. No Pulumi import.

Mac minis are pre-ordered and prepped by the operator (Apple's licence makes every one a 24-hour
commitment at least); the program claims one by renaming it, bootstraps it over SSH, and releases it
by reinstalling macOS. This client has no way to order or delete a server.

What a reinstall leaves on a Mac: macOS, the login user Scaleway creates (`ssh_username`, `m1`), the
project's IAM ssh keys in its authorized keys, and a new sudo password Scaleway chose. So the fleet
key is registered in IAM before every reinstall, and the sudo password is read back with `login()`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from scaleway.applesilicon.v1alpha1 import ApplesiliconV1Alpha1API, ApplesiliconV1Alpha1PrivateNetworkAPI
from scaleway.applesilicon.v1alpha1.types import Server, ServerType

from providers.applesilicon.models import (
    VENDOR,
    MacLogin,
    box_from_server,
    compose_name,
    install_state_of,
    login_of,
    not_ready_status,
    parse_box_id,
    parse_name,
    resolve_os,
)
from providers.errors import TransientVendorError, VendorInputError
from providers.scaleway_sdk import PAGE_SIZE, Attachment, ProjectClient
from providers.vendor import Box, Claim, InstallState, Reinstall, Vendor, single_line_key

log = logging.getLogger(__name__)

_SERVER = "/apple-silicon/v1alpha1/zones/{zone}/servers/{server_id}"


class AppleSiliconClient(ProjectClient):
    """One Scaleway project's Apple silicon servers, reached with an IAM API key."""

    VENDOR = VENDOR
    VENDOR_ENUM = Vendor.APPLESILICON
    WHAT = "Apple silicon"
    SERVER_PATH = _SERVER

    def _init_apis(self) -> None:
        self._api = self._api_of(ApplesiliconV1Alpha1API)
        self._pn = self._api_of(ApplesiliconV1Alpha1PrivateNetworkAPI)

    # --- boxes -------------------------------------------------------------------------------------

    def list_boxes(self) -> list[Box]:
        """Every Mac of the project in every configured zone (the API has no name filter)."""
        return [box_from_server(s) for zone in self._zones for s in self._servers(zone)]

    def _servers(self, zone: str) -> list[Server]:
        return self._caller.call(
            "GET /apple-silicon/v1alpha1/zones/{zone}/servers",
            lambda: self._api.list_servers_all(zone=zone, project_id=self._project_id, page_size=PAGE_SIZE),
            subject=zone,
        )

    def get_box(self, box_id: str) -> Box:
        return box_from_server(self._server(box_id))

    def _server(self, box_id: str) -> Server:
        zone, server_id = parse_box_id(box_id)
        return self._caller.call(
            f"GET {_SERVER}",
            lambda: self._api.get_server(zone=zone, server_id=server_id),
            subject=box_id,
        )

    def set_claim(self, box_id: str, claim: Claim | None) -> None:
        """PATCH the server's name: the fleet part kept, the claim suffix replaced."""
        self._rewrite_name(box_id, lambda base, _claim: compose_name(base, claim))

    def set_marker_field(self, box_id: str, value: str) -> None:
        """PATCH the server's name: the fleet marker part replaced, the claim suffix kept. Safe to
        repeat."""
        self._rewrite_name(box_id, lambda _base, claim: compose_name(value, claim))

    def _rewrite_name(self, box_id: str, wanted_from: Callable[[str, Claim | None], str]) -> None:
        """Read the name, split into marker part and claim; PATCH what `wanted_from` makes of them,
        unless it is already there."""
        zone, server_id = parse_box_id(box_id)
        current = str(self._server(box_id).name or "")
        wanted = wanted_from(*parse_name(current))
        if wanted == current:
            return
        self._caller.call(
            f"PATCH {_SERVER}",
            lambda: self._api.update_server(zone=zone, server_id=server_id, name=wanted),
            subject=box_id,
        )

    # --- login ----------------------------------------------------------------------

    def login(self, box_id: str) -> MacLogin:
        """The Mac's login user and the sudo password Scaleway set at its last install (a secret)."""
        found = login_of(self._server(box_id))
        if not found.user:
            raise VendorInputError(f"Apple silicon server {box_id} reports no ssh_username")
        return found

    # --- reinstall -------------------------------------------------------------------------------

    def start_reinstall(
        self,
        box_id: str,
        *,
        hostname: str,
        ssh_public_key: str,
        user_login: str,
        user_password: str,
        os_label: str = "tahoe",
    ) -> Reinstall:
        """POST .../reinstall with the image `os_label` names, the fleet key registered in IAM first;
        returns the reinstall's ticket.

        macOS is reinstalled with Scaleway's own user and a sudo password Scaleway picks, so
        `user_login` must be the Mac's `ssh_username` and `user_password` is not sent; `hostname` is
        not either (the name carries the fleet marker). A reinstall already running (the Mac reads
        `reinstalling`: a retried release, or the one a 409 `transient_state` reveals) is followed,
        not started again; a lost answer is settled by reading the server back
        (ProjectClient._start). A Mac in any other transient status (rebooting, starting, busy,
        updating, locking, unlocking) runs no reinstall and takes none yet: TransientVendorError
        (`maybe_applied` False), nothing sent, and the release state retries until the Mac is
        `ready`. Following such a status instead would end the release on the next `ready` with
        the previous holder's data on the Mac.
        """
        del hostname, user_password  # not settable on Apple silicon (see above)
        zone, server_id = parse_box_id(box_id)
        single_line_key(ssh_public_key, where=f"Apple silicon reinstall of {box_id}")
        server = self._server(box_id)
        if server.ssh_username and user_login != server.ssh_username:
            raise VendorInputError(
                f"Apple silicon server {box_id} logs in as {server.ssh_username!r}, not {user_login!r}: "
                "set the fleet's ssh_user"
            )
        status = not_ready_status(server)
        if status is not None:
            # Nothing written for a Mac that takes no reinstall yet, not even the fleet key.
            raise self._not_ready(box_id, status)
        server_type = str(server.type_)
        systems = self._caller.call(
            "GET /apple-silicon/v1alpha1/zones/{zone}/os",
            lambda: self._api.list_os_all(zone=zone, server_type=server_type, page_size=PAGE_SIZE),
            subject=box_id,
        )
        system = resolve_os(os_label, systems, server_type=server_type, box_id=box_id)
        # Scaleway puts the project's IAM keys on a Mac when it installs macOS.
        self._register_fleet_key(ssh_public_key, box_id=box_id)

        def post() -> None:
            self._caller.call(
                f"POST {_SERVER}/reinstall",
                # Kernel extensions stay as the operator set them.
                lambda: self._api.reinstall_server(
                    zone=zone, server_id=server_id, os_id=system.id, enable_kext=bool(server.kext_enabled)
                ),
                subject=box_id,
            )

        ticket = self._start(box_id, post, lambda: self._progress(box_id), "reinstall")
        log.info("Apple silicon reinstall of %s with %s started", box_id, system.name)
        return ticket

    def _progress(self, box_id: str) -> tuple[InstallState, str]:
        """(reinstall state, what identifies the Mac's last install: its image, _install_identity).
        Raises TransientVendorError while the Mac is in a transient status other than
        `reinstalling` (models.NOT_READY): no reinstall can start from it, nor is one running."""
        server = self._server(box_id)
        status = not_ready_status(server)
        if status is not None:
            raise self._not_ready(box_id, status)
        return install_state_of(server), _install_identity(server)

    @staticmethod
    def _not_ready(box_id: str, status: str) -> TransientVendorError:
        """The Mac is `status` (models.NOT_READY): no reinstall runs and none can start yet. Worth
        retrying: the next attempt reads the Mac again before it sends anything, so nothing is sent
        twice for it (`maybe_applied` False; after a lost POST answer too, ProjectClient._start's
        read-back)."""
        return TransientVendorError(
            vendor=VENDOR,
            call=f"POST {_SERVER}/reinstall",
            subject=box_id,
            code="transient_state",
            message=f"the Mac is {status}, not reinstalling: the reinstall waits for it to be ready",
            maybe_applied=False,
        )

    def install_state(self, box_id: str, reinstall: Reinstall | None = None) -> InstallState:
        """From the server status (models.install_state_of): `reinstalling` runs, `ready` is done.
        start_reinstall returns a ticket only once the reinstall was accepted (the POST answered
        2xx) or seen running (`reinstalling` before the POST, on a read-back or after a 409), never
        for a Mac that was rebooting or otherwise busy. A `ready` (or `error`) read before the
        reinstall was seen running that still shows the Mac's image as before the POST (a read just
        after it) is PENDING: the previous install's, not this one's."""
        server = self._server(box_id)
        state = install_state_of(server)
        if reinstall is not None and reinstall.unseen_done(state, _install_identity(server)):
            return InstallState.PENDING
        return state

    # --- private networks --------------------------------------------------------------------------

    def attach_private_network(self, box_id: str, private_network_id: str) -> Attachment:
        """Attach the Mac to a Private Network, idempotently; call again until `ready`. The VPC
        option is switched on first (a toggle without reboot) and must read enabled before the
        attachment is made."""
        zone, server_id = parse_box_id(box_id)
        if not private_network_id:
            raise VendorInputError(f"Apple silicon private network for {box_id}: the id is empty")
        server = self._server(box_id)
        vpc = str(server.vpc_status)
        if vpc == "vpc_disabled":
            self._caller.call(
                f"PATCH {_SERVER}",
                lambda: self._api.update_server(zone=zone, server_id=server_id, enable_vpc=True),
                subject=box_id,
            )
            return Attachment(private_network_id, "vpc_updating", None)
        if vpc != "vpc_enabled":
            return Attachment(private_network_id, vpc, None)
        return self._attach(
            self._pn,
            zone=zone,
            server_id=server_id,
            private_network_id=private_network_id,
            box_id=box_id,
            path="/apple-silicon/v1alpha1",
        )

    # --- catalogue -------------------------------------------------------------------------------

    def server_type_of(self, box_id: str) -> ServerType:
        """The Mac's server type: CPU, memory, disk and minimum lease, for capacity outputs."""
        zone, _ = parse_box_id(box_id)
        server = self._server(box_id)
        return self._caller.call(
            "GET /apple-silicon/v1alpha1/zones/{zone}/server-type/{server_type}",
            lambda: self._api.get_server_type(zone=zone, server_type=str(server.type_)),
            subject=box_id,
        )

    # --- failover ----------------------------------------------------------------------------------

    def failover_target(self, ip: str) -> str | None:
        raise VendorInputError(f"failover IP {ip}: Apple silicon servers have no movable IP addresses")

    def move_failover(self, ip: str, box_id: str) -> None:
        self.failover_target(ip)


def _install_identity(server: Server) -> str:
    """What tells the Mac's last install from the next: its image. Not updated_at, which a read half
    caught up with the POST may show moved while the Mac still reads `ready`: a reinstall of the
    same image counts once seen `reinstalling` instead."""
    return server.os.id if server.os is not None else ""
