"""What the daemon itself warns of: containerd 2.x's deprecation warnings.

containerd 2.x records each deprecated feature it sees in use (its own config, an
image, a client's call) and reports them in Introspection.Server; each becomes one
finding, with containerd's own words and its id. 1.x has no such field and reports
none. Nothing here is garbage: the fix is the config or the client containerd names.
"""

from __future__ import annotations

from ctrexec.doctor.findings import Check, Finding, Scope

KIND = "deprecation"


def find(scope: Scope) -> list[Finding]:
    return [
        Finding(
            kind=KIND,
            where=d.id,
            what=f"containerd: {d.message}",
            fix="stop using what containerd names (in its config, an image or a client)",
            since=d.last_seen,
            garbage=False,
        )
        for d in scope.client.server().deprecations
    ]


CHECK = Check(kind=KIND, find=find)
