"""The I/O half of `kubectl pko`: the command line, API calls through :mod:`pko.kube`, output and exit codes.

Exit codes scripts can rely on: 0 done, 1 an error (the API server refused, a Stack is missing, no cluster), 2 bad
usage (argparse's own code). Errors are one line on stderr: the API server's message as it sent it (a bad
selector), or `stack NS/NAME not found`.

Must never: decide anything the pure :mod:`.view` can (state, selection, text), or import lightkube.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import sys
from collections.abc import AsyncIterator, Sequence
from typing import Any, TextIO

from pko import kube
from pko.api import names
from pko.api import stack as stack_api
from pko.cli.ctl import rolloutview, view
from pko.kube import errors, kubeconfig, objects, resources

LOGS_HELP = """\
The engine output of the Stack's current Update, else of its last one. The Pulumi CLI's output lives in the
workspace pod's `pulumi` container log (the agent prints each line of `pulumi up/preview/refresh/destroy` as it
runs); this reads it through the pods/log API, from the Update's start, and with -f follows it until the Update
completes. When there is no pod (the `local` runtime of `pko dev`, or a workspace scaled down or deleted), it
prints what the operator recorded instead: the Update's result message (with the CLI's error output) and the
Stack's events."""


class Failure(Exception):
    """A one-line error for stderr; exit code 1."""


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="kubectl pko", description="Operate Pulumi Stacks run by pko (or the Go "
                                  "Pulumi Kubernetes Operator).")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--kubeconfig", help="kubeconfig file (default: $KUBECONFIG, ~/.kube/config, in-cluster)")
    common.add_argument("--context", help="kubeconfig context (default: the current one)")
    common.add_argument("-n", "--namespace", help="namespace (default: the context's)")
    many = argparse.ArgumentParser(add_help=False)
    many.add_argument("-A", "--all-namespaces", action="store_true", help="every namespace")
    many.add_argument("-l", "--selector", help="label selector, as kubectl takes it (`env=prod,tier in (a,b)`)")
    sub = top.add_subparsers(dest="command", required=True, metavar="COMMAND")

    get = sub.add_parser("get", parents=[common, many], help="a table of Stacks: state, last update, failures, "
                         "next retry, suspended")
    get.add_argument("names", nargs="*", metavar="NAME")
    get.add_argument("-o", "--output", choices=["json", "yaml", "wide"], help="json/yaml: one item per Stack")

    retry = sub.add_parser("retry", parents=[common, many],
                           help="re-request reconciliation of Stalled or failing Stacks now "
                                "(annotation pulumi.com/reconciliation-request)")
    retry.add_argument("names", nargs="*", metavar="NAME")
    retry.add_argument("--all-stalled", action="store_true", help="every Stalled or failing Stack in scope")
    retry.add_argument("--force", action="store_true", help="also Stacks that are not failing (re-runs them)")

    for verb, what in (("suspend", "set spec.suspend: no new update starts (one in flight finishes)"),
                       ("resume", "clear spec.suspend: the Stack reconciles once, then as usual")):
        cmd = sub.add_parser(verb, parents=[common, many], help=what)
        cmd.add_argument("names", nargs="*", metavar="NAME")

    desc = sub.add_parser("describe", parents=[common], help="conditions, updates, events and workspace of a Stack")
    desc.add_argument("name", metavar="STACK")

    logs = sub.add_parser("logs", parents=[common], help="the engine output of the Stack's current or last Update",
                          description=LOGS_HELP)
    logs.add_argument("name", metavar="STACK")
    logs.add_argument("-f", "--follow", action="store_true", help="stream while the Update runs")

    rollout = sub.add_parser("rollout", help="steer a StackRollout (pko): status, pause, resume, promote, abort")
    verbs = rollout.add_subparsers(dest="verb", required=True, metavar="VERB")
    for verb, what in rolloutview.VERBS.items():
        cmd = verbs.add_parser(verb, parents=[common], help=what)
        cmd.add_argument("name", metavar="ROLLOUT")
        if verb == "status":
            cmd.add_argument("-w", "--wait", action="store_true", help="print again until the rollout ends")
            cmd.add_argument("--timeout", type=float, default=0, help="with --wait: give up after this many "
                             "seconds (exit 1; default: no limit)")
    return top


