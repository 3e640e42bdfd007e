#!/usr/bin/env bash
# A real multi-node Slurm cluster on this one machine, for tests and the Slurm demo.
#
#   scripts/slurm-testbed.sh install          apt-get the Debian packages (root)
#   scripts/slurm-testbed.sh start            munged, MariaDB, slurmdbd, slurmctld and 4 slurmd (node1..node4)
#   scripts/slurm-testbed.sh stop|status
#   scripts/slurm-testbed.sh crash NODE       kill the node's namespace: every process on it dies at once
#   scripts/slurm-testbed.sh revive NODE      start the node's slurmd again
#   scripts/slurm-testbed.sh freeze-job NODE  freeze the job's processes on NODE (cgroup freezer: state D)
#   scripts/slurm-testbed.sh freeze-rank NODE [TEXT]  freeze only the training ranks on NODE (the agent stays up)
#   scripts/slurm-testbed.sh thaw-job NODE
#   scripts/slurm-testbed.sh foreign-oom     a process that is no job's outgrows a 32 MB memory cgroup: the
#                                            kernel's OOM killer ends it (every node shares this kernel log)
#   scripts/slurm-testbed.sh stop-ctld|start-ctld   a scheduler outage (jobs keep running on the nodes)
#   scripts/slurm-testbed.sh stop-dbd|start-dbd     an accounting outage (sacct fails, squeue answers)
#   scripts/slurm-testbed.sh env              print the export line clients need (SLURM_CONF)
#
# Each slurmd runs in its own UTS+PID+mount namespace with hostname nodeK, so `hostname`, %N and
# SLURMD_NODENAME all say nodeK. Everything (config, state, logs, sockets, database) lives under
# $ORCH_TESTBED_DIR (default /tmp/orch-testbed). Needs root.
set -euo pipefail

D="${ORCH_TESTBED_DIR:-/tmp/orch-testbed}"
NODES="${ORCH_TESTBED_NODES:-4}"
CONF="$D/etc/slurm.conf"
export SLURM_CONF="$CONF"
DB_PORT=17306
DBD_PORT=17819
CTLD_PORT=17817
PKGS=(slurmctld slurmd slurm-client munge slurmdbd mariadb-server)

log() { echo "testbed: $*" >&2; }

wait_for() {  # wait_for SECONDS DESCRIPTION CMD...
  local deadline=$((SECONDS + $1)) what=$2
  shift 2
  until "$@" >/dev/null 2>&1; do
    if [ "$SECONDS" -ge "$deadline" ]; then log "timed out waiting for $what"; return 1; fi
    sleep 0.2
  done
}

install() {
  local missing=()
  for p in "${PKGS[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
  if [ "${#missing[@]}" -gt 0 ]; then
    log "installing ${missing[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  fi
}

