"""`tuist-ops` (or `python -m ops`): the operator's CLI over a stack's boxes, claims and failover IPs.

Every command takes `-s STACK` and reads that stack's config and secrets through the Pulumi CLI, as
`pulumi up` does (docs/runbook.md says when to run which). Writes go only through the vendor clients
in providers/. Tables go to stdout (`--json` for scripts); progress, notes and errors go to stderr.
A refused or failed command prints one `error:` line and exits 1 having written nothing it cannot
finish on a rerun.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer

from providers.lazy import lazy_module

if TYPE_CHECKING:
    from rich.console import Console

    from ops import boxes as box_ops
    from ops import estate, orphans
    from ops import failover as failover_ops
    from ops import stack as stack_ops
    from ops.stack import Stack, StackSource
    from providers.clients import ClientTiming
else:
    # Every runbook step is a tuist-ops process of its own. A command's modules (and the config models,
    # vendor clients, SSH, Kubernetes and rich behind them) are imported when it first uses them, so
    # --help and the read-only commands do not pay for prep's or a failover move's
    # (tests/ops/test_imports.py).
    box_ops = lazy_module("ops.boxes")
    estate = lazy_module("ops.estate")
    failover_ops = lazy_module("ops.failover")
    orphans = lazy_module("ops.orphans")
    stack_ops = lazy_module("ops.stack")

MOVE_STATE_EVERY = 5.0  # seconds between reads of a failover move's progress (Dedibox pages every IP)

app = typer.Typer(
    name="tuist-ops",
    help="Operate a tuist-infra stack's bare-metal boxes: prep, mark, inventory, orphans, failover.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
failover_app = typer.Typer(
    help="Where each region's failover IP routes, and moving it by hand.", no_args_is_help=True
)
app.add_typer(failover_app, name="failover")


@dataclass
class Context:
    """What the commands are built from. Tests hand in their own (a stack given as data, short retries)."""

    source: Callable[[str], StackSource] = field(default=lambda name: stack_ops.PulumiStack(name))
    timing: ClientTiming = field(default_factory=lambda: stack_ops.CLI_TIMING)
    project_dir: Path | None = None
    width: int | None = None
    # Whether someone is at a terminal to answer a question (the reinstall's).
    interactive: Callable[[], bool] = field(default=lambda: sys.stdin.isatty())


StackOpt = Annotated[
    str, typer.Option("--stack", "-s", envvar="TUIST_OPS_STACK", help="The Pulumi stack (dev, staging, ...).")
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Machine-readable output on stdout.")]
DryRunOpt = Annotated[bool, typer.Option("--dry-run", help="Print what would be done; write nothing.")]
FleetOpt = Annotated[
    str | None,
    typer.Option("--fleet", "-f", help="The fleet (needed when the stack has several of the vendor)."),
]
YesOpt = Annotated[
    bool,
    typer.Option("--yes", "-y", help="Reinstall without asking (a run with no terminal must say so)."),
]
BoxArg = Annotated[
    str, typer.Argument(help="The box: [<vendor>:]<box id>, e.g. ovh:ns1007.ip-203-0-113.net.")
]


def _consoles(ctx: typer.Context) -> tuple[Console, Console]:
    from rich.console import Console

    width = _context(ctx).width
    out = Console(width=width) if width else Console()
    err = Console(stderr=True, width=width) if width else Console(stderr=True)
    return out, err


def _context(ctx: typer.Context) -> Context:
    obj = ctx.find_root().obj
    return obj if isinstance(obj, Context) else Context()


def _fail(err: Console, message: str) -> NoReturn:
    err.print(f"error: {message}", markup=False, highlight=False, soft_wrap=True)
    raise typer.Exit(1)


@contextmanager
def _stack(ctx: typer.Context, name: str) -> Iterator[tuple[Stack, Console, Console]]:
    """The opened stack and the consoles; an OpsError anywhere inside becomes one scrubbed line."""
    from providers.errors import InfraError
    from providers.kube import KubeError

    out, err = _consoles(ctx)
    context = _context(ctx)
    source = context.source(name)
    stack: Stack | None = None
    try:
        stack = stack_ops.open_stack(source, timing=context.timing, project_dir=context.project_dir)
        stack.warn = lambda line: err.print(f"warning: {line}", markup=False, highlight=False, soft_wrap=True)
        yield stack, out, err
    except (stack_ops.OpsError, InfraError, KubeError) as error:
        # A provider error that got this far (a claim record that changed meanwhile, say) is still
        # one line for the operator; anything else is a bug and keeps its traceback.
        message = stack.scrub(str(error)) if stack is not None else str(error)
        _fail(err, " ".join(message.split("\n")))
    finally:
        source.close()


def _confirm_wipe(ctx: typer.Context, err: Console, box: str, yes: bool) -> None:
    """A reinstall wipes the box's disks: `pulumi destroy`'s rule, asked at a terminal, --yes elsewhere.
    Asked after the plan is printed and before anything is written."""
    if yes:
        return
    if not _context(ctx).interactive():
        _fail(
            err,
            f"{box}: the reinstall wipes its disks; nothing was changed. Rerun with --yes (after --dry-run "
            "has shown the plan), or at a terminal to be asked",
        )
    if not typer.confirm(f"Reinstall {box}, wiping its disks?", default=False, err=True):
        _fail(err, f"{box}: not confirmed; nothing was changed")


def _say(err: Console) -> Callable[[str], None]:
    return lambda line: err.print(line, markup=False, highlight=False, soft_wrap=True)


def _print_json(out: Console, value: Any) -> None:
    out.print_json(json.dumps(value), highlight=False)


# --- inventory ------------------------------------------------------------------------------------------


@app.command()
def inventory(
    ctx: typer.Context,
    stack_name: StackOpt,
    as_json: JsonOpt = False,
    vendor: Annotated[str | None, typer.Option(help="Only this vendor's boxes.")] = None,
) -> None:
    """Every box of the stack's vendor accounts: marker, claim holder, state, Node and whether it is Ready."""
    from rich.table import Table

    from providers.vendor import Vendor

    with _stack(ctx, stack_name) as (stack, out, err):
        vendors = None
        if vendor is not None:
            try:
                vendors = [Vendor(vendor)]
            except ValueError:
                raise stack_ops.OpsError(
                    f"--vendor {vendor!r} is not one of {', '.join(v.value for v in Vendor)}"
                ) from None
            if vendors[0] not in stack.vendors():
                raise stack_ops.OpsError(f"stack {stack.name} has no {vendor} account")
        rows, nodes, problems = estate.inventory(stack, vendors)
        for problem in problems:
            err.print(f"warning: {problem}", markup=False, highlight=False, soft_wrap=True)
        if nodes.status not in ("ok", "no cluster"):
            err.print(f"warning: cluster {nodes.status}; Node Ready shows unknown", markup=False)
        if as_json:
            # `problems` says what the list lacks: a vendor that did not answer has no rows in it.
            doc = {"stack": stack.name, "cluster": nodes.status, "boxes": [r.as_json() for r in rows]}
            _print_json(out, {**doc, "problems": problems})
        else:
            table = Table(title=f"stack {stack.name}: {len(rows)} boxes (cluster: {nodes.status})")
            for column in ("box", "vendor", "dc", "marker", "holder", "state", "node", "ready"):
                table.add_column(column, overflow="fold")
            for r in rows:
                table.add_row(
                    r.box,
                    r.vendor,
                    r.datacenter,
                    r.marker,
                    r.holder or "",
                    r.state,
                    r.node or "",
                    r.node_ready,
                )
            out.print(table)
        if problems:
            raise typer.Exit(1)


