"""The NAT rules the bridge and portmap plugins leave for one attachment, and their removal.

Both plugins name what they make after (network, container id): the bridge plugin's
ipMasq chain ``CNI-<sha512>`` with a POSTROUTING jump carrying the comment
``name: "NET" id: "OWNER"``, and portmap's ``CNI-DN-<sha512>`` chain with jumps from
``CNI-HOSTPORT-DNAT`` (CNI's ``utils.FormatChainName``). Their DELs only find these
rules from the cached result and the container's interface; once either is lost
(a wiped CNI cache, a removed namespace) the rules stay, and worse: the next
attachment of the same group shares the chain names, so its published port hits the
stale DNAT to the old address first, and the bridge plugin's ``iptables -X`` fails
with "resource busy" because a stale jump still references the chain.

So the rules are found here by name and comment alone, as ``iptables -S`` lists them,
and removed: before an ADD (nothing stale in front of the new rules) and around a
DEL (nothing left after ``group down``, and no busy chain for the plugin).
"""

from __future__ import annotations

import hashlib
import logging
import re
import shlex
import subprocess
import time
from collections.abc import Sequence

import attrs

log = logging.getLogger(__name__)

#: portmap's chain that every published port's per-container chain hangs off.
HOSTPORT_DNAT = "CNI-HOSTPORT-DNAT"
#: CNI's maximum chain name length (utils.maxChainLength).
_CHAIN_MAX = 28
#: A chain deletion that races another iptables-nft writer is tried this often.
DELETE_ATTEMPTS = 5
_RETRY_PAUSE = 0.1
#: The families an attachment has rules in.
TOOLS = ("iptables", "ip6tables")
_DNAT_COMMENT = re.compile(r'^dnat name: "(?P<network>.*)" id: "(?P<owner>.*)"$')
_MASQ_COMMENT = re.compile(r'^name: "(?P<network>.*)" id: "(?P<owner>.*)"$')


def chain_name(network: str, owner: str, prefix: str = "") -> str:
    """CNI's per-attachment chain name: ``CNI-`` + prefix + sha512(network + owner)."""
    digest = hashlib.sha512((network + owner).encode()).hexdigest()
    return f"CNI-{prefix}{digest}"[:_CHAIN_MAX]


def masq_comment(network: str, owner: str) -> str:
    """The comment the bridge plugin puts on an attachment's POSTROUTING rule."""
    return f'name: "{network}" id: "{owner}"'


@attrs.frozen
class Rule:
    """One ``-A CHAIN ...`` line of ``iptables -S``, split as the shell would."""

    chain: str
    args: tuple[str, ...]

    @property
    def target(self) -> str | None:
        return _value(self.args, "-j")

    @property
    def comment(self) -> str | None:
        return _value(self.args, "--comment")

    def delete_args(self) -> list[str]:
        return ["-D", self.chain, *self.args]


def _value(args: Sequence[str], flag: str) -> str | None:
    for i, arg in enumerate(args[:-1]):
        if arg == flag:
            return args[i + 1]
    return None


def parse_rules(text: str) -> tuple[list[str], list[Rule]]:
    """The chains (``-N``/``-P``) and rules (``-A``) of ``iptables -S`` output."""
    chains: list[str] = []
    rules: list[Rule] = []
    for line in text.splitlines():
        try:
            words = shlex.split(line)
        except ValueError:  # an unbalanced quote: not a line iptables writes
            continue
        if len(words) >= 2 and words[0] in ("-N", "-P"):
            chains.append(words[1])
        elif len(words) >= 2 and words[0] == "-A":
            rules.append(Rule(words[1], tuple(words[2:])))
    return chains, rules


def attachment_rules(rules: Sequence[Rule], network: str, owner: str) -> list[Rule]:
    """The rules of one attachment outside its own chains: the masquerade jump(s) in
    POSTROUTING (by comment or target) and the jumps to its DNAT chain (by target)."""
    masq, dnat = chain_name(network, owner), chain_name(network, owner, "DN-")
    comment = masq_comment(network, owner)
    out = []
    for rule in rules:
        if rule.chain in (masq, dnat):
            continue  # flushed with the chain
        if rule.target in (masq, dnat) or (rule.chain == "POSTROUTING" and rule.comment == comment):
            out.append(rule)
    return out