write_config() {
  mkdir -p "$D"/{etc,state,log,run,spool,munge,mysql,dev}
  chmod 711 "$D/munge"
  local host
  host=$(hostname)
  {
    echo "127.0.0.1 localhost $host"
    for i in $(seq 1 "$NODES"); do echo "127.0.0.1 node$i"; done
  } >"$D/etc/hosts"
  for i in $(seq 1 "$NODES"); do
    for g in 0 1; do
      [ -e "$D/dev/node$i-nvidia$g" ] || mknod "$D/dev/node$i-nvidia$g" c 1 3   # fake GPU device files
    done
  done
  cat >"$CONF" <<EOF
ClusterName=orchtest
SlurmctldHost=localhost
SlurmctldPort=$CTLD_PORT
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$D/munge/munge.socket
CredType=cred/munge
StateSaveLocation=$D/state
SlurmdSpoolDir=$D/spool/%n
SlurmctldPidFile=$D/run/slurmctld.pid
SlurmdPidFile=$D/run/slurmd-%n.pid
SlurmctldLogFile=$D/log/slurmctld.log
SlurmdLogFile=$D/log/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmdParameters=config_overrides
GresTypes=gpu
ReturnToService=2
SlurmdTimeout=20
KillWait=5
MinJobAge=300
InactiveLimit=0
MessageTimeout=10
MpiDefault=none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
AccountingStoragePort=$DBD_PORT
AccountingStoragePass=$D/munge/munge.socket
JobCompType=jobcomp/none
SchedulerType=sched/backfill
PreemptType=preempt/none
NodeName=DEFAULT CPUs=2 RealMemory=1000 Gres=gpu:2 State=UNKNOWN
EOF
  for i in $(seq 1 "$NODES"); do
    echo "NodeName=node$i NodeHostname=localhost NodeAddr=127.0.0.1 Port=$((17000 + i))" >>"$CONF"
  done
  echo "PartitionName=debug Nodes=node[1-$NODES] Default=YES MaxTime=INFINITE State=UP" >>"$CONF"
  {
    for i in $(seq 1 "$NODES"); do
      echo "NodeName=node$i Name=gpu File=$D/dev/node$i-nvidia[0-1]"
    done
  } >"$D/etc/gres.conf"
  cat >"$D/etc/slurmdbd.conf" <<EOF
AuthType=auth/munge
AuthInfo=socket=$D/munge/munge.socket
DbdHost=localhost
DbdPort=$DBD_PORT
SlurmUser=root
PidFile=$D/run/slurmdbd.pid
LogFile=$D/log/slurmdbd.log
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=$DB_PORT
StorageUser=slurm
StoragePass=orchtestbed
StorageLoc=slurm_acct_db
EOF
  chmod 600 "$D/etc/slurmdbd.conf"
  echo "$CONF" >"$D/etc/cgroup.conf.unused"
}

start_munge() {
  [ -S "$D/munge/munge.socket" ] && munge --socket="$D/munge/munge.socket" -n >/dev/null 2>&1 && return 0
  [ -f "$D/munge/munge.key" ] || { dd if=/dev/urandom of="$D/munge/munge.key" bs=1024 count=1 status=none; }
  chmod 400 "$D/munge/munge.key"
  setsid munged --force --socket="$D/munge/munge.socket" --key-file="$D/munge/munge.key" \
    --pid-file="$D/run/munged.pid" --log-file="$D/log/munged.log" --seed-file="$D/munge/munge.seed" \
    --foreground </dev/null >>"$D/log/munged.out" 2>&1 &
  wait_for 15 munged munge --socket="$D/munge/munge.socket" -n
}

start_mariadb() {
  local sock="$D/run/mysqld.sock"
  if [ ! -d "$D/mysql/mysql" ]; then
    mariadb-install-db --datadir="$D/mysql" --user=root --auth-root-authentication-method=socket \
      >"$D/log/mariadb-install.log" 2>&1
  fi
  if ! mariadb-admin --socket="$sock" ping >/dev/null 2>&1; then
    setsid mariadbd --datadir="$D/mysql" --socket="$sock" --port=$DB_PORT --bind-address=127.0.0.1 \
      --user=root --pid-file="$D/run/mysqld.pid" --log-error="$D/log/mariadb.log" --skip-log-bin \
      --innodb-buffer-pool-size=64M </dev/null >>"$D/log/mariadb.out" 2>&1 &
    wait_for 60 mariadb mariadb-admin --socket="$sock" ping
  fi
  mariadb --socket="$sock" -e "CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1' IDENTIFIED BY 'orchtestbed';
    CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED BY 'orchtestbed';
    GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1'; GRANT ALL ON slurm_acct_db.* TO 'slurm'@'localhost';"
}

start_slurmdbd() {
  if ! pgrep -f "slurmdbd -D" >/dev/null; then
    SLURM_CONF="$CONF" setsid slurmdbd -D </dev/null >>"$D/log/slurmdbd.out" 2>&1 &
  fi
  wait_for 60 slurmdbd sacctmgr -n list cluster
  sacctmgr -i add cluster orchtest >/dev/null 2>&1 || true
}

start_ctld() {
  if ! pgrep -f "slurmctld -D" >/dev/null; then
    setsid slurmctld -D -i </dev/null >>"$D/log/slurmctld.out" 2>&1 &
  fi
  wait_for 60 slurmctld scontrol ping
}