# --- prep / mark / unmark / unclaim ---------------------------------------------------------------------


@app.command()
def prep(
    ctx: typer.Context,
    stack_name: StackOpt,
    box: BoxArg,
    fleet: FleetOpt = None,
    reinstall: Annotated[
        bool, typer.Option("--reinstall", help="Reinstall even if the box looks ready.")
    ] = False,
    dry_run: DryRunOpt = False,
    yes: YesOpt = False,
) -> None:
    """Make an OVH or Dedibox box ready for the fleet: Ubuntu with the fleet key and sudo password
    (reinstalled where needed, after asking, or with --yes), reachable over SSH, /data checked. Refuses
    claimed and foreign boxes."""
    with _stack(ctx, stack_name) as (stack, _out, err):
        ref = estate.parse_box(stack, box, stack.fleet(fleet) if fleet else None)
        plan = box_ops.plan_prep(stack, ref, fleet, force_reinstall=reinstall)
        for line in box_ops.describe_prep(stack, plan):
            _say(err)(line)
        if dry_run:
            _say(err)("dry run: nothing was changed")
            return
        if plan.reinstall and not plan.following:
            _confirm_wipe(ctx, err, str(ref), yes)
        box_ops.run_prep(stack, plan, err, _say(err))
        # A stack with several fleets of the vendor (production's two OVH regions): mark needs the fleet.
        several = len(stack.fleets_of(ref.vendor)) > 1
        _say(err)(f"next: tuist-ops mark -s {stack.name} {ref}" + (f" --fleet {plan.fleet.name}" * several))