def _check_usage(args: argparse.Namespace, top: argparse.ArgumentParser) -> None:
    command = args.command
    if command in ("retry", "suspend", "resume"):
        chosen = [bool(args.names), bool(args.selector), bool(getattr(args, "all_stalled", False))]
        if sum(chosen) != 1:
            what = "NAME..., -l SELECTOR or --all-stalled" if command == "retry" else "NAME... or -l SELECTOR"
            top.error(f"{command}: give exactly one of {what}")
    if command in ("get", "retry", "suspend", "resume") and args.names and args.all_namespaces:
        top.error(f"{command}: a NAME needs one namespace, not -A")
    if args.all_namespaces and args.namespace:
        top.error("-A and -n exclude each other")


async def _stacks(kc: kube.Client, args: argparse.Namespace, namespace: str | None) -> list[stack_api.Stack]:
    """The Stacks a command acts on: by name (each must exist), else by selector (server-side), else all."""
    if args.names:
        found = []
        for name in args.names:
            found.append(stack_api.Stack.model_validate(await _get_stack(kc, name, namespace or "")))
        return found
    listing = await kc.list(resources.STACK, namespace, selector=args.selector)
    items = [stack_api.Stack.model_validate(o) for o in listing.items]
    return sorted(items, key=lambda s: (s.metadata.namespace or "", s.metadata.name or ""))


async def _get_stack(kc: kube.Client, name: str, namespace: str) -> dict[str, Any]:
    try:
        return await kc.get(resources.STACK, name, namespace)
    except kube.NotFound:
        raise Failure(f"stack {namespace}/{name} not found") from None


def _scope(args: argparse.Namespace, default: str) -> str | None:
    return None if getattr(args, "all_namespaces", False) else (args.namespace or default)


async def cmd_get(kc: kube.Client, args: argparse.Namespace, namespace: str | None, out: TextIO) -> int:
    stacks = await _stacks(kc, args, namespace)
    # Each Stack's Workspace has the Stack's name (pko.controllers.stack.workspace); one list, not one get each.
    workspaces = {(objects.namespace_of(w), objects.name_of(w)): w
                  for w in (await kc.list(resources.WORKSPACE, namespace)).items} if stacks else {}
    rows = [view.row_of(s, view.workspace_state(workspaces.get((s.metadata.namespace or "", s.metadata.name or ""))))
            for s in stacks]
    if args.output in ("json", "yaml"):
        out.write(view.dump(rows, args.output))
    elif not rows:
        print(f"No Stacks found{' in namespace ' + namespace if namespace else ''}.", file=sys.stderr)
    else:
        out.write(view.table(rows, _now(), wide=args.output == "wide", all_namespaces=namespace is None))
    return 0


async def cmd_retry(kc: kube.Client, args: argparse.Namespace, namespace: str | None, out: TextIO) -> int:
    stacks = await _stacks(kc, args, namespace)
    value = _now().strftime("retry-%Y%m%dT%H%M%S.%fZ")
    for stack, outcome in view.retry_plan(stacks, force=args.force):
        if args.all_stalled and outcome.startswith("skipped"):
            continue
        if outcome.startswith("retry requested"):
            await kc.patch(resources.STACK, stack.metadata.name or "", view.annotation_patch(value),
                           stack.metadata.namespace)
        out.write(f"stack {stack.metadata.namespace}/{stack.metadata.name}: {outcome}\n")
    if not stacks:
        print("No Stacks matched.", file=sys.stderr)
    return 0


async def cmd_suspend(kc: kube.Client, args: argparse.Namespace, namespace: str | None, out: TextIO) -> int:
    suspend = args.command == "suspend"
    stacks = await _stacks(kc, args, namespace)
    for stack in stacks:
        already = bool(stack.spec and stack.spec.suspend) == suspend
        if not already:
            # null removes the field: a resumed Stack's spec is the one the Go operator knows
            await kc.patch(resources.STACK, stack.metadata.name or "", {"spec": {"suspend": True if suspend else None}},
                           stack.metadata.namespace)
        state = "suspended" if suspend else "resumed"
        out.write(f"stack {stack.metadata.namespace}/{stack.metadata.name} "
                  f"{('already ' + state) if already and suspend else ('not suspended' if already else state)}\n")
    if not stacks:
        print("No Stacks matched.", file=sys.stderr)
    return 0


