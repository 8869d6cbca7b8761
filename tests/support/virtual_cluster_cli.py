"""Bring a virtual multi-host cluster up, look at it, run commands in it, take it down.

    scripts/virtual-cluster up --workers 2            # stays in the foreground; Ctrl-C takes it down
    scripts/virtual-cluster status
    scripts/virtual-cluster exec driver -- python my_job.py     # runs inside the host "driver"
    scripts/virtual-cluster down                      # every cluster started by `up` (or name prefixes)

The command line of ``scripts/virtual-cluster``.  Needs root and iproute2.  See
:mod:`support.virtual_cluster` for what a cluster is made of.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
import time
from types import FrameType

from .virtual_cluster import DEFAULT_SUBNET, VirtualCluster, VirtualClusterError, host_environment
from .virtual_cluster_state import ClusterRecord, clean_leftovers, creator_alive, destroy, load_records
from .virtual_network import host_command, namespace_exists, namespace_pids

__all__ = ["main"]

DOWN_TIMEOUT_S = 60.0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(allow_abbrev=False, prog="virtual-cluster", description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    up = commands.add_parser("up", allow_abbrev=False, help="build a cluster and keep it up until Ctrl-C or `down`")
    up.add_argument("--workers", type=int, default=2, help="Spark worker hosts (0: no Spark; default 2)")
    up.add_argument("--no-store", action="store_true", help="no WebHDFS namenode/datanode hosts")
    up.add_argument("--extra-host", action="append", default=[], metavar="NAME", help="one more empty host (repeatable)")
    up.add_argument("--subnet", default=DEFAULT_SUBNET, help=f"IPv4 subnet of the hosts (default {DEFAULT_SUBNET})")
    up.add_argument("--work-dir", help="folder for logs, Spark work folders and the HDFS tree (default: a new temp folder)")
    up.add_argument("--worker-cores", type=int, default=1, help="cores each Spark worker offers (default 1)")
    up.add_argument("--worker-memory", default="1g", help="memory each Spark worker offers (default 1g)")
    commands.add_parser("status", allow_abbrev=False, help="list the clusters on this machine, their hosts and processes")
    down = commands.add_parser("down", allow_abbrev=False, help="take clusters down (default: every one started by `up`)")
    down.add_argument("prefixes", nargs="*", metavar="PREFIX", help="cluster prefixes, as `status` shows them")
    run = commands.add_parser("exec", allow_abbrev=False, help="run a command inside a host: exec HOST -- COMMAND...")
    run.add_argument("--cluster", metavar="PREFIX", help="which cluster (needed when there are several)")
    run.add_argument("host", help="host name, e.g. driver")
    run.add_argument("argv", nargs=argparse.REMAINDER, help="the command (after --)")
    parser.add_argument("-v", "--verbose", action="store_true", help="log what is created and started")
    return parser


def _print_cluster(record: ClusterRecord) -> None:
    state = "running" if creator_alive(record) else "creator gone (removed by the next up/down)"
    print(f"cluster {record.prefix}: owner {record.owner}, PID {record.creator_pid} ({state}), subnet {record.subnet}")
    print(f"  work folder {record.work_dir}")
    for name, url in record.services.items():
        if url:
            print(f"  {name:10s} {url}")
    for host in record.hosts:
        processes = f"{len(namespace_pids(host.namespace))} processes" if namespace_exists(host.namespace) else "gone"
        roles = ", ".join(record.roles.get(host.name, [])) or "-"
        print(f"  {host.name:10s} {host.address:15s} {host.namespace:24s} {processes:13s} {roles}")


def _up(args: argparse.Namespace) -> int:
    def stop(_signum: int, _frame: FrameType | None) -> None:
        raise KeyboardInterrupt  # `down` asks as Ctrl-C does: unwind through the `with`, which takes it down

    signal.signal(signal.SIGTERM, stop)
    cluster = VirtualCluster(args.workers, store=not args.no_store, extra_hosts=args.extra_host, subnet=args.subnet,
                             work_dir=args.work_dir, worker_cores=args.worker_cores,
                             worker_memory=args.worker_memory, owner="cli")
    started = time.monotonic()
    with cluster:
        print(f"up in {time.monotonic() - started:.1f} s")
        _print_cluster(next(r for r in load_records() if r.prefix == cluster.prefix))
        print(f"run a command in a host:  scripts/virtual-cluster exec driver -- <command>   "
              f"(or: ip netns exec {cluster.host('driver').namespace} <command>)")
        print("Ctrl-C (or `virtual-cluster down`) takes it down", flush=True)
        try:
            threading.Event().wait()
        except KeyboardInterrupt:
            print("stopping: taking the cluster down", flush=True)
    return 0


def _down(args: argparse.Namespace) -> int:
    records = load_records()
    unknown = set(args.prefixes) - {record.prefix for record in records}
    if unknown:
        raise VirtualClusterError(f"no cluster {', '.join(sorted(unknown))}; `status` lists them")
    chosen = [r for r in records if r.prefix in args.prefixes] if args.prefixes else [r for r in records if r.owner == "cli"]
    for record in chosen:
        if not creator_alive(record):
            continue  # clean_leftovers below
        if record.owner != "cli":
            raise VirtualClusterError(f"cluster {record.prefix} belongs to the running process {record.creator_pid} "
                                      f"(a test or script): stop that process instead")
        os.kill(record.creator_pid, signal.SIGTERM)  # the `up` process: it takes its cluster down itself
        deadline = time.monotonic() + DOWN_TIMEOUT_S
        while creator_alive(record) and time.monotonic() < deadline:
            time.sleep(0.2)  # polling for the `up` process to finish, bounded by the deadline
        if creator_alive(record):
            raise VirtualClusterError(f"`up` (PID {record.creator_pid}) did not end within {DOWN_TIMEOUT_S:.0f} s")
        if any(r.prefix == record.prefix for r in load_records()):
            destroy(record)  # it ended without finishing its teardown
        print(f"cluster {record.prefix} is down")
    for prefix in clean_leftovers():
        print(f"cluster {prefix} (its creator was gone) removed")
    return 0


def _exec(args: argparse.Namespace) -> int:
    argv = args.argv[1:] if args.argv[:1] == ["--"] else args.argv
    if not argv:
        raise VirtualClusterError("exec: give the command after --, e.g. exec driver -- hostname")
    records = [r for r in load_records() if creator_alive(r) and (args.cluster in (None, r.prefix))]
    if len(records) != 1:
        raise VirtualClusterError(f"exec: {len(records)} running clusters match; name one with --cluster PREFIX "
                                  f"(`status` lists them)")
    hosts = {host.name: host for host in records[0].hosts}
    if args.host not in hosts:
        raise VirtualClusterError(f"exec: no host {args.host!r} in {records[0].prefix}; hosts: {', '.join(hosts)}")
    command = host_command(hosts[args.host], argv)
    os.execvpe(command[0], command, host_environment(hosts[args.host]))
    return 127  # not reached: exec replaced this process


def main(argv: list[str] | None = None) -> int:
    """Command line entry point."""
    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="%(asctime)s %(message)s")
    commands = {"up": _up, "down": _down, "exec": _exec}
    try:
        if args.command == "status":
            records = load_records()
            for record in records:
                _print_cluster(record)
            if not records:
                print("no virtual clusters")
            return 0
        return commands[args.command](args)
    except VirtualClusterError as exc:
        print(f"virtual-cluster: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:  # during `up`'s start: it has already taken down what it built
        print("virtual-cluster: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