def _mark(
    ctx: typer.Context, stack_name: str, box: str, fleet: str | None, dry_run: bool, unmark: bool
) -> None:
    with _stack(ctx, stack_name) as (stack, _out, err):
        ref = estate.parse_box(stack, box, stack.fleet(fleet) if fleet else None)
        plan = box_ops.plan_mark(stack, ref, fleet, unmark=unmark)
        _say(err)(box_ops.describe_mark(stack, plan, unmark=unmark))
        if dry_run:
            if plan.changes:
                _say(err)("dry run: nothing was changed")
            return
        box_ops.run_mark(stack, plan)
        if plan.changes and plan.fleet is not None:
            _say(err)(f"{ref}: {'unmarked' if unmark else 'marked'} for fleet {plan.fleet.name}")


@app.command()
def mark(
    ctx: typer.Context, stack_name: StackOpt, box: BoxArg, fleet: FleetOpt = None, dry_run: DryRunOpt = False
) -> None:
    """Stamp the fleet marker on a box (OVH displayName, Dedibox or Elastic Metal tag, Robot server_name).
    Refuses foreign boxes, and claimed ones but those the fleet's own slots hold (after the fleet's
    marker was renamed; their claims are kept); a box already marked is left as it is."""
    _mark(ctx, stack_name, box, fleet, dry_run, unmark=False)


@app.command()
def unmark(
    ctx: typer.Context, stack_name: StackOpt, box: BoxArg, fleet: FleetOpt = None, dry_run: DryRunOpt = False
) -> None:
    """Remove the fleet marker a box carries, so no deploy adopts it (--fleet, when given, must be the
    fleet whose marker it carries). Refuses claimed and foreign boxes."""
    _mark(ctx, stack_name, box, fleet, dry_run, unmark=True)


@app.command()
def unclaim(
    ctx: typer.Context,
    stack_name: StackOpt,
    box: BoxArg,
    no_reinstall: Annotated[
        bool, typer.Option("--no-reinstall", help="Only clear the claim (the box never ran anything).")
    ] = False,
    force: Annotated[
        bool,
        typer.Option(
            "--force",
            help="Also for a claim the stack's state holds or no stack is known for (never another stack's).",
        ),
    ] = False,
    dry_run: DryRunOpt = False,
    yes: YesOpt = False,
) -> None:
    """Return a box whose claim nobody holds to its pool, as a release does: mark it releasing, reinstall
    it (after asking, or with --yes), clear the claim. Also finishes a release that got stuck."""
    with _stack(ctx, stack_name) as (stack, _out, err):
        ref = estate.parse_box(stack, box)
        plan = box_ops.plan_unclaim(
            stack, ref, reinstall=not no_reinstall, force=force, nodes=estate.Nodes(stack)
        )
        for line in box_ops.describe_unclaim(stack, plan):
            _say(err)(line)
        if dry_run:
            _say(err)("dry run: nothing was changed")
            return
        if plan.reinstall:
            _confirm_wipe(ctx, err, str(ref), yes)
        box_ops.run_unclaim(stack, plan, err, _say(err))


