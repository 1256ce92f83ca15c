#!/bin/bash
# Issue 39 on a systemd host: where ctrexec's helpers run, and what the supervisor unit
# starts.
#  1. `systemd-run --wait -p Type=oneshot ctrexec run -d ...` with no daemon running:
#     first with CTREXEC_HELPER_SCOPE=0 (the placement before ctrexec.placement: the
#     caller's cgroup), which must lose the daemon with the unit, showing the case is
#     real; then as shipped, which must keep the embedded containerd, the log daemon,
#     the command server and the task, each helper in a ctrexec-ROLE-*.scope of
#     ctrexec.slice.
#     A helper SIGKILLed in its scope (the log daemon, containerd) is noticed by its
#     keeper and started again in a new scope; the task runs on.
#     And doctor names a helper left in another (still active) unit's cgroup.
#  2. contrib/systemd/ctrexec-supervise@.service started with Debian's containerd.service
#     stopped: the unit must not start it, and `ctrexec info` must still name the
#     embedded daemon.
set -euo pipefail
share=${CTREXEC_SHARE:-/mnt/share}
python3 -m venv /root/venv
cp -a "$share/src" /root/src
/root/venv/bin/pip install -q --no-index --find-links "$share/wheels" /root/src
cx=/root/venv/bin/ctrexec
image=docker.io/library/ctrexec-test:latest
fail() { echo "FAIL: $*"; exit 1; }
ok() { echo "ok: $*"; }

# Debian's containerd is enabled in the image; the embedded daemon is the one under test,
# and the CLI's rule prefers the system socket while it exists.
systemctl stop containerd.service
rm -f /run/containerd/containerd.sock
/root/venv/bin/python /root/src/scripts/build-test-image --out /root/image.tar --name "$image" >/dev/null
CTREXEC_NO_SERVER=1 $cx import /root/image.tar >/dev/null
CTREXEC_NO_SERVER=1 $cx daemon stop >/dev/null