def port_holders(rules: Sequence[Rule], network: str) -> dict[tuple[str, int], str]:
    """(protocol, host port) -> container id, from portmap's jumps in
    :data:`HOSTPORT_DNAT` for ``network`` (their comment names both)."""
    out: dict[tuple[str, int], str] = {}
    for rule in rules:
        found = _DNAT_COMMENT.match(rule.comment or "") if rule.chain == HOSTPORT_DNAT else None
        if found is None or found["network"] != network:
            continue
        protocol = _value(rule.args, "-p") or "tcp"
        for part in (_value(rule.args, "--dports") or "").split(","):
            low, _, high = part.partition(":")
            if low.isdigit() and (not high or high.isdigit()):
                for port in range(int(low), int(high or low) + 1):
                    out[(protocol, port)] = found["owner"]
    return out


def owners(rules: Sequence[Rule], network: str) -> set[str]:
    """The owners of ``network``'s attachments that have rules here: the bridge
    plugin's masquerade jumps in POSTROUTING and portmap's jumps in
    :data:`HOSTPORT_DNAT`, by their comments (what :func:`remove_attachment` removes)."""
    out = set(port_holders(rules, network).values())
    for rule in rules:
        found = _MASQ_COMMENT.match(rule.comment or "") if rule.chain == "POSTROUTING" else None
        if found is not None and found["network"] == network:
            out.add(found["owner"])
    return out


def list_rules(tool: str = "iptables") -> list[Rule]:
    """The NAT table's rules; [] when the tool or the table is not there."""
    listed = _run(tool, "-S")
    if listed is None or listed.returncode != 0:
        return []
    return parse_rules(listed.stdout)[1]


def _run(tool: str, *args: str) -> subprocess.CompletedProcess[str] | None:
    """``tool -w -t nat ARGS``; None when the tool is not installed."""
    try:
        return subprocess.run(
            [tool, "-w", "-t", "nat", *args], capture_output=True, text=True, check=False
        )
    except FileNotFoundError:
        return None


def _remove_in(tool: str, network: str, owner: str) -> bool:
    """One pass over one family; True when nothing of the attachment is left."""
    listed = _run(tool, "-S")
    if listed is None or listed.returncode != 0:
        return True  # no tool, or no nat table in this kernel: nothing can be there
    chains, rules = parse_rules(listed.stdout)
    for rule in attachment_rules(rules, network, owner):
        _run(tool, *rule.delete_args())
    clean = True
    for chain in (chain_name(network, owner), chain_name(network, owner, "DN-")):
        if chain not in chains:
            continue
        for action in ("-F", "-X"):
            done = _run(tool, action, chain)
            if done is not None and done.returncode != 0:
                log.info("%s %s %s: %s", tool, action, chain, done.stderr.strip())
                clean = False
    return clean


def remove_attachment(network: str, owner: str) -> None:
    """Remove every NAT rule and chain of (network, owner), IPv4 and IPv6; idempotent.

    A chain that is still referenced ("resource busy": another writer's rule landed,
    or iptables-nft raced us) is tried again after its references are removed again,
    up to :data:`DELETE_ATTEMPTS` times; what is left then is logged, not raised,
    because the caller's DEL or ADD is what matters.
    """
    for tool in TOOLS:
        for attempt in range(DELETE_ATTEMPTS):
            if _remove_in(tool, network, owner):
                break
            if attempt + 1 < DELETE_ATTEMPTS:
                time.sleep(_RETRY_PAUSE)
        else:
            log.warning(
                "%s: rules of %s on %s are left after %d tries",
                tool,
                owner,
                network,
                DELETE_ATTEMPTS,
            )


__all__ = [
    "DELETE_ATTEMPTS",
    "HOSTPORT_DNAT",
    "TOOLS",
    "Rule",
    "attachment_rules",
    "chain_name",
    "list_rules",
    "masq_comment",
    "owners",
    "parse_rules",
    "port_holders",
    "remove_attachment",
]