@app.command()
def hostkey(ctx: typer.Context, stack_name: StackOpt, box: BoxArg) -> None:
    """The SSH host key a box answers with now, against the pin the stack's state holds for it. Exits 1
    on a mismatch (docs/runbook.md: host-key mismatch)."""
    with _stack(ctx, stack_name) as (stack, out, _err):
        ref = estate.parse_box(stack, box)
        check = box_ops.check_host_key(stack, ref)
        say = _say(out)
        say(f"{ref} at {check.address or '?'}: answers with {check.seen or f'nothing ({check.problem})'}")
        if not check.pinned:
            say("  no AdoptedMachine in state pins a key for it")
        for machine, pin in check.pinned.items():
            verdict = "matches" if pin == check.seen else "MISMATCH"
            say(f"  {machine} pins {pin}: {verdict}")
        if check.pinned and not check.matches:
            raise stack_ops.OpsError(
                f"{ref}: the box's host key is not the one state pins; do not accept it until you know why "
                "(docs/runbook.md: host-key mismatch)"
            )


@app.command()
def urn(
    ctx: typer.Context,
    stack_name: StackOpt,
    box: BoxArg,
    machine: Annotated[bool, typer.Option("--machine", help="The AdoptedMachine's URN instead.")] = False,
) -> None:
    """The URN of the MachineClaim in the stack's state that holds the box (or of its AdoptedMachine),
    alone on stdout: for `pulumi up --replace`, `--target` and `pulumi state unprotect`."""
    with _stack(ctx, stack_name) as (stack, out, _err):
        ref = estate.parse_box(stack, box)
        kind = stack_ops.MACHINE_TYPE if machine else stack_ops.CLAIM_TYPE
        urns = [
            str(r.get("urn"))
            for r in stack.source.resources()
            if r.get("type") == kind
            and (r.get("outputs") or {}).get("box_id") == ref.box_id
            and (r.get("outputs") or {}).get("vendor", ref.vendor.value) == ref.vendor.value
        ]
        what = kind.rsplit(":", 1)[-1]
        if not urns:
            raise stack_ops.OpsError(f"{ref}: no {what} in stack {stack.name}'s state holds it")
        if len(urns) > 1:
            # Its output goes to `pulumi state unprotect` and `--target`: never one picked at random.
            raise stack_ops.OpsError(
                f"{ref}: {len(urns)} {what}s in stack {stack.name}'s state hold it ({', '.join(urns)}); "
                "find out which one really holds it before passing a URN to pulumi"
            )
        out.print(urns[0], markup=False, highlight=False, soft_wrap=True)


# --- orphans ----------------------------------------------------------------------------------------------


@app.command("orphans")
def orphans_command(ctx: typer.Context, stack_name: StackOpt, as_json: JsonOpt = False) -> None:
    """Claims no state holds and state whose box lost its claim, each with the command that fixes it."""
    from rich.table import Table

    with _stack(ctx, stack_name) as (stack, out, err):
        findings, problems = orphans.find_orphans(stack)
        for problem in problems:
            err.print(f"warning: {problem}", markup=False, highlight=False, soft_wrap=True)
        if as_json:
            doc = {"stack": stack.name, "findings": [f.as_json() for f in findings], "problems": problems}
            _print_json(out, doc)
        elif not findings:
            out.print(f"stack {stack.name}: no orphans", markup=False)
        else:
            table = Table(title=f"stack {stack.name}: {len(findings)} orphans")
            for column in ("kind", "box", "detail", "fix"):
                table.add_column(column, overflow="fold")
            for f in findings:
                table.add_row(f.kind, f.box, f.detail, f.fix)
            out.print(table)
        if problems:
            raise typer.Exit(1)


# --- failover -------------------------------------------------------------------------------------------


