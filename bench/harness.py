"""`python -m bench <scenario|all> [--operators pko,go] [--stacks N] ...`: start a fresh real cluster from the test
bed, install each operator in turn from its own Helm chart (pko's chart with pko's image, the reference's chart with
its image), run the scenarios against it, and print the figures side by side with pko/Go ratios.

Why one operator at a time on one cluster: both are measured on the same node, program, pod requests and API
server, and neither competes with the other for the two cores. `run` is the part the smoke test calls on the
interop tier's cluster.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from bench import bed as b
from bench import localfleet, report
from bench.scenarios import SCENARIOS, Context, Figures
from bench.workload import PLUGIN_IMAGES, PROGRAMS, Realistic
from pko.kube import client as kclient
from pko.testing import cluster, gitserver, images, mirror, objectstore, ociregistry, pluginimages
from pko.testing.clusterbed import PKO_IMAGE

#: The scenarios that run a fleet through pko's pool (`--max-active-workspaces`) and can stop at a deadline.
POOLED = ("fleet", "killed")


async def run(real_cluster: cluster.Cluster, kc: kclient.Client, scenarios: Sequence[str],
              operators: Sequence[str], *, stacks: int, changes: int, idle_seconds: float, sleep_seconds: float,
              git: gitserver.GitServer | None = None, say: Callable[[str], None] = print,
              workload: Realistic | None = None, dependency_cache: bool = True,
              together: bool = False, pool: int | None = None, deadline: float | None = None,
              share_volume: str | None = None, plugin_images: bool = False,
              agent_image_volume: bool = False) -> report.Results:
    """Every scenario against every operator, one operator installed at a time; figures by scenario and operator.
    `workload`: the realistic program every Stack runs (None: the small YAML Program); `dependency_cache`: pko
    serves it through its dependency cache. `together`: an operator's scenarios run at once, each in namespaces of
    its own, and those that disturb the operator after them, alone — for the smoke test, which checks that every
    figure is produced and compares none; a benchmark runs them one at a time, so none skews another's figures.
    `pool`: pko's --max-active-workspaces (the Go operator has none); `deadline`: how long the fleet scenario waits
    before it reports the Stacks Ready by then; `share_volume`: pko's --workspace-share-volume-size (each
    workspace's /share on a claim kept while it sleeps); `plugin_images`: pko's Stacks of the realistic program
    mount its plugins from image volumes; `agent_image_volume`: pko's workspace pods mount the agent image instead
    of copying the agent (--workspace-agent-image-volume)."""
    results: report.Results = {name: {} for name in scenarios}
    ctx = Context(real_cluster, kc, stacks=stacks, changes=changes, idle_seconds=idle_seconds,
                  sleep_seconds=sleep_seconds, git=git, say=say, workload=workload, deadline=deadline)
    for op_name in operators:
        operator = b.OPERATORS[op_name]
        values: list[str] = []
        if workload is not None:
            workload.through_cache = op_name == "pko" and dependency_cache
            workload.through_plugin_images = op_name == "pko" and plugin_images
            values = workload.operator_values()
        pooled = pool is not None and op_name == "pko"
        if pooled:
            values.append(f"controller.maxActiveWorkspaces={pool}")
        if share_volume and op_name == "pko":
            values.append(f"controller.workspaceShareVolume.size={share_volume}")
        if agent_image_volume and op_name == "pko":
            values.append("controller.workspaceAgentImageVolume=true")
        say(f"== {operator.name}: installing from its chart"
            + (" (its dependency cache on, the mirrors as upstreams)" if workload is not None and workload.through_cache
               else "") + (f" (a pool of {pool})" if pooled else "")
            + (f" (each workspace's /share on a {share_volume} claim)" if share_volume and op_name == "pko" else "")
            + (" (plugins from image volumes)" if workload is not None and workload.through_plugin_images else "")
            + (" (the agent from an image volume)" if agent_image_volume and op_name == "pko" else ""))
        operator.install(real_cluster, *values, git_ca=git.ca_pem if git is not None else None)
        try:
            for batch in _batches(scenarios, together):
                results_of = await asyncio.gather(*(_one(ctx, operator, name) for name in batch))
                for name, figures in zip(batch, results_of, strict=True):
                    results[name][op_name] = figures
        finally:
            operator.uninstall(real_cluster)
    return results


def _batches(scenarios: Sequence[str], together: bool) -> list[list[str]]:
    """The order the scenarios run in: one at a time, or all at once but the operator's disturbers, then those."""
    if not together:
        return [[name] for name in scenarios]
    calm = [name for name in scenarios if not SCENARIOS[name].disturbs_operator]
    return [batch for batch in (calm, *([name] for name in scenarios if name not in calm)) if batch]


