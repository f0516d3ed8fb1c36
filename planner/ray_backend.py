"""Sweeps on Ray (``planner sweep --backend ray``): a study's scenarios as Ray tasks.

Without ``--address`` a local Ray instance starts with ``--jobs`` CPUs and stops when the sweep
ends; with one (``HOST:PORT`` of a cluster's head, ``ray://HOST:PORT`` for Ray Client, or
``auto``) the sweep joins that cluster and uses all of it. Rows come back to this process, which
appends each to ``rows.jsonl`` as it finishes, exactly as the local backend does: the same
resumable file, the same progress and ETA. Each task is one scenario (one CP-SAT solve on one
CPU); at most ``IN_FLIGHT_PER_CPU`` tasks per CPU of the cluster are submitted at a time, so a
study of 10⁵ scenarios neither floods the scheduler nor loses more than the tasks in flight when
interrupted.

Every node needs planner installed at the same version as this process (``pip install
'planner[ray]'``; a task answers with its version and a mismatch is an error). The user's own
spec files named by the study (systems, models or stacks given as paths) are read here and sent
with the tasks, so the nodes do not need them.

Ray is an optional extra (``pip install 'planner[ray]'``): imported only here.
"""

from __future__ import annotations

import logging
import socket
from typing import TYPE_CHECKING, Any

import planner
from planner.errors import InputError
from planner.sweep import Rows, SpecFiles, Study, preload_files, run_scenario, spec_files

if TYPE_CHECKING:
    from types import ModuleType

IN_FLIGHT_PER_CPU = 2
"""Tasks submitted ahead per CPU of the cluster: enough to keep every CPU busy between waits."""
CONNECT_TIMEOUT_S = 5.0
"""How long the head of a cluster named by ``--address`` may take to accept a connection."""
INSTALL_HINT = "pip install 'planner[ray]'"


def run_on_ray(study: Study, todo: list[dict[str, Any]], jobs: int, address: str | None) -> Rows:
    """The rows of ``todo`` as Ray tasks finish them (closing the generator cancels the rest)."""
    ray = _import_ray()
    started_here = not ray.is_initialized()
    if started_here:
        _connect(ray, address, jobs)
    pending: set[Any] = set()
    try:
        task = ray.remote(num_cpus=1)(_remote_scenario)
        study_ref = ray.put(study)
        files_ref = ray.put(spec_files(study))
        cpus = int(ray.cluster_resources().get("CPU", jobs))
        in_flight = max(2, IN_FLIGHT_PER_CPU * cpus)
        queue = iter(todo)

        def fill() -> None:
            while len(pending) < in_flight and (scenario := next(queue, None)) is not None:
                pending.add(task.remote(study_ref, scenario, files_ref))

        fill()
        while pending:
            (ready,), _ = ray.wait(list(pending), num_returns=1)
            pending.discard(ready)
            version, row = ray.get(ready)
            if version != planner.__version__:
                raise InputError(
                    f"--backend ray: a node runs planner {version}, this process "
                    f"{planner.__version__}; install the same version on every node"
                )
            fill()
            yield row
    finally:
        for ref in pending:
            ray.cancel(ref, force=True)
        if started_here:
            ray.shutdown()


def _remote_scenario(
    study: Study, scenario: dict[str, Any], files: SpecFiles
) -> tuple[str, dict[str, Any]]:
    """One scenario on a Ray worker: (this node's planner version, the row)."""
    preload_files(files)
    return planner.__version__, run_scenario(study, scenario)


def _import_ray() -> ModuleType:
    try:
        import ray
    except ImportError:
        raise InputError(f"--backend ray needs Ray: {INSTALL_HINT}") from None
    return ray


def _connect(ray: ModuleType, address: str | None, jobs: int) -> None:
    """Start a local Ray instance with ``jobs`` CPUs, or join the cluster at ``address``; an
    address where nothing answers is a one-line error within CONNECT_TIMEOUT_S (Ray itself
    retries for minutes)."""
    quiet = {
        "include_dashboard": False,
        "log_to_driver": False,
        "logging_level": logging.ERROR,
    }
    if address is None:
        ray.init(address="local", num_cpus=jobs, **quiet)  # a new instance, not a running one
        return
    _check_reachable(address)
    try:
        ray.init(address=address, **quiet)
    except (ConnectionError, RuntimeError, ValueError) as error:
        first_line = (str(error).splitlines() or [type(error).__name__])[0]
        raise InputError(
            f"--address {address}: cannot join the Ray cluster ({first_line}; a cluster with "
            "token authentication also needs RAY_AUTH_MODE=token and its token here)"
        ) from None


def _check_reachable(address: str) -> None:
    """``HOST:PORT`` or ``ray://HOST:PORT`` accepts a TCP connection (``auto`` is Ray's to find)."""
    if address == "auto":
        return
    host, _, port = address.removeprefix("ray://").rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise InputError(
            f"--address {address!r}: expected HOST:PORT (a cluster's head), ray://HOST:PORT "
            "(Ray Client) or auto"
        )
    try:
        socket.create_connection((host, int(port)), timeout=CONNECT_TIMEOUT_S).close()
    except OSError as error:
        reason = error.strerror or type(error).__name__
        raise InputError(
            f"--address {address}: no Ray cluster answers there ({reason}); start one with "
            "`ray start --head`, or leave out --address for a local Ray instance"
        ) from None
