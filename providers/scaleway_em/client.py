"""Scaleway Elastic Metal client on the scaleway SDK (`baremetal.v1` + IAM ssh keys), vendor-neutral
outside. No Pulumi import.

One project holds every environment's servers, so the environment boundary is the fleet tag and
every list carries the project filter. Servers are pre-ordered and prepped by the operator; the
program claims them (a tag), joins them, and releases them by reinstalling: this client has no way
to order or delete a server.
"""

from __future__ import annotations

import logging

from scaleway.baremetal.v1 import BaremetalV1API, BaremetalV1PrivateNetworkAPI
from scaleway.baremetal.v1.types import Offer, Server

from providers.errors import VendorError, VendorInputError
from providers.scaleway_em.models import (
    VENDOR,
    box_from_server,
    install_state_of,
    parse_box_id,
    resolve_os,
    tags_with,
)
from providers.scaleway_sdk import PAGE_SIZE, Attachment, ProjectClient
from providers.vendor import (
    Box,
    Claim,
    InstallState,
    Reinstall,
    Vendor,
    boxes_with_marker,
    single_line_key,
    with_fleet_tags,
)

log = logging.getLogger(__name__)

_SERVER = "/baremetal/v1/zones/{zone}/servers/{server_id}"


class ElasticMetalClient(ProjectClient):
    """One Scaleway project's Elastic Metal servers, reached with an IAM API key."""

    VENDOR = VENDOR
    VENDOR_ENUM = Vendor.SCALEWAY_EM
    WHAT = "Elastic Metal"
    SERVER_PATH = _SERVER

    def _init_apis(self) -> None:
        self._api = self._api_of(BaremetalV1API)
        self._pn = self._api_of(BaremetalV1PrivateNetworkAPI)

    # --- boxes -------------------------------------------------------------------------------------

    def list_boxes(self) -> list[Box]:
        """Every server of the project in every configured zone."""
        return [box_from_server(s) for zone in self._zones for s in self._servers(zone)]

    def boxes_with_marker(self, marker: str) -> list[Box]:
        """The fleet's servers, filtered by tag on the API side (then checked again here)."""
        boxes = [box_from_server(s) for zone in self._zones for s in self._servers(zone, tags=[marker])]
        return boxes_with_marker(boxes, marker)

    def _servers(self, zone: str, *, tags: list[str] | None = None) -> list[Server]:
        return self._caller.call(
            "GET /baremetal/v1/zones/{zone}/servers",
            lambda: self._api.list_servers_all(
                zone=zone, project_id=self._project_id, tags=tags, page_size=PAGE_SIZE
            ),
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
        """PATCH the server's tags: every other tag kept in order, one claim tag at the end. The
        tag list is replaced as a whole, so it is read first."""
        zone, server_id = parse_box_id(box_id)
        current = list(self._server(box_id).tags or [])
        wanted = tags_with(current, claim)
        if wanted == current:
            return
        self._caller.call(
            f"PATCH {_SERVER}",
            lambda: self._api.update_server(zone=zone, server_id=server_id, tags=wanted),
            subject=box_id,
        )

    def set_marker_field(self, box_id: str, value: str) -> None:
        """Write the fleet tags (`value`: every tag but the claim's, joined by ","), keeping the claim
        tag. The PATCH replaces the whole list: safe to repeat."""
        zone, server_id = parse_box_id(box_id)
        current = list(self._server(box_id).tags or [])
        subject = f"Elastic Metal server {box_id}"
        wanted = with_fleet_tags(current, value, vendor=Vendor.SCALEWAY_EM, subject=subject)
        if wanted == current:
            return
        self._caller.call(
            f"PATCH {_SERVER}",
            lambda: self._api.update_server(zone=zone, server_id=server_id, tags=wanted),
            subject=box_id,
        )

    # --- install ---------------------------------------------------------------------------------

    def start_reinstall(
        self,
        box_id: str,
        *,
        hostname: str,
        ssh_public_key: str,
        user_login: str,
        user_password: str,
        os_label: str = "ubuntu_24.04",
    ) -> Reinstall:
        """POST .../install with the OS the label names among those the server's offer allows, the
        fleet key (an IAM key of the project) and, where the OS lets them be set, the login user and
        the fleet's sudo password; returns the install's ticket.

        An install already running (a retried release) is followed, not started again; so is one a
        409 `transient_state` refusal reveals. A lost answer is settled by reading the server's
        install record back (ProjectClient._start).
        """
        zone, server_id = parse_box_id(box_id)
        if not hostname:
            raise VendorInputError(f"Elastic Metal reinstall of {box_id}: hostname is empty")
        key = single_line_key(ssh_public_key, where=f"Elastic Metal reinstall of {box_id}")
        server = self._server(box_id)
        systems = self._caller.call(
            "GET /baremetal/v1/zones/{zone}/os",
            lambda: self._api.list_os_all(zone=zone, offer_id=server.offer_id, page_size=PAGE_SIZE),
            subject=box_id,
        )
        system = resolve_os(os_label, systems, box_id=box_id)
        user: str | None = None
        if system.user is not None:
            if system.user.editable:
                user = user_login
            elif system.user.default_value and system.user.default_value != user_login:
                # The fleet would dial a user the OS does not create.
                raise VendorInputError(
                    f"Elastic Metal OS {system.name} {system.version} logs in as "
                    f"{system.user.default_value!r}, not {user_login!r}: set the fleet's ssh_user"
                )
        password = user_password if system.password is not None and system.password.editable else None
        if system.password is not None and system.password.required and not password:
            raise VendorInputError(f"Elastic Metal reinstall of {box_id}: the OS requires a password")
        key_id = self._register_fleet_key(key, box_id=box_id)

        def post() -> None:
            self._caller.call(
                f"POST {_SERVER}/install",
                lambda: self._api.install_server(
                    zone=zone,
                    server_id=server_id,
                    os_id=system.id,
                    hostname=hostname,
                    ssh_key_ids=[key_id],
                    user=user,
                    password=password,
                ),
                subject=box_id,
                hidden=(user_password,),
            )

        ticket = self._start(box_id, post, lambda: self._progress(box_id), "install")
        log.info("Elastic Metal reinstall of %s with %s %s started", box_id, system.name, system.version)
        return ticket

    def _progress(self, box_id: str) -> tuple[InstallState, str]:
        """(install state, what identifies the server's last install: _install_identity)."""
        server = self._server(box_id)
        return install_state_of(server), _install_identity(server)

    def install_state(self, box_id: str, reinstall: Reinstall | None = None) -> InstallState:
        """From `server.install.status` (models.install_state_of). With a ticket whose install was
        not seen running yet, an end (`completed`, `error`) that still reads as before the POST (the
        same install record: a read just after it) is PENDING: the previous install's."""
        server = self._server(box_id)
        state = install_state_of(server)
        if reinstall is not None and reinstall.unseen_done(state, _install_identity(server)):
            return InstallState.PENDING
        return state

    # --- private networks --------------------------------------------------------------------------

    def attach_private_network(self, box_id: str, private_network_id: str) -> Attachment:
        """Attach the server to a Private Network, idempotently; call again until `ready`.

        Elastic Metal carries Private Network traffic only once the server's "Private Network"
        option is enabled (without it an attachment gets a VLAN that stays dark), so the option is
        added first and the attachment waits until it reads enabled.
        """
        zone, server_id = parse_box_id(box_id)
        if not private_network_id:
            raise VendorInputError(f"Elastic Metal private network for {box_id}: the id is empty")
        server = self._server(box_id)
        option = next((o for o in server.options or [] if o.private_network is not None), None)
        if option is None:
            offered = self._caller.call(
                "GET /baremetal/v1/zones/{zone}/options",
                lambda: self._api.list_options_all(zone=zone, offer_id=server.offer_id, page_size=PAGE_SIZE),
                subject=box_id,
            )
            found = next((o for o in offered if o.private_network is not None), None)
            if found is None:
                raise VendorError(
                    vendor=VENDOR,
                    call="GET /baremetal/v1/zones/{zone}/options",
                    subject=box_id,
                    message=f"offer {server.offer_name} has no Private Network option",
                )
            self._caller.call(
                f"POST {_SERVER}/options/{{option_id}}",
                lambda: self._api.add_option_server(zone=zone, server_id=server_id, option_id=found.id),
                subject=box_id,
            )
            return Attachment(private_network_id, "option_enabling", None)
        if str(option.status) != "option_status_enable":
            return Attachment(private_network_id, f"option {option.status}", None)
        return self._attach(
            self._pn,
            zone=zone,
            server_id=server_id,
            private_network_id=private_network_id,
            box_id=box_id,
            path="/baremetal/v1",
        )

    def detach_private_network(self, box_id: str, private_network_id: str) -> Attachment:
        """Take the server off a Private Network, idempotently; call again until `gone`.

        The DELETE is sent only while the server's list shows the attachment attached (or in
        error), so a server not (or no longer) attached costs one read; the attachment then reads
        `detaching` until Scaleway removes it. The Private Network option stays: it is the server's
        (billed with it), and the next attachment needs it."""
        zone, server_id = parse_box_id(box_id)
        if not private_network_id:
            raise VendorInputError(f"Elastic Metal private network for {box_id}: the id is empty")
        return self._detach(
            self._pn,
            zone=zone,
            server_id=server_id,
            private_network_id=private_network_id,
            box_id=box_id,
            path="/baremetal/v1",
        )

    def private_networks(self, box_id: str) -> list[Attachment]:
        """Every Private Network attachment of the server, whatever its status (one read)."""
        zone, server_id = parse_box_id(box_id)
        return self._attachments(
            self._pn, zone=zone, server_id=server_id, box_id=box_id, path="/baremetal/v1"
        )

    # --- catalogue -------------------------------------------------------------------------------

    def offer_of(self, box_id: str) -> Offer:
        """The server's offer: CPUs, memory, disks and price, for capacity and cost outputs."""
        zone, _ = parse_box_id(box_id)
        server = self._server(box_id)
        return self._caller.call(
            "GET /baremetal/v1/zones/{zone}/offers/{offer_id}",
            lambda: self._api.get_offer(zone=zone, offer_id=server.offer_id),
            subject=box_id,
        )

    # --- failover ----------------------------------------------------------------------------------

    def failover_target(self, ip: str) -> str | None:
        raise VendorInputError(
            f"failover IP {ip}: Elastic Metal moves addresses as flexible IPs, which this client "
            "does not drive; give the region a failover IP on another vendor"
        )

    def move_failover(self, ip: str, box_id: str) -> None:
        self.failover_target(ip)


def _install_identity(server: Server) -> str:
    """What tells the server's last install from the next: the install record has no id, so its
    parameters and status. Not the server's updated_at: a read half caught up with the POST (its
    updated_at moved, its install not yet) would pass the previous install's `completed` for this
    one's; an install with the same parameters counts once seen running instead."""
    install = server.install
    if install is None:
        return ""
    return repr([install.os_id, install.hostname, list(install.ssh_key_ids or []), str(install.status)])
