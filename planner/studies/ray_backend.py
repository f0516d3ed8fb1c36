"""Sweeps on Ray (``planner sweep --backend ray``): a study's scenarios as Ray tasks.

Without ``--address`` a local Ray instance starts with ``--jobs`` CPUs and stops when the sweep
ends; with one (``HOST:PORT`` of a cluster's head, ``ray://HOST:PORT`` for Ray Client, or
``auto``) the sweep joins that cluster and uses all of it. Rows come back to this process, which
appends each to ``rows.jsonl`` as it finishes, exactly as the local backend does: the same
resumable file, the same progress and ETA. Each task is one scenario (one CP-SAT solve on one
CPU); at most ``IN_FLIGHT_PER_CPU`` tasks per CPU of the cluster are submitted at a time, so a
study of 10⁵ scenarios neither floods the scheduler nor loses more than the tasks in flight when
interrupted.

Joining is bounded: a cluster named by ``HOST:PORT`` or ``auto`` is first joined by a child
process that is killed after ``JOIN_TIMEOUT_S`` (Ray itself retries for minutes against a port
that answers but is not a Ray head, or against the stale address ``auto`` finds), so a wrong
address is one line naming what was tried. Ray Client (``ray://``) needs the extra's
``ray[client]``, and bounds its own connection.

Every node needs planner installed at the same version as this process (``pip install
'planner[ray]'``; a task answers with its version and a mismatch is an error). The user's own
spec files named by the study (systems, models or stacks given as paths) are read here and sent
with the tasks, so the nodes do not need them.

Ray is an optional extra (``pip install 'planner[ray]'``): imported only here.
"""

from __future__ import annotations

import logging
import socket
import subprocess
import sys
from typing import TYPE_CHECKING, Any

import planner
from planner.errors import InputError
from planner.studies.rows import Rows
from planner.studies.scenario import run_scenario
from planner.studies.study import SpecFiles, Study, preload_files, spec_files

if TYPE_CHECKING:
    from types import ModuleType

IN_FLIGHT_PER_CPU = 2
"""Tasks submitted ahead per CPU of the cluster: enough to keep every CPU busy between waits."""
CONNECT_TIMEOUT_S = 5.0
"""How long the head of a cluster named by ``--address`` may take to accept a TCP connection."""
JOIN_TIMEOUT_S = 45.0
"""How long joining a cluster may take, from a fresh process (Python, Ray's import, the
handshake): 4-10 s to a healthy local head on a busy 2-core machine; past this, the address is
not a ready Ray head. Ray Client (``ray://``) is not probed: it gives up by itself ("ray client
connection timeout", 31 s against a port that is not Ray's), and a second client connection
would spawn a second server process on the head."""
INSTALL_HINT = "pip install 'planner[ray]'"


def run_on_ray(study: Study, todo: list[dict[str, Any]], jobs: int, address: str | None) -> Rows:
    """The rows of ``todo`` as Ray tasks finish them (closing the generator cancels the rest)."""
    ray = _import_ray()
    started_here = not ray.is_initialized()
    if started_here:
        _connect(ray, address, jobs)
    pending: set[Any] = set()
    lost = _cluster_failures(ray)
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
    except lost as error:
        where = f"--address {address}: the Ray cluster" if address else "the local Ray instance"
        raise InputError(
            f"{where} failed during the sweep ({_first_line(str(error), error)}); the rows "
            "finished so far are kept, and running the sweep again resumes it"
        ) from None
    finally:
        for ref in pending:
            ray.cancel(ref, force=True)
        if started_here:
            ray.shutdown()


def _cluster_failures(ray: ModuleType) -> tuple[type[BaseException], ...]:
    """Ray's errors for a cluster that failed under the sweep (its raylet or a node died, a
    worker crashed, an object was lost): the environment's, not a bug in planner (a scenario
    that raises comes back as RayTaskError, which stays an internal error)."""
    names = ("LocalRayletDiedError", "NodeDiedError", "WorkerCrashedError", "ObjectLostError")
    module = getattr(ray, "exceptions", None)
    found = (getattr(module, name, None) for name in names)
    return tuple(kind for kind in found if isinstance(kind, type))


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
    """Start a local Ray instance with ``jobs`` CPUs, or join the cluster at ``address``. Joining
    is tried first in a child process (_probe_join) that is killed after JOIN_TIMEOUT_S: Ray
    itself retries for minutes against an address that answers but is not a Ray head, or a
    stale cluster file, and a connection stuck inside Ray cannot be stopped in this process."""
    quiet = {
        "include_dashboard": False,
        "log_to_driver": False,
        "logging_level": logging.ERROR,
    }
    if address is None:
        ray.init(address="local", num_cpus=jobs, **quiet)  # a new instance, not a running one
        return
    if address != "auto":
        _check_reachable(address)
    if not address.startswith("ray://"):  # Ray Client bounds its own wait (30 s here)
        _probe_join(address)
    try:
        ray.init(address=address, **quiet)
    except (ConnectionError, RuntimeError, ValueError) as error:
        raise InputError(_join_failed(address, _first_line(str(error), error))) from None


def _first_line(text: str, error: BaseException | None = None) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[0] if lines else type(error).__name__ if error else "no reason given"


