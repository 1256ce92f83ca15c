"""The plugin driven by a Go go-plugin client, built from Debian's packages of the
pieces Nomad's client uses: go-plugin 1.0.1, hcl-v2 (hcldec), go-cty (msgpack) and
grpc-go. The program (tests/nomad/goclient) follows Nomad's order (probe, validation,
long-lived instance), decodes both schemas with hcldec from HCL and from JSON, runs
a task in a namespace made here, reattaches, recovers after a plugin kill, and kills
the last instance with a Fingerprint stream open. It prints one JSON line per step;
the checks are made here, on those lines.

Its message types come from the wire facts (tests/data/nomad-wire-2.0.5.json), not
from the plugin's own protos, so the two sides share no proto text.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import shutil
import signal
import subprocess
import uuid
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import grpc
import pytest
from _harness import PLUGIN, cty_encode
from _node import NOMAD_NAMESPACE, launch_long_lived

from ctrexec._api.nomad.drivers import driver_pb2 as dpb
from ctrexec.nomad import config as nconfig
from ctrexec.nomad import hclspec
from ctrexec.nomad.hclspec import Attr, Block

ROOT = Path(__file__).resolve().parent.parent.parent
SOURCE = Path(__file__).resolve().parent / "goclient"
WIRE = ROOT / "tests" / "data" / "nomad-wire-2.0.5.json"
IMAGE = "docker.io/library/ctrexec-test:latest"
# Reused across sessions (it is .gitignored): a cold build of the Go pieces takes
# over a minute on two cores, a warm one a few seconds.
GO_CACHE = ROOT / ".cache" / "goclient"


@pytest.fixture(scope="session")
def goclient(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The program, built offline in GOPATH mode over Debian's /usr/share/gocode."""
    go = shutil.which("go")
    if go is None or not Path("/usr/share/gocode/src/github.com/hashicorp/go-plugin").is_dir():
        pytest.fail("Go or its Debian packages are missing: run scripts/setup as root")
    out = tmp_path_factory.mktemp("goclient") / "goclient"
    GO_CACHE.mkdir(parents=True, exist_ok=True)
    env = {
        **os.environ,
        "GO111MODULE": "off",
        "GOPATH": f"{GO_CACHE / 'gopath'}:/usr/share/gocode",
        "GOCACHE": str(GO_CACHE / "build"),
        "GOFLAGS": "",
        "CGO_ENABLED": "0",
    }
    sources = sorted(str(p) for p in SOURCE.glob("*.go"))
    built = subprocess.run(
        [go, "build", "-o", str(out), *sources],
        check=False,
        env=env,
        capture_output=True,
        text=True,
    )
    if built.returncode != 0:
        pytest.fail(f"go build failed:\n{built.stderr}")
    return out


def _hcl(schema: Sequence[hclspec.Entry], values: Mapping[str, Any], indent: str = "") -> str:
    """HCL text for a config: JSON's syntax is HCL's for these values."""
    lines = []
    for e in schema:
        if e.name not in values:
            continue
        v = values[e.name]
        if isinstance(e, Attr):
            lines.append(f"{indent}{e.name} = {json.dumps(v)}")
        else:
            for one in [v] if isinstance(e, Block) else v:
                lines.append(f"{indent}{e.name} {{")
                lines.append(_hcl(e.nested, one, indent + "  "))
                lines.append(f"{indent}}}")
    return "\n".join(lines)


def _source(schema: Sequence[hclspec.Entry], values: Mapping[str, Any]) -> dict[str, Any]:
    return {"hcl": _hcl(schema, values), "json": dict(values)}


def _names(schema: Sequence[hclspec.Entry], values: Mapping[str, Any] | None = None) -> set[str]:
    """The schema's attribute and block paths; with ``values``, those they set."""
    out = set()
    for e in schema:
        if values is not None and e.name not in values:
            continue
        out.add(e.name)
        if isinstance(e, Attr):
            continue
        if values is None:
            items: list[Any] = [None]
        else:
            items = [values[e.name]] if isinstance(e, Block) else values[e.name]
        for item in items:
            out |= {f"{e.name}.{n}" for n in _names(e.nested, item)}
    return out