async def _workspace_and_pod(kc: kube.Client, name: str, namespace: str
                             ) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    workspace = await kc.get_or_none(resources.WORKSPACE, names.workspace_name(name), namespace)
    pod = await kc.get_or_none(resources.POD, names.workspace_pod_name(names.workspace_name(name)), namespace)
    return workspace, pod


async def _updates(kc: kube.Client, name: str, namespace: str) -> list[dict[str, Any]]:
    found = await kc.list(resources.UPDATE, namespace, labels={names.LABEL_STACK_NAME: name})
    return sorted(found.items, key=lambda u: (u["metadata"].get("creationTimestamp", ""), u["metadata"]["name"]))


async def _events(kc: kube.Client, name: str, namespace: str) -> list[dict[str, Any]]:
    found = await kc.list(resources.EVENT, namespace,
                          fields={"involvedObject.name": name, "involvedObject.kind": stack_api.KIND})
    return list(view.sorted_events(found.items))


async def cmd_describe(kc: kube.Client, args: argparse.Namespace, namespace: str, out: TextIO) -> int:
    stack = stack_api.Stack.model_validate(await _get_stack(kc, args.name, namespace))
    updates = (await _updates(kc, args.name, namespace))[-10:]
    workspace, pod = await _workspace_and_pod(kc, args.name, namespace)
    out.write(view.describe(stack, updates, await _events(kc, args.name, namespace), workspace, pod, _now()))
    return 0


async def cmd_logs(kc: kube.Client, args: argparse.Namespace, namespace: str, out: TextIO) -> int:
    stack = stack_api.Stack.model_validate(await _get_stack(kc, args.name, namespace))
    status = stack.status or stack_api.StackStatus()
    update_name = (status.current_update.name if status.current_update and status.current_update.name
                   else status.last_update.name if status.last_update else None)
    if not update_name:
        raise Failure(f"stack {namespace}/{args.name} has run no update yet")
    pod_name = names.workspace_pod_name(names.workspace_name(args.name))
    if await kc.get_or_none(resources.POD, pod_name, namespace) is not None:
        try:
            await _stream_pod(kc, pod_name, namespace, update_name, args.follow, out)
            return 0
        except errors.BadRequest as err:  # the container has not started yet
            print(f"pod {namespace}/{pod_name}: {err.message}", file=sys.stderr)
    return await _recorded(kc, args, namespace, update_name, out)


async def _stream_pod(kc: kube.Client, pod: str, namespace: str, update_name: str, follow: bool,
                      out: TextIO) -> None:
    """The pod's `pulumi` container log; with `follow`, until the Update completes (then a moment for the tail)."""
    print(f"# update {update_name}: workspace pod {namespace}/{pod}, container pulumi", file=sys.stderr)
    since = view.log_since(await kc.get_or_none(resources.UPDATE, update_name, namespace),
                           datetime.datetime.now(datetime.UTC))

    async def copy() -> None:
        async for line in kc.log(pod, namespace, container="pulumi", follow=follow, since_seconds=since):
            out.write(line)
            out.flush()

    if not follow:
        await copy()
        return
    task = asyncio.create_task(copy())
    try:
        async for _ in _until_complete(kc, update_name, namespace):
            if task.done():
                break
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(asyncio.shield(task), 2.0)
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def _until_complete(kc: kube.Client, update_name: str, namespace: str) -> AsyncIterator[None]:
    while True:
        update = await kc.get_or_none(resources.UPDATE, update_name, namespace)
        if update is None or view.update_complete(update):
            return
        yield
        await asyncio.sleep(1.0)