def _join_failed(address: str, reason: str) -> str:
    return (
        f"--address {address}: cannot join the Ray cluster ({reason}; a cluster with token "
        "authentication also needs RAY_AUTH_MODE=token and its token here)"
    )


def _check_reachable(address: str) -> None:
    """``HOST:PORT`` or ``ray://HOST:PORT`` accepts a TCP connection within CONNECT_TIMEOUT_S."""
    host, port = _host_port(address)
    if host is None:
        raise InputError(
            f"--address {address!r}: expected HOST:PORT (a cluster's head), ray://HOST:PORT "
            "(Ray Client) or auto"
        )
    reason = _tcp_refusal(host, port)
    if reason:
        raise InputError(
            f"--address {address}: no Ray cluster answers there ({reason}); start one with "
            "`ray start --head`, or leave out --address for a local Ray instance"
        )


def _host_port(address: str) -> tuple[str | None, int]:
    """(host, port) of ``HOST:PORT`` or ``ray://HOST:PORT``; (None, 0) if it is neither."""
    host, _, port = address.removeprefix("ray://").rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        return None, 0
    return host, int(port)


def _tcp_refusal(host: str, port: int) -> str:
    """Why ``host:port`` refuses a TCP connection within CONNECT_TIMEOUT_S ('' if it accepts)."""
    try:
        socket.create_connection((host, port), timeout=CONNECT_TIMEOUT_S).close()
    except OSError as error:
        return error.strerror or type(error).__name__
    return ""


def _probe_join(address: str) -> None:
    """Join ``address`` in a child process (``python -m planner.studies.ray_backend ADDRESS``, which
    prints the address Ray resolved, then joins and leaves), killed after JOIN_TIMEOUT_S; a
    failure or a timeout is one line saying what was tried."""
    command = [sys.executable, "-m", "planner.studies.ray_backend", address]
    try:
        probe = subprocess.run(
            command, capture_output=True, text=True, timeout=JOIN_TIMEOUT_S, check=False
        )
    except subprocess.TimeoutExpired as expired:
        tried = _resolved(_text(expired.stdout))
        raise InputError(
            f"--address {address}: no Ray cluster answered within {JOIN_TIMEOUT_S:g} s "
            f"(tried {tried}: it accepts connections but Ray's handshake did not finish, so it "
            "is not a Ray head, or not a ready one); check the address and `ray status` there"
        ) from None
    if PROBE_UNREACHABLE in probe.stdout:
        reason = _first_line(probe.stdout.split(PROBE_UNREACHABLE, 1)[1])
        raise InputError(f"--address {address}: no Ray cluster answers ({reason})")
    if probe.returncode != 0:
        raise InputError(_join_failed(address, _probe_reason(probe.stdout, probe.stderr)))


def _probe_reason(stdout: str, stderr: str) -> str:
    """The probe's ``failed:`` line, else the last line it wrote on stderr (a crash)."""
    if PROBE_FAILED in stdout:
        return _first_line(stdout.split(PROBE_FAILED, 1)[1])
    lines = stderr.strip().splitlines()
    return lines[-1] if lines else "the probe ended without a reason"


def _text(output: str | bytes | None) -> str:
    return output.decode(errors="replace") if isinstance(output, bytes) else output or ""


def _resolved(stdout: str) -> str:
    """The address the probe said Ray resolved, or what the probe knew before it."""
    for line in stdout.splitlines():
        if line.startswith(PROBE_RESOLVED):
            return line.removeprefix(PROBE_RESOLVED).strip()
    return "the address Ray was still looking up"


PROBE_RESOLVED = "resolved: "
PROBE_UNREACHABLE = "unreachable: "
PROBE_FAILED = "failed: "


def _probe_main(address: str) -> int:
    """The child process of _probe_join: print the address Ray resolves ``address`` to (``auto``:
    RAY_ADDRESS or the cluster file of the last ``ray start``), check that it accepts a TCP
    connection, join and leave. Exit 0 if it joined, else 1 with an ``unreachable:`` line
    (nothing to join) or a ``failed:`` line (Ray's reason)."""
    ray = _import_ray()
    resolved = address
    if address == "auto":
        try:
            from ray._private.services import get_ray_address_from_environment

            resolved = get_ray_address_from_environment(address, None) or address
        except ConnectionError as error:  # no cluster to find
            print(PROBE_UNREACHABLE + _first_line(str(error), error), flush=True)
            return 1
        except (ImportError, TypeError, ValueError, OSError):  # another Ray: ray.init decides
            pass
    origin = " (from auto: RAY_ADDRESS or the last `ray start`)" if address == "auto" else ""
    print(f"{PROBE_RESOLVED}{resolved}{origin}", flush=True)
    host, port = _host_port(resolved)
    reason = _tcp_refusal(host, port) if host is not None else ""
    if reason:
        print(f"{PROBE_UNREACHABLE}nothing answers at {resolved}{origin}: {reason}", flush=True)
        return 1
    try:
        ray.init(address=address, log_to_driver=False, logging_level=logging.ERROR)
    except Exception as error:  # any reason Ray gives, as one line for the parent
        print(PROBE_FAILED + _first_line(str(error), error), flush=True)
        return 1
    ray.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(_probe_main(sys.argv[1]))
