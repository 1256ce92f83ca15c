"""docker's run/create flags of the second parity round, through the real binary:
--env-file, --init, --ulimit, --shm-size, --memory-swap,
--group-add, --cidfile, --security-opt, --pid, --ipc."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from _cli import Cli

from ctrexec.testing import wait_for

pytestmark = pytest.mark.integration


def test_env_file_under_e(cli: Cli, test_image: str, tmp_path: Path) -> None:
    env_file = tmp_path / "app.env"
    env_file.write_text('# settings\nA=from file\nB="quoted"\nC=file\n')
    out = cli(
        "run", "--rm", "--env-file", str(env_file), "-e", "C=flag", test_image,
        "sh", "-c", 'printf "%s|%s|%s\\n" "$A" "$B" "$C"',
    )  # fmt: skip
    assert (out.returncode, out.stdout) == (0, 'from file|"quoted"|flag\n'), out.stderr


def test_env_file_errors_create_nothing(cli: Cli, test_image: str, tmp_path: Path) -> None:
    missing = cli("run", "--rm", "--name", "fl-envfile", "--env-file", "/nonexistent/env",
                  test_image, "true")  # fmt: skip
    assert (missing.returncode, missing.stderr) == (
        125,
        "ctrexec: open /nonexistent/env: no such file or directory\n",
    )
    bad = tmp_path / "bad.env"
    bad.write_text("MY VAR=1\n")
    out = cli("create", "--name", "fl-envfile", "--env-file", str(bad), test_image, "true")
    assert (out.returncode, out.stderr) == (
        125,
        "ctrexec: poorly formatted environment: variable 'MY VAR' contains whitespaces\n",
    )
    assert cli("inspect", "fl-envfile").returncode == 1


#: A subshell that leaves an orphan and exits, so the orphan goes to pid 1; the task's own
#: process then sleeps, never reaping. The orphan ends (and marks that it ran) only once
#: pid 1 is the sleep or the init: before its exec, pid 1 is a shell, which would reap it.
ORPHAN = (
    "(sh -c 'until grep -q -e sleep -e init /proc/1/comm; do sleep 0.1; done;"
    " touch /tmp/orphan-ran' &); exec sleep 1000"
)
#: Each process's state letter (field 3 of /proc/PID/stat), one a line.
STATES = "for f in /proc/[0-9]*/stat; do cut -d' ' -f3 \"$f\"; done 2>/dev/null"


def _zombies(cli: Cli, name: str) -> int | None:
    """How many zombies the task has, once its orphan ran (None before)."""
    if cli("exec", name, "test", "-e", "/tmp/orphan-ran").returncode != 0:
        return None
    out = cli("exec", name, "sh", "-c", STATES)
    assert out.returncode == 0, out.stderr
    return out.stdout.split().count("Z")


def _exit_code(cli: Cli, name: str) -> str:
    out = cli("inspect", "-f", "{{.State.ExitCode}}", name)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_init_reaps_orphans(cli: Cli, made: list[str], test_image: str) -> None:
    made += ["fl-init-reaps", "fl-noinit-keeps"]
    for name, init in (("fl-init-reaps", ["--init"]), ("fl-noinit-keeps", [])):
        out = cli("run", "-d", "--name", name, *init, test_image, "sh", "-c", ORPHAN)
        assert out.returncode == 0, out.stderr
    # Without an init the orphan stays a zombie: the test can see one.
    wait_for(lambda: _zombies(cli, "fl-noinit-keeps") == 1, timeout=60, what="a zombie")
    wait_for(lambda: _zombies(cli, "fl-init-reaps") == 0, timeout=60, what="the orphan reaped")
    top = cli("inspect", "-f", "{{json .Config.Cmd}} {{.Path}}", "fl-init-reaps")
    assert top.stdout.startswith('["sh","-c",'), top.stdout


def test_init_forwards_stop_signal(cli: Cli, made: list[str], test_image: str) -> None:
    """sleep as pid 1 ignores SIGTERM (137 after the timeout); under tini it gets it (143).

    The stop timeout of the --init task is long, so a lost signal would show as 137.
    """
    made += ["fl-init-stop", "fl-noinit-stop"]
    for name, init in (("fl-init-stop", ["--init"]), ("fl-noinit-stop", [])):
        out = cli("run", "-d", "--name", name, *init, test_image, "sleep", "1000")
        assert out.returncode == 0, out.stderr
    assert cli("stop", "-t", "60", "fl-init-stop").returncode == 0
    assert _exit_code(cli, "fl-init-stop") == "143"
    assert cli("stop", "-t", "1", "fl-noinit-stop").returncode == 0
    assert _exit_code(cli, "fl-noinit-stop") == "137"


def test_ulimit_and_shm_size_inside(cli: Cli, test_image: str) -> None:
    out = cli(
        "run", "--rm", "--ulimit", "nofile=1000:2000", "--ulimit", "core=-1",
        "--shm-size", "2m", test_image, "sh", "-c",
        "grep -e 'open files' -e 'core file' /proc/self/limits; grep ' /dev/shm ' /proc/mounts",
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    lines = [line.split() for line in out.stdout.splitlines()]
    assert lines[0][:5] == ["Max", "core", "file", "size", "unlimited"], out.stdout
    assert lines[0][5] == "unlimited", out.stdout
    assert lines[1][3:5] == ["1000", "2000"], out.stdout
    assert "size=2048k" in lines[2][3].split(","), out.stdout


def test_memory_swap_reaches_the_cgroup(cli: Cli, test_image: str) -> None:
    """cgroup v1's memory+swap limit (v2's memory.swap.max is swap alone: 64m here)."""
    out = cli(
        "run", "--rm", "-m", "64m", "--memory-swap", "128m", test_image, "sh", "-c",
        "cat /sys/fs/cgroup/memory/memory.memsw.limit_in_bytes"
        " 2>/dev/null || cat /sys/fs/cgroup/memory.swap.max",
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() in (str(128 << 20), str(64 << 20)), out.stdout


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (
            ["--memory-swap", "1g"],
            "invalid value '1g' for --memory-swap: You should always set the Memory limit "
            "when using Memoryswap limit, see usage",
        ),
        (
            ["-m", "1g", "--memory-swap", "512m"],
            "invalid value '512m' for --memory-swap: Minimum memoryswap limit should be "
            "larger than memory limit, see usage",
        ),
        (["--ulimit", "nofiles=1"], "invalid --ulimit: invalid ulimit type: nofiles"),
        (["--shm-size", "lots"], "invalid value 'lots' for --shm-size: invalid size 'lots'"),
    ],
)
def test_limit_errors_create_nothing(
    cli: Cli, test_image: str, flags: list[str], message: str
) -> None:
    out = cli("create", "--name", "fl-limits", *flags, test_image, "true")
    assert out.returncode == 125
    assert out.stderr.startswith(f"ctrexec: {message}"), out.stderr
    assert cli("inspect", "fl-limits").returncode == 1


def test_group_add_by_name_and_number(cli: Cli, test_image: str) -> None:
    """The test image's /etc/group has ``staff`` (50); 4321 is in no file."""
    out = cli(
        "run", "--rm", "-u", "1000", "--group-add", "staff", "--group-add", "4321",
        test_image, "sh", "-c", "grep ^Groups: /proc/self/status",
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert {"50", "4321"} <= set(out.stdout.split()[1:]), out.stdout
    bad = cli("run", "--rm", "--name", "fl-groupadd", "--group-add", "nosuch", test_image, "true")
    assert bad.returncode == 125
    assert bad.stderr == (
        "ctrexec: Unable to find group nosuch: no matching entries in group file\n"
    ), bad.stderr
    assert cli("inspect", "fl-groupadd").returncode == 1


def test_cidfile(cli: Cli, made: list[str], test_image: str, tmp_path: Path) -> None:
    made.append("fl-cid")
    path = tmp_path / "cid"
    out = cli("create", "--name", "fl-cid", "--cidfile", str(path), test_image, "true")
    assert out.returncode == 0, out.stderr
    assert path.read_text() == "fl-cid"
    again = cli("run", "--rm", "--name", "fl-cid-2", "--cidfile", str(path), test_image, "true")
    assert (again.returncode, again.stderr) == (
        125,
        "ctrexec: container ID file found, make sure the other container isn't running "
        f"or delete {path}\n",
    )
    assert cli("inspect", "fl-cid-2").returncode == 1
    # A run that fails before its container exists leaves no file behind.
    gone = tmp_path / "gone"
    bad = cli("run", "--rm", "--cidfile", str(gone), "--ulimit", "x=1", test_image, "true")
    assert bad.returncode == 125
    assert not gone.exists()


def _status(cli: Cli, test_image: str, *flags: str) -> dict[str, str]:
    """NoNewPrivs and Seccomp of /proc/self/status in a task run with ``flags``."""
    out = cli("run", "--rm", *flags, test_image, "grep", "-e", "^NoNewPrivs", "-e", "^Seccomp:",
              "/proc/self/status")  # fmt: skip
    assert out.returncode == 0, out.stderr
    return dict(line.split(":\t") for line in out.stdout.splitlines())


def test_security_opt_no_new_privileges_and_unconfined(cli: Cli, test_image: str) -> None:
    assert _status(cli, test_image) == {"NoNewPrivs": "1", "Seccomp": "2"}
    assert _status(cli, test_image, "--security-opt", "no-new-privileges=false") == {
        "NoNewPrivs": "0",
        "Seccomp": "2",
    }
    assert _status(cli, test_image, "--security-opt", "seccomp=unconfined")["Seccomp"] == "0"


def test_security_opt_seccomp_file(cli: Cli, test_image: str, tmp_path: Path) -> None:
    profile = tmp_path / "deny-mkdir.json"
    profile.write_text(
        '{"defaultAction": "SCMP_ACT_ALLOW", "syscalls": ['
        '{"names": ["mkdir", "mkdirat"], "action": "SCMP_ACT_ERRNO", "errnoRet": 13}]}'
    )
    out = cli("run", "--rm", "--security-opt", f"seccomp={profile}", test_image,
              "sh", "-c", "mkdir /tmp/d; echo $?; touch /tmp/f && echo touched")  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert out.stdout == "1\ntouched\n", out.stdout
    assert "Permission denied" in out.stderr, out.stderr
    missing = cli("create", "--name", "fl-seccomp", "--security-opt", "seccomp=/nonexistent.json",
                  test_image, "true")  # fmt: skip
    assert missing.returncode == 125
    assert missing.stderr.startswith(
        "ctrexec: invalid --security-opt: opening seccomp profile (/nonexistent.json) failed:"
    ), missing.stderr
    assert cli("inspect", "fl-seccomp").returncode == 1


def _task_ns(cli: Cli, test_image: str, *flags: str) -> list[str]:
    out = cli("run", "--rm", *flags, test_image, "sh", "-c",
              "readlink /proc/self/ns/pid; readlink /proc/self/ns/ipc")  # fmt: skip
    assert out.returncode == 0, out.stderr
    return out.stdout.split()


def test_pid_and_ipc_host(cli: Cli, test_image: str) -> None:
    host = [os.readlink("/proc/self/ns/pid"), os.readlink("/proc/self/ns/ipc")]
    own = _task_ns(cli, test_image)
    assert own[0] != host[0] and own[1] != host[1]
    pid_host = _task_ns(cli, test_image, "--pid", "host", "--ipc", "private")
    assert pid_host[0] == host[0] and pid_host[1] != host[1]
    assert _task_ns(cli, test_image, "--ipc", "host")[1] == host[1]


def test_ipc_host_shares_dev_shm(cli: Cli, test_image: str) -> None:
    marker = Path(f"/dev/shm/ctrexec-test-flags-{os.getpid()}")
    marker.write_text("shared")
    try:
        out = cli("run", "--rm", "--ipc", "host", test_image, "cat", str(marker))
        assert (out.returncode, out.stdout) == (0, "shared"), out.stderr
        own = cli("run", "--rm", test_image, "cat", str(marker))
        assert own.returncode == 1
    finally:
        marker.unlink()


def test_pid_container_is_refused(cli: Cli, test_image: str) -> None:
    out = cli("create", "--name", "fl-pid", "--pid", "container:web", test_image, "true")
    assert (out.returncode, out.stderr) == (
        125,
        "ctrexec: invalid value 'container:web' for --pid: --pid: container:NAME is not "
        "supported by ctrexec; a group's tasks share only the network namespace\n",
    )
    assert cli("inspect", "fl-pid").returncode == 1
