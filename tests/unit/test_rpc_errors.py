"""gRPC status -> ctrexec error translation, tested by class."""

from __future__ import annotations

import grpc
import pytest

from ctrexec import _rpc, errors


@pytest.mark.parametrize(
    ("code", "message", "expected"),
    [
        (grpc.StatusCode.NOT_FOUND, "container x: not found", errors.NotFound),
        (grpc.StatusCode.ALREADY_EXISTS, "x: already exists", errors.AlreadyExists),
        (grpc.StatusCode.INVALID_ARGUMENT, "bad", errors.InvalidArgument),
        (grpc.StatusCode.FAILED_PRECONDITION, "task x: conflict", errors.Conflict),
        (grpc.StatusCode.FAILED_PRECONDITION, "image: not modified", errors.NotModified),
        (grpc.StatusCode.FAILED_PRECONDITION, "task must be stopped", errors.FailedPrecondition),
        (grpc.StatusCode.UNAVAILABLE, "connection refused", errors.Unavailable),
        (grpc.StatusCode.DEADLINE_EXCEEDED, "deadline", errors.DeadlineExceeded),
        (grpc.StatusCode.UNIMPLEMENTED, "unknown service", errors.Unimplemented),
        (grpc.StatusCode.CANCELLED, "cancelled", errors.Canceled),
        (grpc.StatusCode.PERMISSION_DENIED, "no", errors.PermissionDenied),
        (grpc.StatusCode.RESOURCE_EXHAUSTED, "too big", errors.ResourceExhausted),
        (grpc.StatusCode.UNKNOWN, "boom", errors.Internal),
        (grpc.StatusCode.UNKNOWN, "ttrpc: closed: unknown", errors.ShimClosed),
        (grpc.StatusCode.INTERNAL, "ttrpc: closed", errors.Internal),
        (grpc.StatusCode.INTERNAL, "boom", errors.Internal),
        (grpc.StatusCode.DATA_LOSS, "boom", errors.Internal),
    ],
)
def test_error_class(code: grpc.StatusCode, message: str, expected: type[Exception]) -> None:
    assert _rpc.error_class(code, message) is expected


def test_not_modified_and_conflict_are_preconditions() -> None:
    assert issubclass(errors.NotModified, errors.FailedPrecondition)
    assert issubclass(errors.Conflict, errors.FailedPrecondition)
    assert issubclass(errors.ConnectError, errors.Unavailable)
    assert issubclass(errors.ShimClosed, errors.Internal)  # a user's catch of Internal holds


def test_every_error_is_a_ctrexec_error_with_exit_code() -> None:
    classes = [c for c in vars(errors).values() if isinstance(c, type) and issubclass(c, Exception)]
    assert all(issubclass(c, errors.CtrexecError) for c in classes)
    assert errors.CtrexecError.exit_code == 125
    assert errors.CommandNotFound.exit_code == 127
    assert errors.CommandNotExecutable.exit_code == 126


def test_resolve_address(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(_rpc.ADDRESS_ENV, raising=False)
    assert _rpc.resolve_address() == _rpc.DEFAULT_ADDRESS
    monkeypatch.setenv(_rpc.ADDRESS_ENV, "unix:///tmp/x.sock")
    assert _rpc.resolve_address() == "/tmp/x.sock"
    assert _rpc.resolve_address("/a.sock") == "/a.sock"


def test_check_socket(tmp_path: pytest.TempPathFactory) -> None:
    import socket
    from pathlib import Path

    base = Path(str(tmp_path))
    with pytest.raises(errors.ConnectError, match="does not exist"):
        _rpc.check_socket(str(base / "missing.sock"))
    regular = base / "file"
    regular.write_text("")
    with pytest.raises(errors.ConnectError, match="not a unix socket"):
        _rpc.check_socket(str(regular))
    sock = socket.socket(socket.AF_UNIX)
    try:
        sock.bind(str(base / "s.sock"))
        _rpc.check_socket(str(base / "s.sock"))
    finally:
        sock.close()
