"""Find a target's workers when a capture starts: from the job's TF_CONFIG, or from DNS.

Jobs move: a restarted worker gets a new address, a resized job more workers. Resolving at
each capture follows them; the addresses still come only from the service's configuration.
"""

from __future__ import annotations

import ipaddress
import json
import os
import socket
from pathlib import Path

from profiler_service.capture.capturer import CaptureFailed
from profiler_service.errors import SnapshotErrorCode
from profiler_service.targets import Discovery, Target, profiler_address


def discovery_failed(target: Target, why: str) -> CaptureFailed:
    return CaptureFailed(
        SnapshotErrorCode.TARGET_DISCOVERY_FAILED,
        f"no workers found for target {target.name!r} from {target.discover.describe()}: {why}",
    )


def resolve_workers(target: Target, max_workers: int) -> tuple[Target, int]:
    """The target with its workers filled in (at most `max_workers`), and how many were found.

    A target with a fixed list is returned as it is. Raises CaptureFailed.
    """
    if target.discover is None:
        return target, len(target.workers)
    found = _find(target)
    return target.model_copy(update={"workers": found[:max_workers], "discover": None}), len(found)


def _find(target: Target) -> list[str]:
    discovery = target.discover
    try:
        if discovery.source == "dns":
            found = _from_dns(discovery)
        else:
            found = _from_tf_config(discovery, _read_tf_config(discovery))
    except (OSError, ValueError) as exc:
        raise discovery_failed(target, str(exc)) from None
    if not found:
        raise discovery_failed(target, "it lists none")
    try:
        return [profiler_address(a) for a in found]  # the same checks as a fixed list
    except ValueError as exc:
        raise discovery_failed(target, str(exc)) from None


def _read_tf_config(discovery: Discovery) -> str:
    if discovery.path is None:
        text = os.environ.get("TF_CONFIG", "")
        if not text.strip():
            raise ValueError("the service's TF_CONFIG variable is unset or empty")
        return text
    try:
        return Path(discovery.path).read_text()
    except OSError as exc:
        raise ValueError(f"cannot read {discovery.path}: {exc.strerror or exc}") from None


def _from_tf_config(discovery: Discovery, text: str) -> list[str]:
    """Every address of the wanted tasks, in TF_CONFIG's order (chief first, then by index)."""
    try:
        config = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"TF_CONFIG is not JSON ({exc.msg} at {exc.pos})") from None
    cluster = config.get("cluster") if isinstance(config, dict) else None
    if not isinstance(cluster, dict):
        raise ValueError('TF_CONFIG has no "cluster" object')
    found: list[str] = []
    for task in discovery.tasks:
        addresses = cluster.get(task) or []
        if isinstance(addresses, dict):  # a sparse cluster: {"index": "host:port"}
            addresses = [addresses[k] for k in sorted(addresses, key=int)]
        for address in addresses:
            address = str(address)
            if discovery.port is not None:
                address = f"{address.rpartition(':')[0] or address}:{discovery.port}"
            if address not in found:
                found.append(address)
    if not found:
        present = ", ".join(sorted(cluster)) or "none"
        raise ValueError(f"its cluster has no {'/'.join(discovery.tasks)} tasks (has: {present})")
    return found


def _from_dns(discovery: Discovery) -> list[str]:
    """One address family: IPv4 when the name has any, so a dual-stack pod counts once."""
    try:
        infos = socket.getaddrinfo(discovery.host, discovery.port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise ValueError(f"{discovery.host} does not resolve ({exc.strerror})") from None
    by_family: dict[int, set] = {socket.AF_INET: set(), socket.AF_INET6: set()}
    for family, *_, sockaddr in infos:
        if family in by_family:
            by_family[family].add(ipaddress.ip_address(str(sockaddr[0]).split("%")[0]))
    addresses = sorted(by_family[socket.AF_INET]) or sorted(by_family[socket.AF_INET6])
    return [
        f"{a}:{discovery.port}" if a.version == 4 else f"[{a}]:{discovery.port}" for a in addresses
    ]