def plugin_full(address: str) -> dict[str, Any]:
    """Every attribute and block of the plugin's schema, none at its default."""
    return {
        "address": address,
        "namespace": NOMAD_NAMESPACE,
        "image_namespaces": ["one", "two"],
        "default_runtime": "io.containerd.runc.v2",
        "allow_privileged": True,
        "allow_caps": ["CHOWN", "KILL"],
        "volumes_enabled": False,
        "allow_root_mount": True,
        "allow_devices": True,
        "allow_host_network": True,
        "allow_host_sysctls": True,
        "stats_interval": "2s",
        "auth": {"config": "/etc/ctrexec/auth.json", "helper": "ecr"},
        "dangling_containers": {
            "enabled": False,
            "dry_run": True,
            "period": "10m",
            "creation_grace": "1m",
        },
    }


TASK_FULL = {
    "image": IMAGE,
    "command": "sh",
    "args": ["-c", "echo ${NOMAD_TASK_NAME}"],
    "entrypoint": ["/bin/env"],
    "work_dir": "/tmp",
    "privileged": True,
    "readonly_rootfs": True,
    "cap_add": ["NET_ADMIN"],
    "cap_drop": ["ALL"],
    "sysctl": {"net.core.somaxconn": "1024"},
    "volumes": ["/srv:/srv:ro"],
    "mount": [
        {"type": "bind", "source": "/a", "target": "/b", "readonly": True},
        {"type": "tmpfs", "source": "tmpfs", "target": "/c", "readonly": False},
    ],
    "device": [
        {"host_path": "/dev/fuse", "container_path": "/dev/fuse", "cgroup_permissions": "rw"}
    ],
    "shm_size": 65536,
    "pids_limit": 50,
    "runtime": "io.containerd.runc.v2",
    "labels": {"team": "core", "tier": "web"},
    "extra_hosts": ["db:10.9.0.1"],
    "auth": {"username": "u", "password": "p", "server_address": "r.example"},
    "force_pull": True,
    "host_network": True,
}

# Values of another type that hcldec converts to the schema's (cty's conversions).
COERCED = {"image": IMAGE, "shm_size": "65536", "privileged": "true", "args": [7]}

# Configs hcldec rejects, and the same fault put straight into the payload.
BAD_TASK = [
    {
        "name": "missing-required",
        "field": "image",
        "hcl": 'command = "sh"',
        "base": {"hcl": f'image = "{IMAGE}"'},
        "path": "image",
        "value": None,
    },
    {
        "name": "wrong-type",
        "field": "privileged",
        "hcl": f'image = "{IMAGE}"\nprivileged = "maybe"',
        "base": {"hcl": f'image = "{IMAGE}"'},
        "path": "privileged",
        "value": "maybe",
    },
    {
        "name": "block-missing-required",
        "field": "source",
        "hcl": f'image = "{IMAGE}"\nmount {{\n  target = "/m"\n}}',
        "base": {"hcl": f'image = "{IMAGE}"\nmount {{\n  source = "/a"\n  target = "/m"\n}}'},
        "path": "mount.0.source",
        "value": None,
    },
]
BAD_PLUGIN = [
    {
        "name": "plugin-wrong-type",
        "field": "allow_privileged",
        "hcl": 'allow_privileged = "maybe"',
        "base": {"hcl": ""},
        "path": "allow_privileged",
        "value": "maybe",
    },
    {
        "name": "plugin-block-wrong-type",
        "field": "enabled",
        "hcl": 'dangling_containers {\n  enabled = "maybe"\n}',
        "base": {"hcl": "dangling_containers {\n}"},
        "path": "dangling_containers.enabled",
        "value": "maybe",
    },
]