async def _recorded(kc: kube.Client, args: argparse.Namespace, namespace: str, update_name: str,
                    out: TextIO) -> int:
    """No pod to read: the Update's result message and the Stack's events, waiting for the result with -f."""
    print(f"# update {update_name}: no workspace pod (local runtime or scaled down); showing the Update's "
          "result and the Stack's events", file=sys.stderr)
    if args.follow:
        async for _ in _until_complete(kc, update_name, namespace):
            pass
    update = await kc.get_or_none(resources.UPDATE, update_name, namespace)
    if update is None:
        raise Failure(f"update {namespace}/{update_name} not found (deleted after its TTL?)")
    status = update.get("status") or {}
    out.write(f"update {update_name} ({(update.get('spec') or {}).get('type', '-')}): {view.update_state(update)}\n")
    if status.get("message"):
        out.write(status["message"].rstrip("\n") + "\n")
    for event in await _events(kc, args.name, namespace):
        out.write(f"event {event.get('type', '')} {event.get('reason', '')}: {event.get('message', '')}\n")
    return 0


async def cmd_rollout(kc: kube.Client, args: argparse.Namespace, namespace: str, out: TextIO) -> int:
    """`kubectl pko rollout VERB NAME`: a verb patches the StackRollout; status prints it (and waits)."""
    if args.verb != "status":
        try:
            await kc.patch(resources.STACK_ROLLOUT, args.name, rolloutview.patch_for(args.verb, _now()), namespace)
        except errors.NotFound as err:
            raise Failure(f"stackrollout {namespace}/{args.name} not found") from err
        out.write(f"stackrollout {namespace}/{args.name}: {args.verb} requested\n")
        return 0
    deadline = asyncio.get_running_loop().time() + args.timeout if args.timeout else None
    while True:
        found = await kc.get_or_none(resources.STACK_ROLLOUT, args.name, namespace)
        if found is None:
            raise Failure(f"stackrollout {namespace}/{args.name} not found")
        events = (await kc.list(resources.EVENT, namespace, fields={
            "involvedObject.kind": "StackRollout", "involvedObject.name": args.name})).items
        out.write(rolloutview.status_text(found, events))
        if rolloutview.ended(found) or not args.wait:
            phase = (found.get("status") or {}).get("phase")
            return 1 if args.wait and phase != "Completed" else 0
        if deadline is not None and asyncio.get_running_loop().time() > deadline:
            raise Failure(f"stackrollout {namespace}/{args.name} did not end within {args.timeout:g}s")
        out.write("\n")
        out.flush()
        await asyncio.sleep(5)


async def run(args: argparse.Namespace, out: TextIO) -> int:
    try:
        kc, default_namespace = kubeconfig.load(args.kubeconfig, args.context)
    except kubeconfig.ConfigError as err:
        raise Failure(str(err)) from err
    async with kc:
        namespace = _scope(args, default_namespace)
        if args.command == "get":
            return await cmd_get(kc, args, namespace, out)
        if args.command == "retry":
            return await cmd_retry(kc, args, namespace, out)
        if args.command in ("suspend", "resume"):
            return await cmd_suspend(kc, args, namespace, out)
        if args.command == "describe":
            return await cmd_describe(kc, args, namespace or default_namespace, out)
        if args.command == "rollout":
            return await cmd_rollout(kc, args, namespace or default_namespace, out)
        return await cmd_logs(kc, args, namespace or default_namespace, out)


def main(argv: Sequence[str] | None = None, out: TextIO | None = None) -> int:
    top = parser()
    args = top.parse_args(argv)
    if not hasattr(args, "all_namespaces"):
        args.all_namespaces = False
    if not hasattr(args, "names"):
        args.names = []
        args.selector = None
    _check_usage(args, top)
    try:
        return asyncio.run(run(args, out or sys.stdout))
    except Failure as err:
        print(f"error: {err}", file=sys.stderr)
    except kube.ApiError as err:
        print(f"error: {err.message or err}", file=sys.stderr)
    except KeyboardInterrupt:
        return 130
    except (OSError, errors.TransportError) as err:  # no route to the API server, refused connection, ...
        print(f"error: cannot reach the API server: {err}", file=sys.stderr)
    return 1


def console() -> None:
    """The `kubectl-pko` console script."""
    sys.exit(main())