node_pid1() {  # the PID (in our namespace) of the shell that is PID 1 of the node's namespace
  pgrep -f "^sh -c hostname $1; " | head -1 || true
}

start_node() {
  local n=$1 pid
  pid=$(node_pid1 "$n")
  if [ -n "$pid" ]; then return 0; fi
  mkdir -p "$D/spool/$n"
  setsid unshare --uts --pid --mount --fork --mount-proc --propagation private \
    sh -c "hostname $n; mount --bind '$D/etc/hosts' /etc/hosts; SLURM_CONF='$CONF' slurmd -D -N $n & wait" \
    </dev/null >>"$D/log/node-$n.out" 2>&1 &
  echo $! >"$D/run/node-$n.pid"
}

nodes_idle() {
  [ "$(sinfo -h -N -o '%N %t' | awk '$2 ~ /^(idle|mix|alloc)/' | sort -u | wc -l)" -ge "$NODES" ]
}

start() {
  [ "$(id -u)" = 0 ] || { log "needs root"; exit 1; }
  install
  write_config
  start_munge
  start_mariadb
  start_slurmdbd
  start_ctld
  for i in $(seq 1 "$NODES"); do start_node "node$i"; done
  # slurmctld keeps a drain or down it saved (an earlier run's frozen or crashed node): back in service
  for n in $(sinfo -h -N -o '%N %t' 2>/dev/null | awk '$2 ~ /^(drain|drng|drained|down|fail)/ {print $1}'); do
    scontrol update NodeName="$n" State=RESUME >/dev/null 2>&1 || true
  done
  wait_for 60 "nodes idle" nodes_idle || { sinfo -N >&2 || true; tail -20 "$D"/log/slurmd-node1.log >&2 || true; exit 1; }
  for i in $(seq 1 "$NODES"); do scontrol update NodeName="node$i" State=RESUME >/dev/null 2>&1 || true; done
  log "up: $(sinfo -h -o '%P %D %t %N' | tr '\n' ' ')"
  log "use: export SLURM_CONF=$CONF"
}

stop() {
  pkill -9 -f "^sh -c hostname node[0-9]+; " 2>/dev/null || true
  pkill -9 -f "^unshare --uts --pid --mount" 2>/dev/null || true
  rm -f "$D"/run/node-*.pid
  pkill -f "slurmd -D -N node" 2>/dev/null || true
  pkill -f "slurmctld -D" 2>/dev/null || true
  pkill -f "slurmdbd -D" 2>/dev/null || true
  [ -f "$D/run/mysqld.pid" ] && kill "$(cat "$D/run/mysqld.pid")" 2>/dev/null || true
  [ -f "$D/run/munged.pid" ] && kill "$(cat "$D/run/munged.pid")" 2>/dev/null || true
  # a start right after must not meet the old daemons still holding their ports and pid files
  local i
  for i in $(seq 1 30); do
    pgrep -f "slurmd -D -N node|slurmctld -D|slurmdbd -D" >/dev/null || break
    sleep 1
  done
  pkill -9 -f "slurmd -D -N node|slurmctld -D|slurmdbd -D" 2>/dev/null || true
  log "stopped"
}

status() {
  scontrol ping && sinfo -N -o '%N %t %E'
}

crash() {
  local n=$1 pid
  pid=$(node_pid1 "$n")
  [ -n "$pid" ] || { log "no such node $n"; exit 1; }
  kill -9 "$pid"  # PID 1 of the namespace: the kernel kills every process in it
  [ -f "$D/run/node-$n.pid" ] && kill -9 "$(cat "$D/run/node-$n.pid")" 2>/dev/null || true
  rm -f "$D/run/node-$n.pid"
  log "crashed $n (its namespace and every process in it are gone)"
}

