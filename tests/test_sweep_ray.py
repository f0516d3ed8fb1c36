"""Sweeps on Ray (``planner sweep --backend ray``): the same rows as the local backend, resumable,
the user's spec files sent to the workers, and every bad request one line with exit code 2.

Ray is an optional extra; CI installs it (.ci/run) and sets PLANNER_REQUIRE_RAY=1, so these tests
fail there rather than skip when Ray is missing."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

import planner
from planner.cli import main
from planner.errors import InputError
from planner.studies.study import load_study, scenarios
from planner.studies.sweep import run_study
from tests.test_sweep import STUDY as SWEEP_STUDY
from tests.test_sweep import write

if os.environ.get("PLANNER_REQUIRE_RAY"):
    import ray
else:
    ray = pytest.importorskip("ray")

STUDY = {**SWEEP_STUDY, "name": "tiny on ray"}


@pytest.fixture(scope="module", autouse=True)
def one_ray_module_at_a_time():
    """These tests start, join and stop Ray instances on this machine, and Ray's ``auto``
    finds any running one (its GCS processes): under pytest-xdist two workers running them at
    once joined each other's instances, which then went away. A lock on a file held for the
    module's tests on a worker keeps them one worker at a time."""
    try:
        import fcntl
    except ImportError:  # not POSIX: no parallel workers to keep apart here
        yield
        return
    lock = Path(os.environ.get("TMPDIR", "/tmp")) / "planner-ray-tests.lock"
    with lock.open("w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def key(rows: list[dict]) -> list[tuple]:
    return sorted((r["id"], r["status"], r.get("strategy"), r.get("step_time_s")) for r in rows)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_cli_ray_sweep_joins_a_running_cluster(tmp_path: Path) -> None:
    """`ray start --head --block` on a free port, then `planner sweep --backend ray --address
    HOST:PORT` in another process, and through Ray Client (``ray://``, the extra's
    ``ray[client]``): the rows of the local backend. The head is this test's own process
    (stopped with it), so a developer's other Ray instances are left alone."""
    port, client_port = _free_port(), _free_port()
    cluster_file = _cluster_file()
    before = cluster_file.read_text() if cluster_file.exists() else None
    env = os.environ | {"RAY_AUTH_MODE": "disabled"}
    head = subprocess.Popen(
        [sys.executable, "-m", "ray.scripts.scripts", "start", "--head", "--block"]
        + ["--port", str(port), "--ray-client-server-port", str(client_port)]
        + ["--num-cpus", "2", "--include-dashboard", "false"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    study = write(tmp_path, STUDY)
    joined = {}
    try:
        _wait_for_port(port, head)
        _wait_for_port(client_port, head)
        for name, address in (
            ("ray", f"127.0.0.1:{port}"),
            ("client", f"ray://127.0.0.1:{client_port}"),
        ):
            # Two tries: the head's client server accepts connections before it can start a
            # session, and under load (one failure in ten runs on 2 busy cores) the first
            # join can time out; a sweep resumes into its folder, so the second try finishes.
            for _ in range(2):
                joined[name] = subprocess.run(
                    [sys.executable, "-m", "planner", "sweep", str(study), "--backend", "ray"]
                    + ["--out", str(tmp_path / name), "--address", address],
                    env=env,
                    capture_output=True,
                    text=True,
                    timeout=120,
                )
                if joined[name].returncode == 0:
                    break
    finally:
        head.terminate()
        head.wait(timeout=60)
        _restore(cluster_file, before)
    from planner.studies.rows import read_rows

    local = run_study(load_study(study), tmp_path / "local")
    for name, finished in joined.items():
        assert finished.returncode == 0, finished.stderr
        assert "8 scenarios" in finished.stdout
        assert key(read_rows(tmp_path / name)) == key(local)


def _cluster_file() -> Path:
    """Where `ray start` records its head for ``--address auto`` (Ray's temporary folder)."""
    folder = os.environ.get("RAY_TMPDIR") or os.environ.get("TMPDIR") or "/tmp"
    return Path(folder) / "ray" / "ray_current_cluster"


def _restore(path: Path, text: str | None) -> None:
    """Put back the cluster file as it was before this test's head wrote it (a stopped head's
    address there would send a later ``--address auto`` to a port nothing answers)."""
    if text is not None:
        path.write_text(text)
    else:
        path.unlink(missing_ok=True)


def _wait_for_port(port: int, head: subprocess.Popen, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert head.poll() is None, "ray start --head exited"
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.2)
    raise AssertionError(f"no Ray head on port {port} after {timeout_s} s")


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--address", "10.0.0.1:6379"], "names a Ray cluster: it needs --backend ray"),
        (["--backend", "ray", "--address", "head"], "expected HOST:PORT"),
        (["--backend", "ray", "--address", "127.0.0.1:1"], "no Ray cluster answers there"),
        (["--backend", "dask"], "invalid choice: 'dask'"),
    ],
)
def test_bad_backend_requests_are_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], flags: list[str], message: str
) -> None:
    study = write(tmp_path, STUDY)
    assert main(["sweep", str(study), "--out", str(tmp_path / "r"), *flags]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


@pytest.fixture
def silent_port():
    """A 127.0.0.1 port that accepts connections and never answers (not a Ray head)."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    yield server.getsockname()[1]
    server.close()


def _sweep_error(tmp_path: Path, capsys: pytest.CaptureFixture[str], address: str) -> str:
    """The one error line of a Ray sweep joining ``address``; it must come, not hang (a guard
    of two minutes against a hang, far above the stated wait: no duration is asserted)."""
    study = write(tmp_path, STUDY)
    started = time.monotonic()
    flags = ["--backend", "ray", "--address", address]
    assert main(["sweep", str(study), "--out", str(tmp_path / "r"), *flags]) == 2
    assert time.monotonic() - started < 120
    err = capsys.readouterr().err
    assert err.startswith("planner: error: --address ") and err.count("\n") == 1, err
    return err


def test_a_port_that_is_not_ray_is_refused_after_the_stated_wait(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    silent_port: int,
) -> None:
    """Ray retries such a port for minutes; the join is given JOIN_TIMEOUT_S (here 4 s)."""
    import planner.studies.ray_backend

    monkeypatch.setattr(planner.studies.ray_backend, "JOIN_TIMEOUT_S", 4.0)
    err = _sweep_error(tmp_path, capsys, f"127.0.0.1:{silent_port}")
    assert "no Ray cluster answered within 4 s" in err
    assert f"tried 127.0.0.1:{silent_port}" in err


@pytest.mark.parametrize("listening", [False, True])
def test_auto_with_a_stale_cluster_file_says_what_it_tried(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    silent_port: int,
    listening: bool,
) -> None:
    """``--address auto`` reads the address of the last `ray start` (RAY_TMPDIR/ray/
    ray_current_cluster): a head that is gone, or a port that is no longer Ray's, is one line
    naming that address."""
    import planner.studies.ray_backend

    monkeypatch.setattr(planner.studies.ray_backend, "JOIN_TIMEOUT_S", 4.0)
    port = silent_port if listening else _free_port()
    (tmp_path / "ray").mkdir()
    (tmp_path / "ray" / "ray_current_cluster").write_text(f"127.0.0.1:{port}")
    monkeypatch.setenv("RAY_TMPDIR", str(tmp_path))
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    err = _sweep_error(tmp_path, capsys, "auto")
    if listening:
        assert f"no Ray cluster answered within 4 s (tried 127.0.0.1:{port} (from auto" in err
    else:
        assert f"no Ray cluster answers (nothing answers at 127.0.0.1:{port} (from auto" in err


def test_ray_missing_names_the_extra(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray raises ImportError
    study = write(tmp_path, STUDY)
    assert main(["sweep", str(study), "--out", str(tmp_path / "r"), "--backend", "ray"]) == 2
    assert "pip install 'planner[ray]'" in capsys.readouterr().err


@pytest.fixture(scope="module")
def local_ray():
    """One local Ray instance for the module's API tests (run_study joins it and leaves it up)."""
    ray.init(
        address="local",
        num_cpus=2,
        include_dashboard=False,
        log_to_driver=False,
        logging_level="ERROR",
    )
    yield
    ray.shutdown()


def test_cli_ray_sweep_starts_a_local_instance_and_equals_local_rows(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert not ray.is_initialized()
    study = write(tmp_path, STUDY)
    args = ["sweep", str(study), "--jobs", "2"]
    assert main([*args, "--out", str(tmp_path / "ray"), "--backend", "ray"]) == 0
    out = capsys.readouterr().out
    assert "8 scenarios" in out and "tiny on ray: 8/8 scenarios" in out
    assert not ray.is_initialized()  # the instance it started is gone
    assert main([*args, "--out", str(tmp_path / "local")]) == 0
    from planner.studies.rows import read_rows

    assert key(read_rows(tmp_path / "ray")) == key(read_rows(tmp_path / "local"))


def test_interrupted_ray_sweep_resumes_to_the_same_rows(tmp_path: Path, local_ray: None) -> None:
    study = load_study(write(tmp_path, STUDY))
    partial = run_study(study, tmp_path / "r", stop_after=3, backend="ray")
    assert len(partial) == 3
    resumed = run_study(study, tmp_path / "r", backend="ray")
    assert ray.is_initialized()  # joined, not started: left running
    full = run_study(study, tmp_path / "local")
    assert key(resumed) == key(full)
    lines = (tmp_path / "r" / "rows.jsonl").read_text().splitlines()
    assert len(lines) == len({line for line in lines}) == 8


def test_a_node_with_another_planner_version_is_refused(
    tmp_path: Path, local_ray: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    study = load_study(write(tmp_path, STUDY))
    monkeypatch.setattr(planner, "__version__", "0.0.0-driver")
    with pytest.raises(InputError, match="a node runs planner .*, this process 0.0.0-driver"):
        run_study(study, tmp_path / "r", backend="ray")


def test_workers_get_the_users_spec_files_from_the_driver(tmp_path: Path) -> None:
    """A worker answers a system and a stack given as paths it cannot read (another machine)
    with the specs the driver read: the same row as with the files."""
    from planner.studies.ray_backend import _remote_scenario
    from planner.studies.scenario import run_scenario
    from planner.studies.study import spec_files

    system = tmp_path / "my-system.yaml"
    system.write_text(yaml.safe_dump({"name": "mine", "aliases": [], **_system_fields()}))
    stack = tmp_path / "my-stack.yaml"
    stack.write_text(yaml.safe_dump({"name": "my-stack", "gemm_efficiency": 0.8}))
    study = load_study(
        write(
            tmp_path,
            {
                **STUDY,
                "systems": [str(system)],
                "job": {"stack": str(stack)},
                "hardware": {},
                "models": ["gpt3-1.3b"],
            },
        )
    )
    files = spec_files(study)
    assert {(kind, name) for kind, name, _ in files} == {
        ("systems", str(system)),
        ("stacks", str(stack)),
    }
    scenario = next(scenarios(study))
    with_files = run_scenario(study, scenario)
    system.unlink()
    stack.unlink()
    assert run_scenario(study, scenario)["status"] == "error"  # the files are gone here
    version, row = _remote_scenario(study, scenario, files)
    assert version == planner.__version__
    assert row["status"] == with_files["status"] == "optimal"
    assert row["step_time_s"] == with_files["step_time_s"]


def _system_fields() -> dict:
    import hardware_catalog

    data = hardware_catalog.load_system("dgx-h100").model_dump(mode="json")
    return {k: v for k, v in data.items() if k not in ("name", "aliases")}


def test_a_cluster_that_fails_under_the_sweep_is_one_line_not_a_bug(
    tmp_path: Path, local_ray: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ray's raylet dying mid-sweep (as when a joined cluster goes away) is the environment's
    failure: one line that says the finished rows are kept, not 'internal error'."""
    study = load_study(write(tmp_path, STUDY))

    def raylet_died(*_args: object, **_kwargs: object) -> None:
        raise ray.exceptions.LocalRayletDiedError()

    monkeypatch.setattr(ray, "get", raylet_died)
    with pytest.raises(InputError, match="failed during the sweep .*running the sweep again"):
        run_study(study, tmp_path / "r", backend="ray")
