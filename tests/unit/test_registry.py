"""Registry pieces with no network: hosts.toml, docker's config.json, challenges, progress."""

from __future__ import annotations

import base64
import io
import json
import os
from pathlib import Path

import pytest

from ctrexec import errors
from ctrexec.cli import progress
from ctrexec.images import store as imagestore
from ctrexec.images.registry import auth, hosts
from ctrexec.images.registry.pull import PullEvent

# -- hosts.toml ----------------------------------------------------------------------------


def test_default_hosts(tmp_path: Path) -> None:
    assert [h.api for h in hosts.registry_hosts("docker.io", directory=tmp_path)] == [
        "https://registry-1.docker.io/v2"
    ]
    assert hosts.registry_hosts("quay.io", directory=tmp_path)[0].api == "https://quay.io/v2"
    for local in ("localhost:5000", "127.0.0.1:5000", "[::1]:5000", "localhost"):
        assert hosts.registry_hosts(local, directory=tmp_path)[0].plain_http, local
    assert hosts.registry_hosts("reg.lan", plain_http=True, directory=tmp_path)[0].plain_http


def test_hosts_toml_mirrors_in_order(tmp_path: Path) -> None:
    d = tmp_path / "reg.example.com:5000"
    d.mkdir()
    (d / "hosts.toml").write_text(
        'server = "https://reg.example.com:5000"\n'
        '[host."http://mirror.lan:5000"]\n'
        '  capabilities = ["pull"]\n'
        '  [host."http://mirror.lan:5000".header]\n'
        '    x-token = "abc"\n'
        '[host."https://other.lan/custom/v2/path"]\n'
        "  override_path = true\n"
        "  skip_verify = true\n"
        '  ca = "/etc/ca.pem"\n'
    )
    found = hosts.registry_hosts("reg.example.com:5000", directory=tmp_path)
    assert [h.api for h in found] == [
        "http://mirror.lan:5000/v2",
        "https://other.lan/custom/v2/path",
        "https://reg.example.com:5000/v2",
    ]
    assert found[0].capabilities == {"pull"}
    assert found[0].headers == {"x-token": "abc"}
    assert found[1].skip_verify and found[1].ca == ("/etc/ca.pem",)
    assert found[2].capabilities == hosts.ALL_CAPABILITIES


def test_hosts_dir_from_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    d = tmp_path / "_default"
    d.mkdir()
    (d / "hosts.toml").write_text('[host."http://cache.lan"]\n')
    monkeypatch.setenv(hosts.CONFIG_DIR_ENV, str(tmp_path))
    assert [h.api for h in hosts.registry_hosts("quay.io")] == [
        "http://cache.lan/v2",
        "https://quay.io/v2",
    ]


@pytest.mark.parametrize(
    "text",
    [
        "server = 5\n",
        'server = "ftp://x"\n',
        '[host."http://m"]\ncapabilities = ["fly"]\n',
        '[host."http://m"]\nskip_verify = "yes"\n',
        "not toml [\n",
    ],
)
def test_bad_hosts_toml(text: str) -> None:
    with pytest.raises(errors.InvalidArgument):
        hosts.parse_hosts_toml(text, "reg.lan")


# -- docker's config.json ---------------------------------------------------------------------


def _b64(s: str) -> str:
    return base64.b64encode(s.encode()).decode()


def test_lookup_auths(tmp_path: Path) -> None:
    cfg = tmp_path / "config.json"
    cfg.write_text(
        json.dumps(
            {
                "auths": {
                    "https://index.docker.io/v1/": {"auth": _b64("hub:pw:with:colons")},
                    "reg.lan:5000": {"auth": _b64("u:p")},
                    "tok.lan": {"identitytoken": "idt"},
                }
            }
        )
    )
    assert auth.lookup("docker.io", cfg) == auth.Credentials("hub", "pw:with:colons")
    assert auth.lookup("reg.lan:5000", cfg) == auth.Credentials("u", "p")
    assert auth.lookup("tok.lan", cfg) == auth.Credentials("<token>", "idt")
    assert auth.lookup("other.lan", cfg) is None
    assert auth.lookup("x", tmp_path / "missing.json") is None
    assert "p" not in repr(auth.Credentials("u", "p")).replace("u", "")


def test_store_and_erase_keep_other_keys(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path / "d"))
    path = auth.config_path()
    assert path == tmp_path / "d" / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps({"psFormat": "x", "auths": {"a.lan": {"auth": _b64("a:b")}}}))
    auth.store("reg.lan", auth.Credentials("u", "p"))
    saved = json.loads(path.read_text())
    assert saved["psFormat"] == "x"
    assert saved["auths"]["reg.lan"] == {"auth": _b64("u:p")}
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    assert auth.erase("reg.lan") is True
    assert auth.erase("reg.lan") is False
    assert json.loads(path.read_text())["auths"] == {"a.lan": {"auth": _b64("a:b")}}