async def _one(ctx: Context, operator: b.Operator, name: str) -> Figures:
    scenario = SCENARIOS[name]
    if scenario.needs_git and ctx.git is None:
        raise ValueError(f"the {name} scenario needs a git server for the pods")
    ctx.say(f"== {operator.name}: {name} (stacks={ctx.stacks})")
    started = time.monotonic()
    figures = await scenario.run(ctx, operator)
    ctx.say(f"   {name} took {time.monotonic() - started:.0f}s")
    return figures


def headlines(scenarios: Sequence[str]) -> dict[str, str]:
    return {name: SCENARIOS[name].headline for name in scenarios}


def show(results: report.Results, scenarios: Sequence[str], say: Callable[[str], None] = print) -> None:
    for name in scenarios:
        say(f"\n{name}:\n{report.table(results, name)}")
    say("")
    for name in scenarios:
        say(report.headline(results, name, SCENARIOS[name].headline))


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench", description=(__doc__ or "").splitlines()[0])
    parser.add_argument("scenario", choices=[*SCENARIOS, "all"])
    parser.add_argument("--operators", default="pko,go", help="comma-separated: pko, go (default: both)")
    parser.add_argument("--stacks", type=int, default=10, help="Stacks per scenario (default 10)")
    parser.add_argument("--changes", type=int, default=20,
                        help="config changes for latency, rounds for startup (default 20)")
    parser.add_argument("--idle-seconds", type=float, default=300, help="how long idle measures (default 300)")
    parser.add_argument("--sleep", type=float, default=30,
                        help="seconds the program of concurrency's and killed's long operations sleeps (30)")
    parser.add_argument("--runtime", choices=["pod", "local"], default="pod",
                        help="workspace runtime: pod, or local (fleet only, pko only: the Go operator has none)")
    parser.add_argument("--program", choices=PROGRAMS, default="yaml",
                        help="what each Stack runs: yaml (a small Program that downloads nothing, the default) or "
                             "typescript (a TypeScript program with @pulumi/random from Git: npm install and the "
                             "plugin download from the test bed's mirrors in every workspace pod)")
    parser.add_argument("--without-dependency-cache", action="store_true",
                        help="with --program typescript: pko's Stacks name the mirrors as the Go operator's do, "
                             "instead of pko serving them through its dependency cache")
    parser.add_argument("--max-active-workspaces", type=int, default=None,
                        help="fleet, killed: pko's pool of active workspaces (default: no bound; the Go operator "
                             "has none)")
    parser.add_argument("--deadline", type=float, default=None,
                        help="fleet, killed (pod runtime): stop waiting after this many seconds and report how "
                             "many Stacks were Ready (default: wait for all, or fail)")
    parser.add_argument("--restart", action="store_true",
                        help="local runtime: then restart the operator on the Ready fleet (time to verify it all, "
                             "updates run again)")
    parser.add_argument("--status-paths", action="store_true",
                        help="local runtime: also follow every Stack and Workspace and print the commonest paths "
                             "through their statuses (what each status write was)")
    parser.add_argument("--share-volume", default=None, metavar="SIZE",
                        help="pko: keep each workspace's /share on a claim of this size (--workspace-share-volume-size)"
                             ", so a wake reuses what the last pod installed")
    parser.add_argument("--plugin-images", action="store_true",
                        help="with --program typescript: pko's Stacks mount both provider plugins from image volumes "
                             "(loaded into the node first) instead of installing them in each pod")
    parser.add_argument("--agent-image-volume", action="store_true",
                        help="pod runtime: pko's workspace pods mount the agent image instead of a bootstrap container "
                             "copying the agent into /share (--workspace-agent-image-volume)")
    parser.add_argument("--json", type=Path, help="write the figures as JSON here")
    parser.add_argument("--plot", type=Path, help="write a PNG chart per scenario into this directory")
    args = parser.parse_args(argv)
    args.operator_list = [op.strip() for op in args.operators.split(",") if op.strip()]
    unknown = set(args.operator_list) - set(b.OPERATORS)
    if unknown or not args.operator_list:
        parser.error(f"unknown operator(s) {sorted(unknown)}: choose from {sorted(b.OPERATORS)}")
    if args.runtime == "local" and (args.scenario != "fleet" or args.operator_list != ["pko"]):
        parser.error("--runtime local runs the fleet scenario for pko alone: "
                     "python -m bench fleet --runtime local --operators pko")
    if args.runtime == "local" and args.program != "yaml":
        parser.error("--program typescript runs on the pod runtime")
    if args.status_paths and args.runtime != "local":
        parser.error("--status-paths is for --runtime local")
    if args.restart and args.runtime != "local":
        parser.error("--restart is for --runtime local (the restart scenario measures the pod runtime)")
    if args.max_active_workspaces is not None and (args.max_active_workspaces < 1 or (
            args.runtime == "pod" and args.scenario not in POOLED)):
        parser.error("--max-active-workspaces (at least 1) is for the fleet and killed scenarios")
    if args.deadline is not None and (args.deadline <= 0 or args.scenario not in POOLED or args.runtime != "pod"):
        parser.error("--deadline (positive) is for the fleet and killed scenarios on the pod runtime")
    if args.share_volume is not None and args.runtime != "pod":
        parser.error("--share-volume is for the pod runtime")
    if args.agent_image_volume and args.runtime != "pod":
        parser.error("--agent-image-volume is for the pod runtime")
    if args.plugin_images and args.program != "typescript":
        parser.error("--plugin-images is for --program typescript")
    if args.stacks < 1 or args.changes < 1 or args.idle_seconds <= 0:
        parser.error("--stacks and --changes must be at least 1, --idle-seconds positive")
    return args