@pytest.fixture
def run(
    goclient: Path, tmp_path: Path, containerd_address: str, nomad_image: str, nomad_client: Any
) -> Iterator[subprocess.CompletedProcess[str]]:
    """The program's run, with a namespace as Nomad's bridge mode pins one."""
    from ctrexec.net import netns

    alloc_id = str(uuid.uuid4())
    ns = netns.create(alloc_id)
    agent = {"address": containerd_address, "namespace": NOMAD_NAMESPACE}
    plan = {
        "plugin": str(PLUGIN),
        "wire": str(WIRE),
        "out_dir": str(tmp_path),
        "alloc_id": alloc_id,
        "netns": ns.path,
        "env": {"NOMAD_TASK_NAME": "run", "NOMAD_ALLOC_ID": alloc_id},
        "plugin_configs": {
            "full": _source(nconfig.PLUGIN_SCHEMA, plugin_full(containerd_address)),
            "minimal": _source(nconfig.PLUGIN_SCHEMA, {}),
        },
        "task_configs": {
            "full": _source(nconfig.TASK_SCHEMA, TASK_FULL),
            "minimal": _source(nconfig.TASK_SCHEMA, {"image": IMAGE}),
            "coerced": _source(nconfig.TASK_SCHEMA, COERCED),
        },
        "agent": _source(nconfig.PLUGIN_SCHEMA, agent),
        "away": _source(nconfig.PLUGIN_SCHEMA, {**agent, "address": str(tmp_path / "no.sock")}),
        "bad_plugin_configs": BAD_PLUGIN,
        "bad_task_configs": BAD_TASK,
        "run": {
            "hcl": _hcl(
                nconfig.TASK_SCHEMA,
                {
                    "image": IMAGE,
                    "command": "sh",
                    "args": [
                        "-c",
                        'echo "task=$0 cwd=$(pwd) label=$1"; exit 3',
                        "${NOMAD_TASK_NAME}",
                        "x",
                    ],
                    "work_dir": "/tmp",
                    "labels": {"team": "core"},
                },
            )
        },
        "long": {
            "hcl": _hcl(nconfig.TASK_SCHEMA, {"image": IMAGE, "command": "sleep", "args": ["600"]})
        },
    }
    (tmp_path / "plan.json").write_text(json.dumps(plan))
    done = None
    try:
        done = subprocess.run(
            [str(goclient), str(tmp_path / "plan.json")],
            check=False,
            capture_output=True,
            text=True,
            timeout=600,
        )
        yield done
    finally:
        if done is None or done.returncode != 0:
            _destroy_started(done.stdout if done else "", agent)
        netns.remove(ns.path)


def _destroy_started(stdout: str, agent: dict[str, Any]) -> None:
    """After a failed run: no plugin left running, and what Nomad would do, DestroyTask
    (force) for each task the run started."""
    events = [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]
    for e in events:  # a crash of the program itself leaves its plugins running
        if e["step"] == "connected" and not e["reattach"]:
            with contextlib.suppress(OSError):
                if PLUGIN.name.encode() in Path(f"/proc/{e['pid']}/cmdline").read_bytes():
                    os.kill(e["pid"], signal.SIGKILL)
    started = [e["task_id"] for e in events if e["step"] == "starting"]
    if not started:
        return
    p = launch_long_lived(agent)
    try:
        for task_id in started:
            # never created, or destroyed by the run itself
            with contextlib.suppress(grpc.RpcError):
                p.driver.DestroyTask(
                    dpb.DestroyTaskRequest(task_id=task_id, force=True), timeout=60
                )
    finally:
        p.kill()


def _rpcs(events: list[dict[str, Any]], instance: int) -> list[str]:
    return [e["method"] for e in events if e["step"] == "rpc" and e["instance"] == instance]


def _one(events: list[dict[str, Any]], step: str, **match: Any) -> dict[str, Any]:
    [e] = [e for e in events if e["step"] == step and all(e.get(k) == v for k, v in match.items())]
    return e