def test_credential_helper_protocol(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = tmp_path / "store.json"
    helper = tmp_path / "docker-credential-fake"
    helper.write_text(
        "#!/usr/bin/env python3\n"
        "import json, sys\n"
        f"p = {str(store)!r}\n"
        "try:\n    db = json.load(open(p))\nexcept FileNotFoundError:\n    db = {}\n"
        "data = sys.stdin.read().strip()\n"
        "if sys.argv[1] == 'get':\n"
        "    if data not in db:\n"
        "        print('credentials not found in native keychain'); sys.exit(1)\n"
        "    print(json.dumps({'ServerURL': data, 'Username': db[data][0], 'Secret': db[data][1]}))\n"
        "elif sys.argv[1] == 'store':\n"
        "    d = json.loads(data); db[d['ServerURL']] = [d['Username'], d['Secret']]\n"
        "    json.dump(db, open(p, 'w'))\n"
        "elif sys.argv[1] == 'erase':\n"
        "    db.pop(data, None); json.dump(db, open(p, 'w'))\n"
    )
    helper.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({"credsStore": "fake", "credHelpers": {"x.lan": "nope"}}))
    assert auth.lookup("reg.lan", cfg) is None
    assert auth.store("reg.lan", auth.Credentials("u", "s"), cfg) == "docker-credential-fake"
    assert auth.lookup("reg.lan", cfg) == auth.Credentials("u", "s")
    assert auth.store("docker.io", auth.Credentials("h", "t"), cfg) == "docker-credential-fake"
    assert json.loads(store.read_text())["https://index.docker.io/v1/"] == ["h", "t"]
    assert auth.erase("reg.lan", cfg) is True
    assert auth.lookup("reg.lan", cfg) is None
    with pytest.raises(errors.InvalidArgument, match="docker-credential-nope"):
        auth.lookup("x.lan", cfg)


def test_a_failing_helpers_answer_is_not_repeated(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A helper that fails after printing the credentials: the error names the helper
    and its exit status, never what it printed (docs/security.md, "Secrets")."""
    helper = tmp_path / "docker-credential-leaky"
    helper.write_text(
        "#!/bin/sh\n"
        'echo \'{"Username": "u", "Secret": "sac-helper-secret"}\'\n'
        "echo half-broken keychain >&2\n"
        "exit 3\n"
    )
    helper.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({"credsStore": "leaky"}))
    with pytest.raises(errors.PermissionDenied) as err:
        auth.lookup("reg.lan", cfg)
    assert "half-broken keychain" in str(err.value)
    helper.write_text(helper.read_text().replace("echo half-broken keychain >&2\n", ""))
    for call in (lambda: auth.lookup("reg.lan", cfg), lambda: auth.from_helper("leaky", "r")):
        with pytest.raises(errors.PermissionDenied) as err:
            call()
        assert "sac-helper-secret" not in str(err.value)
        assert "exit status 3" in str(err.value)
    with pytest.raises(errors.PermissionDenied) as err:
        auth.store("reg.lan", auth.Credentials("u", "sac-helper-secret"), cfg)
    assert "sac-helper-secret" not in str(err.value)


def test_parse_challenges() -> None:
    found = auth.parse_challenges(
        'Bearer realm="https://auth.example/token",service="reg.example",'
        'scope="repository:a/b:pull,push", Basic realm="x \\"y\\""'
    )
    assert [c.scheme for c in found] == ["bearer", "basic"]
    assert found[0].params == {
        "realm": "https://auth.example/token",
        "service": "reg.example",
        "scope": "repository:a/b:pull,push",
    }
    assert found[1].params == {"realm": 'x "y"'}
    assert auth.parse_challenges("") == []


# -- imagestore's pure parts --------------------------------------------------------------------


def test_manifest_labels_and_refs() -> None:
    d = "sha256:" + "a" * 64
    obj = {
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": d, "size": 1},
        "layers": [
            {"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", "digest": d, "size": 2}
        ],
    }
    labels = imagestore.manifest_labels("manifest", obj, source=("reg.lan", "a/b"))
    assert labels == {
        "containerd.io/gc.ref.content.config": d,
        "containerd.io/gc.ref.content.l.0": d,
        "containerd.io/distribution.source.reg.lan": "a/b",
    }
    assert imagestore.ingest_ref(d) == imagestore.ingest_ref(d)
    with pytest.raises(errors.InvalidArgument):
        imagestore.ingest_ref("sha256:short")


# -- progress renderers ----------------------------------------------------------------------------


def _events() -> list[PullEvent]:
    d = "sha256:" + "b" * 64
    return [
        PullEvent("resolved", "r", d),
        PullEvent("start", "r", d, done=0, total=2_000_000),
        PullEvent("progress", "r", d, done=1_000_000, total=2_000_000),
        PullEvent("done", "r", d, done=2_000_000, total=2_000_000),
        PullEvent("extracting", "r", d, total=2_000_000),
        PullEvent("extracted", "r", d, done=2_000_000, total=2_000_000),
        PullEvent("pulled", "r", d),
    ]


def test_progress_lines_and_json() -> None:
    out = io.StringIO()
    lines = progress.Lines(out)
    for ev in _events():
        lines(ev)
    text = out.getvalue()
    assert "\x1b" not in text
    assert text.splitlines()[1] == "bbbbbbbbbbbb: downloading 2.0MB"
    # docker's order of facts: stored, then extracted, and only then "pull complete"
    assert text.splitlines()[2:5] == [
        "bbbbbbbbbbbb: done",
        "bbbbbbbbbbbb: extracting",
        "bbbbbbbbbbbb: pull complete",
    ]
    assert text.splitlines()[-1].startswith("r: pulled sha256:")
    out = io.StringIO()
    js = progress.JsonEvents(out)
    for ev in _events():
        js(ev)
    assert [json.loads(x)["action"] for x in out.getvalue().splitlines()] == [
        "resolved",
        "start",
        "progress",
        "done",
        "extracting",
        "extracted",
        "pulled",
    ]


def test_progress_bars() -> None:
    out = io.StringIO()
    bars = progress.Bars(out)
    for ev in _events():
        bars(ev)
    text = out.getvalue()
    assert "bbbbbbbbbbbb [" in text and "2.0MB/2.0MB done" in text
    assert "2.0MB/2.0MB extracting" in text
    assert text.rstrip().endswith("2.0MB/2.0MB pull complete\npulled r " + "sha256:" + "b" * 64)
    assert "\x1b[1F" in text  # redrawn in place