@failover_app.command("status")
def failover_status(
    ctx: typer.Context,
    stack_name: StackOpt,
    region: Annotated[str | None, typer.Argument(help="Only this region.")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Per region: where the failover IP routes now, each box of its fleet, and why a box may not carry it."""
    from rich.table import Table

    with _stack(ctx, stack_name) as (stack, out, _err):
        routes = failover_ops.status(stack, region)
        if as_json:
            _print_json(out, {"stack": stack.name, "regions": [r.as_json() for r in routes]})
            return
        for r in routes:
            where = r.routed_to or "unrouted"
            head = f"region {r.region}: {r.ip_name} {r.address or '(parked)'} on {r.vendor} -> {where}"
            out.print(head, markup=False, highlight=False)
            if r.problem:
                out.print(f"  {r.problem}", markup=False, highlight=False)
                continue
            out.print(f"  eligibility from {r.source}", markup=False, highlight=False)
            table = Table(show_edge=False)
            for column in ("box", "node", "eligible", "why not", ""):
                table.add_column(column, overflow="fold")
            for c in r.candidates:
                here = "routed here" if c.box == r.routed_to else ""
                table.add_row(c.box, c.node or "", "yes" if c.eligible else "no", c.why_not or "", here)
            out.print(table)
            if r.placement is None:
                out.print(
                    "  no eligible box: the IP stays where it is "
                    "(docs/runbook.md: failover with no eligible box)",
                    markup=False,
                )
            elif r.placement != r.routed_to:
                out.print(f"  placement would move it to {r.placement}", markup=False, highlight=False)


@failover_app.command("move")
def failover_move(
    ctx: typer.Context,
    stack_name: StackOpt,
    region: Annotated[str, typer.Argument(help="The region whose failover IP moves.")],
    box: Annotated[str, typer.Argument(help="The box id to route it to.")],
    force: Annotated[bool, typer.Option("--force", help="Move to a box that is not eligible.")] = False,
    dry_run: DryRunOpt = False,
) -> None:
    """Route a region's failover IP to a box of its fleet, with the program's own mover. Refuses a box
    that is not eligible unless --force."""
    from ops.waiting import spinner
    from providers.vendor import FailoverMoveReader, Vendor

    with _stack(ctx, stack_name) as (stack, _out, err):
        plan = failover_ops.plan_move(stack, region, box, force=force)
        r = plan.route
        note = f" (not eligible: {plan.forced_past}; --force)" if plan.forced_past else ""
        if plan.unchecked:
            note += f" (eligibility not checked: {plan.unchecked}; --force)"
        if r.routed_to == plan.target:
            _say(err)(f"region {region}: {r.address} already routes to {plan.target}; nothing to do")
            return
        _say(err)(
            f"region {region}: move {r.address} from {r.routed_to or 'unrouted'} to {plan.target}{note}"
        )
        if dry_run:
            _say(err)("dry run: nothing was changed")
            return
        # The client waits for the vendor's move task itself (OVH task, Dedibox attach) and reads the
        # route back; Ctrl-C here leaves the move to the vendor, and a rerun reads the route first.
        # The line shows the vendor's move task (OVH task, Dedibox IP status) and where it routes the
        # IP now, read every MOVE_STATE_EVERY seconds with a client of its own. Not for Robot: its
        # move has no task, and its failover reads share an hourly budget with the watcher.
        vendor = Vendor(r.vendor)
        address, reader = r.address, stack.new_client(vendor)
        assert address is not None  # plan_move refuses a region without a failover IP

        def vendor_route() -> str:
            routed = f"routed to {reader.failover_target(address) or 'nothing'}"
            task = reader.failover_move_state(address) if isinstance(reader, FailoverMoveReader) else None
            return f"{task}; {routed}" if task else routed

        state = None if vendor is Vendor.ROBOT else vendor_route
        with spinner(err, f"moving {r.address} to {plan.target}", state=state, every=MOVE_STATE_EVERY):
            routed = failover_ops.run_move(stack, plan)
        _say(err)(f"region {region}: {r.address} now routes to {routed}")


def main() -> None:
    try:
        app()
    except KeyboardInterrupt:
        sys.stderr.write("interrupted\n")
        raise SystemExit(130) from None