async def _main(args: argparse.Namespace) -> int:
    scenarios = list(SCENARIOS) if args.scenario == "all" else [args.scenario]
    say = print
    if args.runtime == "local":
        results: report.Results = {"fleet": {"pko": await localfleet.run(args.stacks, say,
                                                                          args.max_active_workspaces,
                                                                          restart=args.restart,
                                                                          status_paths=args.status_paths)}}
        pool = f", pool of {args.max_active_workspaces}" if args.max_active_workspaces else ""
        say(f"\nfleet (local runtime, {args.stacks} Stacks{pool}):\n{report.table(results, 'fleet')}")
        if args.json:
            report.write_json(args.json, results, {}, {"stacks": args.stacks, "runtime": "local"})
        return 0
    with tempfile.TemporaryDirectory(prefix="pko-bench-") as tmp:
        say("building or loading the test images (cached after the first run)")
        built = images.build()
        say("starting a real single-node cluster")
        # a kept /share needs a default StorageClass, as the cluster tier's
        storage = images.PYTHON_BASE_REF if args.share_volume else None
        with cluster.start(Path(tmp) / "cluster", images=built.values(),
                           storage_helper_image=storage) as real_cluster:
            real_cluster.tag_image(built["pko"].refs[0], PKO_IMAGE)
            with gitserver.running(Path(tmp) / "git", host=real_cluster.node_ip, tls=True) as git, \
                    mirror.running(host=real_cluster.node_ip) as registry, \
                    objectstore.running(Path(tmp) / "store", host=real_cluster.node_ip) as store, \
                    contextlib.ExitStack() as stack:
                workload = (Realistic(git, registry, b.WORKSPACE_CPU, store) if args.program == "typescript"
                            else None)
                if args.plugin_images and workload is not None:
                    say("pushing the plugins' images to a registry the node pulls from")
                    images_registry = stack.enter_context(ociregistry.running(Path(tmp) / "registry"))
                    real_cluster.trust_registry(images_registry.address)
                    workload.plugin_images = pluginimages.push(images_registry, PLUGIN_IMAGES)
                    workload.images_registry = images_registry
                async with kclient.Client.from_kubeconfig(real_cluster.kubeconfig) as kc:
                    results = await run(real_cluster, kc, scenarios, args.operator_list, stacks=args.stacks,
                                        changes=args.changes, idle_seconds=args.idle_seconds,
                                        sleep_seconds=args.sleep, git=git, say=lambda line: print(line, flush=True),
                                        workload=workload, dependency_cache=not args.without_dependency_cache,
                                        pool=args.max_active_workspaces, deadline=args.deadline,
                                        share_volume=args.share_volume, plugin_images=args.plugin_images,
                                        agent_image_volume=args.agent_image_volume)
    show(results, scenarios)
    if args.json:
        report.write_json(args.json, results, headlines(scenarios),
                          {"stacks": args.stacks, "changes": args.changes, "idle_seconds": args.idle_seconds,
                           "sleep": args.sleep, "operators": args.operator_list, "runtime": args.runtime,
                          "program": args.program, "dependency_cache": not args.without_dependency_cache,
                           "share_volume": args.share_volume, "plugin_images": args.plugin_images,
                           "agent_image_volume": args.agent_image_volume,
                           "workspace_cpu_request": b.WORKSPACE_CPU})
    if args.plot:
        for path in report.plot(args.plot, results):
            say(f"wrote {path}")
    return 0


def stop_on_term() -> None:
    """A SIGTERM stops the run as Ctrl-C does: the main task is cancelled and every cleanup runs (the cluster, the
    Go operator's install, the Git daemon, the temporary folders). By default a SIGTERM ended the process where it
    stood and left them running or on disk."""
    signal.signal(signal.SIGTERM, signal.default_int_handler)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(argv)
    stop_on_term()
    return asyncio.run(_main(args))


if __name__ == "__main__":
    sys.exit(main())
