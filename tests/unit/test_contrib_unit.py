"""The systemd unit shipped for ``ctrexec supervise`` runs a command ctrexec accepts."""

from __future__ import annotations

import configparser
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

from ctrexec.cli.main import build_parser

UNIT = Path(__file__).parents[2] / "contrib" / "systemd" / "ctrexec-supervise@.service"


def _unit() -> configparser.ConfigParser:
    parser = configparser.ConfigParser(interpolation=None)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read_string(UNIT.read_text())
    return parser


def test_exec_start_is_ctrexec_supervise_of_the_instance_namespace() -> None:
    argv = shlex.split(_unit()["Service"]["ExecStart"].replace("%i", "web"))
    assert Path(argv[0]).name == "ctrexec"
    args = build_parser().parse_args(argv[1:])
    assert args.command == "supervise"
    assert args.namespace == "web"


def test_stops_with_sigterm_and_comes_back() -> None:
    service = _unit()["Service"]
    assert service["KillSignal"] == "SIGTERM"
    assert service["Restart"] == "always"
    assert "containerd.service" in _unit()["Unit"]["After"]


def test_starts_no_containerd_of_its_own() -> None:
    """Wanting containerd.service would start the distribution's daemon, and the CLI
    would then talk to it instead of the embedded one the user's tasks live on (issue 39):
    the unit only orders itself after it, for a host that runs it anyway."""
    unit = _unit()
    for section in unit.sections():
        for key in ("Wants", "Requires", "BindsTo", "Requisite", "PartOf", "Upholds"):
            assert "containerd" not in unit[section].get(key, ""), (section, key)


def test_the_containerd_it_supervises_can_be_pinned() -> None:
    """An optional EnvironmentFile (leading ``-``) may set $CONTAINERD_ADDRESS; without
    it the supervisor follows the CLI's rule, which ``ctrexec info`` prints."""
    files = _unit()["Service"]["EnvironmentFile"].split()
    assert any(f.startswith("-/") for f in files)


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="no systemd-analyze")
def test_systemd_accepts_the_unit(tmp_path: Path) -> None:
    ctrexec = tmp_path / "ctrexec"
    ctrexec.write_text("#!/bin/sh\n")
    ctrexec.chmod(0o755)
    unit = tmp_path / "ctrexec-supervise@.service"
    unit.write_text(UNIT.read_text().replace("/usr/local/bin/ctrexec", str(ctrexec)))
    instance = tmp_path / "ctrexec-supervise@web.service"
    instance.symlink_to(unit)
    out = subprocess.run(
        ["systemd-analyze", "verify", str(instance)], capture_output=True, text=True, check=False
    )
    assert out.returncode == 0, out.stderr
    assert "ctrexec-supervise" not in out.stderr, out.stderr