def test_go_client(
    run: subprocess.CompletedProcess[str], tmp_path: Path, containerd_address: str
) -> None:
    assert run.returncode == 0, f"{run.stdout}\n{run.stderr}"
    events = [json.loads(line) for line in run.stdout.splitlines()]
    # The plugins' stderr as go-plugin forwards it: no traceback, even at Kill().
    stderr = "\n".join(p.read_text() for p in sorted(tmp_path.glob("stderr-*.log")))
    assert "Traceback" not in stderr, stderr
    assert events[-1]["step"] == "done"

    # The handshake as go-plugin parses it, and Nomad's boot order.
    for e in (e for e in events if e["step"] == "connected"):
        assert (e["protocol"], e["network"]) == ("grpc", "unix")
        # A reattach takes the protocol from the stored config: no version is negotiated.
        assert e["version"] == (0 if e["reattach"] else 2), e
    assert _rpcs(events, 1) == ["PluginInfo", "ConfigSchema"]
    assert set(_rpcs(events, 2)) == {"SetConfig"}
    assert _rpcs(events, 3)[:3] == ["SetConfig", "Init", "TaskConfigSchema"]
    assert _rpcs(events, 4) == ["PluginInfo", "Init", "RecoverTask", "InspectTask"]
    info = _one(events, "plugin_info")["info"]
    assert info["type"] == "DRIVER" and "v0.1.0" in info["plugin_api_versions"]
    assert _one(events, "connected", instance=4)["reattach"] is True

    # Both schemas converted by hcldec: every kind and type they use.
    kinds = set(_one(events, "schema", which="plugin")["seen"]) | set(
        _one(events, "schema", which="task")["seen"]
    )
    for k in ("object", "Attr", "default", "literal", "block_value", "block_list"):
        assert f"kind:{k}" in kinds
    for t in ("string", "bool", "number", "list(string)", "map(string)"):
        assert f"type:{t}" in kinds
    assert "required" in kinds

    # Every attribute and block is set in the full configs; defaults in the minimal ones.
    assert _names(nconfig.PLUGIN_SCHEMA, plugin_full(containerd_address)) == _names(
        nconfig.PLUGIN_SCHEMA
    )
    assert _names(nconfig.TASK_SCHEMA, TASK_FULL) == _names(nconfig.TASK_SCHEMA)
    expect = {
        ("plugin", "full"): (nconfig.PLUGIN_SCHEMA, plugin_full(containerd_address)),
        ("plugin", "minimal"): (nconfig.PLUGIN_SCHEMA, {}),
        ("task", "full"): (nconfig.TASK_SCHEMA, {**TASK_FULL, "args": ["-c", "echo run"]}),
        ("task", "minimal"): (nconfig.TASK_SCHEMA, {"image": IMAGE}),
        ("task", "coerced"): (
            nconfig.TASK_SCHEMA,
            {"image": IMAGE, "shm_size": 65536, "privileged": True, "args": ["7"]},
        ),
    }
    for (which, name), (schema, values) in expect.items():
        harness = cty_encode(hclspec.to_proto(schema), values)
        wanted = hclspec.decode(schema, harness)
        forms = {}
        for form in ("hcl", "json"):
            e = _one(events, "encoded", which=which, name=name, form=form)
            assert "msgpack" in e, e
            forms[form] = base64.b64decode(e["msgpack"])
            # The plugin's decoder reads Go's bytes as the values the job gave.
            assert hclspec.decode(schema, forms[form]) == wanted, (which, name, form)
        # Both of Nomad's paths give the same bytes, and so does the Python harness.
        assert forms["hcl"] == forms["json"] == harness, (which, name)
    for name in ("full", "minimal"):  # twice each, as the loader validates
        oks = [e["ok"] for e in events if e["step"] == "set_config" and e["name"] == name]
        assert oks == [True, True], name

    # What hcldec rejects, the plugin rejects too, naming the same field.
    rejected = [e for e in events if e["step"] == "rpc" and "error" in e]
    for case in BAD_TASK + BAD_PLUGIN:
        diags = _one(events, "hcldec_rejects", name=case["name"])["diags"]
        assert diags and any(case["field"] in d["summary"] + d["detail"] for d in diags), diags
        assert _one(events, "plugin_rejects", name=case["name"])["rejected"] is True
    for e in rejected:
        if e["code"] == "FailedPrecondition":
            continue  # the unreachable containerd below
        assert e["code"] == "InvalidArgument", e
        # Not retried under the restart policy: no RecoverableError{recoverable: true}.
        for d in e.get("details", []):
            assert d.get("value", {}).get("recoverable") is not True, e
    messages = " ".join(e["error"] for e in rejected)
    for case in BAD_TASK + BAD_PLUGIN:
        assert case["field"] in messages, (case, messages)

    # The task flow, and the long task seen again after reattach and after a plugin kill.
    started = _one(events, "started", task="run")
    assert started["has_config"] and int(started["handle_version"]) >= 1
    ran = _one(events, "exited", task="run")
    assert int(ran["wait"]["result"]["exit_code"]) == 3, ran
    assert "task=run cwd=/tmp label=x" in ran["stdout"]
    assert [e["state"] for e in events if e["step"] == "recovered"] == ["RUNNING", "RUNNING"]
    assert "err" not in _one(events, "exited", task="long")["wait"]

    # Kill() with the Fingerprint stream open: the process is gone (and no traceback),
    # having exited on GRPCController.Shutdown, before go-plugin's SIGKILL.
    assert _one(events, "killed", instance=5)["exited"] is True
    last = (tmp_path / "stderr-5.log").read_text()
    assert "plugin exited" in last and "failed to exit gracefully" not in last, last

    # An error a retry may fix carries the RecoverableError detail, as Go reads it.
    [away] = [e for e in rejected if e["code"] == "FailedPrecondition"]
    assert away["method"] == "SetConfig" and "does not exist" in away["error"], away
    assert away["details"] == [
        {
            "type_url": "type.googleapis.com/hashicorp.nomad.plugins.shared.structs.RecoverableError",
            "value": {"recoverable": True},
        }
    ]