# Polls for up to $1 seconds until the command after it succeeds.
within() {
  local limit=$1 t=0
  shift
  until "$@"; do
    [ "$t" -lt $((limit * 10)) ] || return 1
    sleep 0.1
    t=$((t + 1))
  done
}
daemon_gone() { ! CTREXEC_NO_SERVER=1 $cx daemon status >/dev/null; }
daemon_pid() {
  local status
  status=$(CTREXEC_NO_SERVER=1 $cx daemon status || true)
  echo "$status" | sed -n 's/^running (pid \([0-9]*\)).*/\1/p'
}
server_pid() {
  local f
  for f in /run/ctrexec/cli/*.pid; do
    if [ -f "$f" ]; then cat "$f"; return 0; fi
  done
}
stop_server() {
  local pid
  pid=$(server_pid)
  [ -z "$pid" ] || kill "$pid" 2>/dev/null || true
}
state() { CTREXEC_NO_SERVER=1 $cx inspect -f '{{.State.Status}}' "$1" 2>&1 || true; }

echo "== 1a. the caller's placement (CTREXEC_HELPER_SCOPE=0): the unit takes its helpers"
systemd-run --wait --quiet -p Type=oneshot --unit=oneshot-old -E CTREXEC_HELPER_SCOPE=0 \
  $cx run -d --name old "$image" sleep 600
within 60 daemon_gone || fail "the old placement kept containerd: the case shows nothing"
ok "containerd died with the oneshot unit (the issue's case)"
echo "the container afterwards (a new embedded daemon): $(state old)"
CTREXEC_NO_SERVER=1 $cx rm -f old >/dev/null
CTREXEC_NO_SERVER=1 $cx daemon stop >/dev/null
stop_server

echo "== 1b. as shipped: each helper in a scope of its own"
systemd-run --wait --quiet -p Type=oneshot --unit=oneshot-new $cx run -d --name new "$image" sleep 600
# --wait returns once the unit is stopped, i.e. once systemd has ended its cgroup.
pid=$(daemon_pid)
[ -n "$pid" ] || fail "containerd did not outlive the oneshot unit"
grep -q '/ctrexec.slice/ctrexec-containerd-' "/proc/$pid/cgroup" \
  || fail "containerd (pid $pid) is in $(cat "/proc/$pid/cgroup")"
ok "containerd (pid $pid) outlived the unit, in $(cut -d: -f3 "/proc/$pid/cgroup")"
[ "$(state new)" = running ] || fail "the task is $(state new) after its unit ended"
task_pid=$(CTREXEC_NO_SERVER=1 $cx inspect -f '{{.State.Pid}}' new)
kill -0 "$task_pid" || fail "the task's process $task_pid is gone"
ok "the task runs (pid $task_pid) and is listed: $(CTREXEC_NO_SERVER=1 $cx ps --format '{{.Names}} {{.Status}}')"
logd=$(systemctl list-units --type=scope --no-legend --plain 'ctrexec-logd-*' | wc -l)
[ "$logd" -ge 1 ] || fail "no ctrexec-logd scope: $(systemctl list-units --no-legend --plain 'ctrexec-*')"
ok "the log daemon runs in its own scope"
# The command server is started as the command exits: wait for it, bounded.
server_scoped() {
  local p
  p=$(server_pid)
  [ -n "$p" ] && grep -q '/ctrexec.slice/ctrexec-server-' "/proc/$p/cgroup" 2>/dev/null
}
within 60 server_scoped || fail "the command server is not in a scope of its own"
ok "the command server runs in its own scope"
# A later command from another unit goes through that server and sees the task.
out=$(systemd-run --wait --pipe --quiet $cx ps --format '{{.Names}} {{.State}}')
[ "$out" = "new running" ] || fail "a command from another unit saw: $out"
ok "a command from another unit sees it: $out"
systemctl list-units --no-legend --plain 'ctrexec-*'

echo "== 1d. a helper SIGKILLed in its scope is noticed and started again in a new one"
scope_pids() {  # the processes of the running ctrexec-$1-* scopes
  local u
  for u in $(systemctl list-units --type=scope --no-legend --plain "ctrexec-$1-*" | cut -d' ' -f1); do
    cat "/sys/fs/cgroup/ctrexec.slice/$u/cgroup.procs" 2>/dev/null || true
  done
}
old_logd=$(scope_pids logd | head -n 1)
[ -n "$old_logd" ] || fail "no process in a ctrexec-logd scope"
kill -KILL "$old_logd"
within 30 sh -c "! kill -0 $old_logd 2>/dev/null" || fail "log daemon $old_logd outlived SIGKILL"
CTREXEC_NO_SERVER=1 $cx ps >/dev/null  # ps is one of the log daemon's keepers
new_logd() { local p; p=$(scope_pids logd | head -n 1); [ -n "$p" ] && [ "$p" != "$old_logd" ]; }
within 30 new_logd || fail "no new log daemon in a scope: $(systemctl list-units --no-legend --plain 'ctrexec-*')"
ok "log daemon $old_logd SIGKILLed; ps started $(scope_pids logd | head -n 1) in a scope of its own"
old_ctrd=$(daemon_pid)
kill -KILL "$old_ctrd"
within 30 daemon_gone || fail "containerd $old_ctrd outlived SIGKILL"
# the next command starts containerd again (and says so on stderr); the task's shim
# kept it running meanwhile
CTREXEC_NO_SERVER=1 $cx ps >/dev/null 2>&1
[ "$(state new)" = running ] || fail "after containerd's SIGKILL the task is $(state new)"
pid=$(daemon_pid)
[ -n "$pid" ] && [ "$pid" != "$old_ctrd" ] || fail "no new containerd (old $old_ctrd, now '$pid')"
grep -q '/ctrexec.slice/ctrexec-containerd-' "/proc/$pid/cgroup" \
  || fail "the new containerd (pid $pid) is in $(cat "/proc/$pid/cgroup")"
ok "containerd $old_ctrd SIGKILLed; the next command started $pid in a scope of its own, the task still runs"
CTREXEC_NO_SERVER=1 $cx rm -f new >/dev/null

echo "== 1c. doctor names a helper left in another unit's cgroup"
CTREXEC_NO_SERVER=1 $cx daemon stop >/dev/null
stop_server
# A unit that stays active after its command: the daemon lives on in its cgroup.
systemd-run --quiet --unit=holder -p Type=oneshot -p RemainAfterExit=yes \
  -E CTREXEC_HELPER_SCOPE=0 -E CTREXEC_NO_SERVER=1 $cx daemon start >/dev/null
pid=$(daemon_pid)
grep -q '/holder.service' "/proc/$pid/cgroup" || fail "the holder's daemon is in $(cat "/proc/$pid/cgroup")"
report=$(CTREXEC_NO_SERVER=1 $cx doctor --json || true)
echo "$report" | grep -q '"Kind": "helper-placement"' || fail "doctor said: $report"
echo "$report" | grep -q "holder.service" || fail "doctor did not name the unit: $report"
ok "doctor: $(echo "$report" | grep -o '"What": "[^"]*holder.service[^"]*"' | head -n 1)"
CTREXEC_NO_SERVER=1 $cx daemon stop >/dev/null
systemctl stop holder.service
CTREXEC_NO_SERVER=1 $cx doctor --json | grep -q helper-placement && fail "doctor still reports a placement"
ok "with the daemon gone, doctor reports no placement"

echo "== 2. the supervisor unit leaves Debian's containerd.service alone"
sed "s|/usr/local/bin/ctrexec|$cx|" /root/src/contrib/systemd/ctrexec-supervise@.service \
  > /etc/systemd/system/ctrexec-supervise@.service
systemctl daemon-reload
before=$(systemctl is-active containerd.service || true)
systemctl start ctrexec-supervise@ctrexec.service
within 30 systemctl -q is-active ctrexec-supervise@ctrexec.service || fail "the supervisor unit is not active"
after=$(systemctl is-active containerd.service || true)
[ "$after" = inactive ] || fail "containerd.service went from $before to $after"
ok "containerd.service stayed $after"
addr=$(CTREXEC_NO_SERVER=1 $cx info | sed -n 's/^address: *//p')
case "$addr" in
  /run/ctrexec/*) ok "info: address: $addr" ;;
  *) fail "info names $addr" ;;
esac
systemctl stop ctrexec-supervise@ctrexec.service
CTREXEC_NO_SERVER=1 $cx daemon stop >/dev/null
stop_server
echo "helpers.sh: all passed"