job_pids_on() {  # processes under slurmstepd inside the node's namespace, except slurmstepd itself
  local n=$1 root match=${2:-}  # optional: only processes whose command line contains this text
  root=$(node_pid1 "$n")
  [ -n "$root" ] || return 0
  python3 - "$root" "$match" <<'PY'
import os, sys
root, match = int(sys.argv[1]), sys.argv[2]
parent, comm = {}, {}
for d in os.listdir("/proc"):
    if d.isdigit():
        try:
            s = open(f"/proc/{d}/stat").read()
        except OSError:
            continue
        comm[int(d)] = s[s.index("(") + 1:s.rindex(")")]
        parent[int(d)] = int(s[s.rindex(")") + 2:].split()[1])
def chain(p):
    out = []
    while p in parent and p not in (0, 1):
        out.append(p)
        p = parent[p]
    return out
for pid in parent:
    c = chain(pid)
    if root in c and comm[pid] not in ("slurmstepd", "slurmd", "sh") and any(comm.get(a) == "slurmstepd" for a in c[1:]):
        if match:
            try:
                if match.encode() not in open(f"/proc/{pid}/cmdline", "rb").read():
                    continue
            except OSError:
                continue
        print(pid)
PY
}

foreign_oom() {  # prints the killed process's pid; exit 1 if no memory cgroup can be made here
  local cg
  if [ -d /sys/fs/cgroup/memory ]; then
    cg=/sys/fs/cgroup/memory/orch-foreign; mkdir -p "$cg"
    echo $((32 * 1024 * 1024)) > "$cg/memory.limit_in_bytes" || return 1
    echo 0 > "$cg/memory.swappiness" 2>/dev/null || true
  elif grep -qw memory /sys/fs/cgroup/cgroup.controllers 2>/dev/null; then
    cg=/sys/fs/cgroup/orch-foreign; mkdir -p "$cg"
    echo 32M > "$cg/memory.max" || return 1
    echo 0 > "$cg/memory.swap.max" 2>/dev/null || true
  else
    echo "no memory cgroup controller here" >&2; return 1
  fi
  sh -c 'echo $$ > "$1/cgroup.procs" && echo $$ && exec python3 -c "x = bytearray(512 * 1024 * 1024)"' \
    foreign "$cg" || true
}

freeze() {  # freeze NODE [MATCH]: every job process on NODE, or only those whose command line has MATCH
  local n=$1 cg=/sys/fs/cgroup/freezer/orch-$1 pids
  mkdir -p "$cg"
  pids=$(job_pids_on "$n" "${2:-}")
  [ -n "$pids" ] || { log "no job processes on $n"; exit 1; }
  for p in $pids; do echo "$p" >"$cg/cgroup.procs" 2>/dev/null || true; done
  echo FROZEN >"$cg/freezer.state"
  log "froze $(echo "$pids" | wc -w) processes on $n"
}

thaw() {
  local cg=/sys/fs/cgroup/freezer/orch-$1
  [ -d "$cg" ] || return 0
  echo THAWED >"$cg/freezer.state"
  while read -r p; do echo "$p" >/sys/fs/cgroup/freezer/cgroup.procs 2>/dev/null || true; done <"$cg/cgroup.procs"
  rmdir "$cg" 2>/dev/null || true
  log "thawed $1"
}

case "${1:-}" in
  install) install ;;
  start) start ;;
  stop) stop ;;
  restart) stop; start ;;
  status) status ;;
  crash) crash "${2:?node}" ;;
  revive) start_node "${2:?node}"; wait_for 60 "node $2" sh -c "sinfo -h -n $2 -o %t | grep -qE 'idle|mix|alloc'" ;;
  freeze-job) freeze "${2:?node}" ;;
  freeze-rank) freeze "${2:?node}" "${3:-demo_train}" ;;
  thaw-job) thaw "${2:?node}" ;;
  foreign-oom) foreign_oom ;;
  stop-ctld) pkill -f "slurmctld -D" || true; wait_for 30 "slurmctld down" sh -c '! scontrol ping' ;;
  start-ctld) start_ctld ;;
  stop-dbd) pkill -f "slurmdbd -D" || true; wait_for 30 "slurmdbd down" sh -c '! pgrep -x slurmdbd' ;;
  start-dbd) start_slurmdbd ;;
  env) echo "export SLURM_CONF=$CONF" ;;
  *) sed -n '2,18p' "$0"; exit 2 ;;
esac
