"""Session-wide test harness.

- Tests are marked by folder: unit, integration, chaos; tests/nomad counts as integration.
- Integration and chaos tests are skipped only when not root. With
  ``CTREXEC_REQUIRE_INTEGRATION=1`` (set by scripts/test when run as root, so in CI)
  any skipped integration or chaos test, or a run with none, fails the session.
- One private containerd serves the whole session unless ``CTREXEC_TEST_ADDRESS``
  names one; at the end, an audit fails the run if anything was left behind.
- ``cli`` runs the real CLI against it (tests/_cli.py builds every argv), in-process:
  CTREXEC_NO_SERVER=1 unless the caller set it.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from _cli import TEST_NAMESPACE, Cli

ROOT = Path(__file__).resolve().parent.parent
# Every CLI call runs in-process unless a test says otherwise: a command server would
# outlive the session (tests/integration/test_command_server.py runs its own).
os.environ.setdefault("CTREXEC_NO_SERVER", "1")
TEST_IMAGE = "docker.io/library/ctrexec-test:latest"
REQUIRE_ENV = "CTREXEC_REQUIRE_INTEGRATION"

_skipped_required: list[str] = []
_ran_integration = 0


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        parts = Path(str(item.fspath)).relative_to(ROOT).parts
        kind = parts[1] if len(parts) > 2 and parts[0] == "tests" else "unit"
        # tests/nomad drives the Nomad plugin against the private containerd, as root.
        kind = "integration" if kind == "nomad" else kind
        if kind in ("unit", "integration", "chaos"):
            item.add_marker(getattr(pytest.mark, kind))
        if kind in ("integration", "chaos") and os.geteuid() != 0:
            item.add_marker(pytest.mark.skip(reason="needs root"))


def _required(item: pytest.Item) -> bool:
    return os.environ.get(REQUIRE_ENV) == "1" and (
        item.get_closest_marker("integration") is not None
        or item.get_closest_marker("chaos") is not None
    )


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    global _ran_integration
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    if not _required(item):
        return
    if report.skipped and not hasattr(report, "wasxfail"):  # xfail is not a skip
        _skipped_required.append(f"{item.nodeid}: {report.longrepr}")
    elif report.when == "call":
        _ran_integration += 1


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if os.environ.get(REQUIRE_ENV) != "1" or session.config.option.collectonly:
        return
    if _skipped_required or _ran_integration == 0:
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        lines = [f"{REQUIRE_ENV}=1 but integration/chaos tests were skipped or none ran:"]
        lines += _skipped_required[:20]
        if reporter is not None:
            for line in lines:
                reporter.write_line(line, red=True)
        else:
            print("\n".join(lines), file=sys.stderr)
        session.exitstatus = 1


@pytest.fixture(scope="session", autouse=True)
def log_daemon_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A private state directory for the shared log daemon, audited and stopped at the end.

    Every run a test started must have ended (its registration gone) by the end of the
    session; the daemon is then stopped by its pid, as only this session started it.
    """
    from ctrexec.defaults import LOGD_DIR_ENV
    from ctrexec.logs import daemon as logdaemon
    from ctrexec.testing import stop_log_daemon

    where = tmp_path_factory.mktemp("logd")
    old = os.environ.get(LOGD_DIR_ENV)
    os.environ[LOGD_DIR_ENV] = str(where)
    try:
        yield where
        streams = where / logdaemon.STREAMS_DIR
        left = sorted(p.name for p in streams.iterdir()) if streams.is_dir() else []
        stop_log_daemon(where)
        assert not left, f"test run left log daemon registrations: {left}"
    finally:
        if old is None:
            os.environ.pop(LOGD_DIR_ENV, None)
        else:
            os.environ[LOGD_DIR_ENV] = old


@pytest.fixture(scope="session", autouse=True)
def host_daemon_untouched() -> Iterator[None]:
    """No test may start the host's embedded containerd: a command given no address
    starts it, and it outlives the session (and, in scripts/isolate, the private /run
    that names it). One that started during the session is stopped, by the pid it
    wrote, as only this session started it, and the session fails."""
    from ctrexec.containerd.daemon import EmbeddedContainerd, default_paths

    host = EmbeddedContainerd(default_paths())
    before = host.pid()
    yield
    started = host.pid()
    if started is not None and started != before:
        host.stop()
        pytest.fail(
            f"a test started the host's embedded containerd (pid {started}, "
            f"{host.address}); give every command the session's address"
        )


@pytest.fixture(scope="session")
def containerd_address(request: pytest.FixtureRequest) -> Iterator[str]:
    """Address of the session's containerd: the one named by env, else a private one."""
    from ctrexec.testing import TEST_ADDRESS_ENV, private_containerd

    given = os.environ.get(TEST_ADDRESS_ENV)
    if given:
        yield given
        return
    _sweep_killed_sessions(request)
    with private_containerd() as daemon:
        yield daemon.address


def _sweep_killed_sessions(request: pytest.FixtureRequest) -> None:
    """Remove what a killed earlier session left (tests/_sweep.py says what and why),
    and say so: it is the previous run's failure, not this one's."""
    from _cli import CLI_PROG
    from _sweep import sweep

    gone = sweep(CLI_PROG, TEST_NAMESPACE)
    capture = request.config.pluginmanager.get_plugin("capturemanager")
    with capture.global_and_fixture_disabled() if capture else contextlib.nullcontext():
        for what in gone:
            print(f"\nremoved a killed test run's leftover: {what}", file=sys.stderr)


@pytest.fixture(scope="session")
def client(containerd_address: str) -> Iterator[object]:
    """A client in the test namespace; the session fails if anything leaked into it."""
    from ctrexec.containerd.client import Client
    from ctrexec.testing import audit

    c = Client.connect(containerd_address, namespace=TEST_NAMESPACE)
    try:
        yield c
        leftovers = audit(c)
        assert not leftovers, f"test run leaked in containerd: {leftovers}"
        files = _task_files(TEST_NAMESPACE)
        assert not files, f"test run left tasks' host files: {files}"
    finally:
        c.close()


def _task_files(namespace: str) -> list[str]:
    """The per-task host files directories the CLI made for ``namespace`` (those of an
    Executor given its own ``files_dir`` are its test's to check)."""
    from ctrexec.net.hostfiles import DEFAULT_DIR

    if not DEFAULT_DIR.is_dir():
        return []
    return sorted(p.name for p in DEFAULT_DIR.glob(f"{namespace}+*"))


@pytest.fixture(scope="session")
def test_image_archive(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("image") / "ctrexec-test.tar"
    subprocess.run(
        [
            sys.executable,
            str(ROOT / "scripts" / "build-test-image"),
            "--out",
            str(out),
            "--name",
            TEST_IMAGE,
            "--stop-signal",
            "SIGTERM",
        ],
        check=True,
    )
    return out


@pytest.fixture(scope="session")
def test_image(containerd_address: str, test_image_archive: Path) -> str:
    """The busybox test image, imported once per session into the test namespace."""
    from ctrexec.testing import import_image

    import_image(containerd_address, TEST_NAMESPACE, test_image_archive)
    return TEST_IMAGE


@pytest.fixture
def cli(containerd_address: str, tmp_path: Path) -> Cli:
    """The ctrexec CLI on the session's containerd; task logs go to ``tmp_path/logs``."""
    return Cli(containerd_address, log_dir=tmp_path / "logs")
