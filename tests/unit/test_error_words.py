"""Issue 37 item 7: what an error quotes is bounded, an oversized config is refused by
its field before any call, and runc's create failures read in the user's words."""

from __future__ import annotations

import pytest

from ctrexec import errors
from ctrexec.cli._common import LINE_LIMIT, user_words
from ctrexec.containerd.tasks import command_error
from ctrexec.tasks.config import TaskConfig

MIB = 1024 * 1024
#: containerd's and runc's wrapping of a create's failure (runc 1.1, containerd 1.6-2.1).
WRAP = (
    "Tasks.Create: failed to create shim task: OCI runtime create failed: runc create "
    "failed: unable to start container process: error during container init: "
)


def test_a_long_value_is_quoted_by_its_start_and_its_size() -> None:
    shown = errors.quoted("h" * MIB)
    assert len(shown) < 200
    assert shown.startswith("'hhh") and shown.endswith(f"… ({MIB} bytes)")
    assert errors.quoted("short") == "'short'"


def test_an_invalid_field_quotes_a_long_value_cut() -> None:
    with pytest.raises(errors.InvalidField) as caught:
        TaskConfig(name="x", image="busybox", hostname="h" * (10 * MIB))
    assert len(str(caught.value)) < 300
    assert "hostname must be 1 to 64 characters" in str(caught.value)


def test_the_printed_line_is_bounded_and_keeps_its_end() -> None:
    line = user_words(errors.InvalidArgument("value " + "x" * MIB + ": the reason"))
    assert len(line) <= LINE_LIMIT + 50
    assert line.startswith("value xxx") and line.endswith(": the reason")
    assert "characters cut" in line


def test_a_config_over_containerds_request_is_refused_naming_the_field() -> None:
    with pytest.raises(errors.InvalidField) as caught:
        TaskConfig(name="x", image="busybox", command=("x" * (10 * MIB),))
    assert caught.value.field == "command"
    assert "the command is 10.0 MiB" in caught.value.reason
    assert "16.0 MiB per request" in caught.value.reason
    assert len(str(caught.value)) < 500


def test_fields_that_fit_only_apart_are_refused_naming_the_largest() -> None:
    with pytest.raises(errors.InvalidField) as caught:
        TaskConfig(
            name="x", image="busybox", command=("x" * (5 * MIB),), env={"A": "y" * (3 * MIB)}
        )
    assert caught.value.field == "command"
    assert "come to 8.0 MiB (command 5.0 MiB, env 3.0 MiB)" in caught.value.reason


def test_a_config_that_fits_is_taken() -> None:
    TaskConfig(name="x", image="busybox", command=("x" * (7 * MIB),))


@pytest.mark.parametrize(
    ("runc", "kind", "words"),
    [
        ("mkdir /etc/passwd: not a directory", errors.TaskError,
         "cannot make the working directory in the container: '/etc/passwd': not a directory"),
        ('chdir to cwd ("/root") set in config.json failed: permission denied',
         errors.CommandNotExecutable,
         "cannot enter the working directory '/root': permission denied"),
        ('error mounting "/etc/hostname" to rootfs at "/etc": mount /etc/hostname:/etc '
         "(via /proc/self/fd/6), flags: 0x5000: not a directory", errors.TaskError,
         "cannot mount '/etc/hostname' at '/etc' in the container: not a directory"),
        ('error mounting "/tmp" to rootfs at "/proc": "/var/lib/c/io.containerd.runtime.v2.task'
         '/ns/a/rootfs/proc" cannot be mounted because it is not of type proc', errors.TaskError,
         "cannot mount '/tmp' at '/proc' in the container: '/proc' cannot be mounted because "
         "it is not of type proc"),
        ("something new", errors.Internal, "cannot create the container's process: something new"),
    ],
)  # fmt: skip
def test_runcs_create_failures_in_the_users_words(
    runc: str, kind: type[errors.CtrexecError], words: str
) -> None:
    cause = errors.Internal(WRAP + runc + ": unknown")
    err = command_error(cause)
    assert type(err) is kind
    assert user_words(err) == words
    for internal in ("shim", "OCI", "runc", "Tasks.Create"):
        assert internal not in user_words(err)


def test_a_missing_command_keeps_dockers_127() -> None:
    err = command_error(errors.Internal(WRAP + 'exec: "nope": executable file not found in $PATH'))
    assert type(err) is errors.CommandNotFound


def test_an_oversized_exec_is_refused_before_any_call() -> None:
    from ctrexec.tasks.execspec import process_spec

    with pytest.raises(errors.InvalidField) as caught:  # no client: no call is made
        process_spec(None, None, "t", ["sh", "x" * (10 * MIB)], {})  # type: ignore[arg-type]
    assert caught.value.field == "command"
    assert "also holds the container's own environment" in caught.value.reason


def test_grpcs_own_refusal_of_a_large_message_is_said_in_a_users_words() -> None:
    import grpc

    from ctrexec._rpc import translate

    class TooLarge(grpc.RpcError, grpc.Call):  # type: ignore[misc]
        def code(self) -> grpc.StatusCode:
            return grpc.StatusCode.RESOURCE_EXHAUSTED

        def details(self) -> str:
            return "CLIENT: Sent message larger than max (20983155 vs. 16777216)"

    err = translate(TooLarge(), "Containers.Create")
    assert type(err) is errors.ResourceExhausted
    assert user_words(err) == "the request is 20.0 MiB; containerd accepts at most 16.0 MiB"
