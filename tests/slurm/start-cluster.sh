#!/usr/bin/env bash
# A real single-node SLURM cluster for the slow tests and CI (Debian/Ubuntu, run as root, no
# systemd): munged, MariaDB, slurmdbd (accounting, so `sacct` works), slurmctld and slurmd, with an
# account `ebd2n` (for root and the user who ran sudo) that test campaign files name
# (resources.account), so nothing is guessed.
# --no-accounting: the same cluster as one without slurmdbd (AccountingStorageType
# accounting_storage/none; slurmdbd stopped, so `sacct` and `sacctmgr` answer nothing), for the
# test of README "Clusters without accounting". Running it without the option restores accounting.
# Switching restarts slurmctld and slurmd (queued and running jobs survive in their saved state).
# Idempotent: with the daemons up as asked it checks them and returns in about a second. Any
# failure is one line on stderr and exit status 1 — CI must fail, never skip, when there is no cluster.
#   Usage: sudo tests/slurm/start-cluster.sh [--no-accounting]     (logs: /var/log/ebd2n-slurm/)
# Sized for a small machine: all its CPUs, EBD2N_SLURM_MEMORY_MB (default 8192) of memory.
set -uo pipefail

case "${1:-}" in
  "") STORAGE=accounting_storage/slurmdbd ;;
  --no-accounting) STORAGE=accounting_storage/none ;;
  *) echo "usage: tests/slurm/start-cluster.sh [--no-accounting]" >&2; exit 2 ;;
esac

LOGS=/var/log/ebd2n-slurm
ACCOUNT=ebd2n
CLUSTER=ebd2n
MEMORY_MB="${EBD2N_SLURM_MEMORY_MB:-8192}"
NODE="$(hostname -s)"

fail() { echo "start-cluster: $*" >&2; exit 1; }

# wait_for SECONDS COMMAND...: true once COMMAND succeeds, false after SECONDS.
wait_for() {
  local deadline=$((SECONDS + $1)); shift
  until "$@" >/dev/null 2>&1; do
    [ "$SECONDS" -ge "$deadline" ] && return 1
    sleep 0.5
  done
}

node_idle() { sinfo -h -n "$NODE" -o %T 2>/dev/null | grep -Eq '^(idle|mixed|allocated|completing)'; }
# account_known USER: USER may submit jobs to the test account
account_known() { sacctmgr -n -P list assoc user="$1" account="$ACCOUNT" format=account 2>/dev/null | grep -qx "$ACCOUNT"; }

# the accounting storage the running controller uses ("" when none answers)
storage() { scontrol show config 2>/dev/null | awk '$1 == "AccountingStorageType" {print $3}'; }
# stop DAEMON: SIGTERM (slurmctld saves its state first), then wait until it has gone
stop() {
  pgrep -x "$1" >/dev/null || return 0
  kill -TERM "$(cat "/run/slurm/$1.pid" 2>/dev/null)" 2>/dev/null
  wait_for 60 bash -c "! pgrep -x $1" || fail "$1 did not stop"
}

# Already up as asked? (munge, controller, node; with accounting also the database and this
# user's account; without it no slurmdbd): nothing to do.
if pgrep -x munged >/dev/null && scontrol ping 2>/dev/null | grep -q UP && [ "$(storage)" = "$STORAGE" ] && node_idle; then
  if [ "$STORAGE" = accounting_storage/none ]; then
    pgrep -x slurmdbd >/dev/null || exit 0
  elif account_known "${SUDO_USER:-$(id -un)}"; then
    exit 0
  fi
fi
[ "$(id -u)" = 0 ] || fail "must run as root (it installs packages and starts daemons)"
USERS="root ${SUDO_USER:-}"  # sudo tests/slurm/start-cluster.sh: the calling user may submit too

mkdir -p "$LOGS"
if ! command -v slurmctld >/dev/null || ! command -v slurmdbd >/dev/null || ! command -v munged >/dev/null \
  || ! command -v mariadbd >/dev/null; then
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    slurm-wlm slurmdbd munge mariadb-server) >"$LOGS/apt.log" 2>&1 \
    || fail "apt-get install slurm-wlm slurmdbd munge mariadb-server failed (see $LOGS/apt.log)"
fi

# munge: the key the Debian package made, the daemon as its own user.
if ! pgrep -x munged >/dev/null; then
  [ -s /etc/munge/munge.key ] || mungekey --create >"$LOGS/munge.log" 2>&1 || fail "could not create /etc/munge/munge.key"
  install -d -o munge -g munge -m 0755 /run/munge
  install -d -o munge -g munge -m 0700 /var/log/munge /var/lib/munge
  runuser -u munge -- /usr/sbin/munged >>"$LOGS/munge.log" 2>&1 || fail "munged did not start (see $LOGS/munge.log)"
fi
wait_for 10 munge -n || fail "munge does not answer (see $LOGS/munge.log)"

install -d -m 0755 /etc/slurm /var/spool/slurmctld /var/spool/slurmd /run/slurm
if [ "$STORAGE" = accounting_storage/slurmdbd ]; then
  ACCOUNTING="AccountingStorageType=$STORAGE
AccountingStorageHost=localhost
AccountingStorageEnforce=associations"
else
  ACCOUNTING="AccountingStorageType=$STORAGE"
fi
# MinJobAge 300 (the SLURM default): finished jobs stay visible to squeue for 5 minutes (the slurm profile's status
# command, README "Running on a SLURM cluster"). No cgroups: process tracking by /proc.
cat >/etc/slurm/slurm.conf <<EOF
ClusterName=$CLUSTER
SlurmctldHost=$NODE
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldPidFile=/run/slurm/slurmctld.pid
SlurmdPidFile=/run/slurm/slurmd.pid
SlurmctldLogFile=$LOGS/slurmctld.log
SlurmdLogFile=$LOGS/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/linux
$ACCOUNTING
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU_Memory
DefMemPerCPU=1024
MinJobAge=300
ReturnToService=2
SlurmdTimeout=60
KillWait=10
MaxArraySize=1001
NodeName=$NODE CPUs=$(nproc) RealMemory=$MEMORY_MB State=UNKNOWN
PartitionName=debug Nodes=$NODE Default=YES MaxTime=INFINITE State=UP
EOF

# A running controller changes its accounting storage only when restarted (slurmd too, so that
# both read the same slurm.conf); without accounting, slurmdbd stops once the controller has.
if pgrep -x slurmctld >/dev/null && [ "$(storage)" != "$STORAGE" ]; then
  stop slurmctld
  stop slurmd
fi
if [ "$STORAGE" = accounting_storage/none ]; then
  stop slurmdbd
else
  # MariaDB for slurmdbd, on its local socket only.
  if ! mariadb-admin ping >/dev/null 2>&1; then
    install -d -o mysql -g mysql /run/mysqld
    [ -d /var/lib/mysql/mysql ] || mariadb-install-db --user=mysql >"$LOGS/mariadb-install.log" 2>&1 \
      || fail "mariadb-install-db failed (see $LOGS/mariadb-install.log)"
    setsid mariadbd --user=mysql --skip-networking --innodb-buffer-pool-size=64M \
      >>"$LOGS/mariadb.log" 2>&1 </dev/null &
    wait_for 60 mariadb-admin ping || fail "mariadb did not start (see $LOGS/mariadb.log)"
  fi
  mariadb -e "CREATE DATABASE IF NOT EXISTS slurm_acct_db;
    CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED BY 'ebd2n-slurm';
    GRANT ALL ON slurm_acct_db.* TO 'slurm'@'localhost';" >>"$LOGS/mariadb.log" 2>&1 \
    || fail "could not create the accounting database (see $LOGS/mariadb.log)"
  cat >/etc/slurm/slurmdbd.conf <<EOF
AuthType=auth/munge
DbdHost=localhost
SlurmUser=root
LogFile=$LOGS/slurmdbd.log
PidFile=/run/slurm/slurmdbd.pid
StorageType=accounting_storage/mysql
StorageHost=localhost
StorageLoc=slurm_acct_db
StorageUser=slurm
StoragePass=ebd2n-slurm
EOF
  chmod 0600 /etc/slurm/slurmdbd.conf
  if ! pgrep -x slurmdbd >/dev/null; then
    slurmdbd >>"$LOGS/slurmdbd.log" 2>&1 || fail "slurmdbd did not start (see $LOGS/slurmdbd.log)"
  fi
  wait_for 60 sacctmgr -n list cluster || fail "slurmdbd does not answer (see $LOGS/slurmdbd.log)"
  sacctmgr -n -P list cluster format=cluster | grep -qx "$CLUSTER" \
    || sacctmgr -i add cluster "$CLUSTER" >>"$LOGS/sacctmgr.log" 2>&1 \
    || fail "sacctmgr add cluster $CLUSTER failed (see $LOGS/sacctmgr.log)"
  sacctmgr -n -P list account "$ACCOUNT" format=account | grep -qx "$ACCOUNT" \
    || sacctmgr -i add account "$ACCOUNT" cluster="$CLUSTER" Description=ebd2n-tests Organization=ebd2n \
    >>"$LOGS/sacctmgr.log" 2>&1
  for user in $USERS; do
    account_known "$user" \
      || sacctmgr -i add user "$user" account="$ACCOUNT" cluster="$CLUSTER" DefaultAccount="$ACCOUNT" >>"$LOGS/sacctmgr.log" 2>&1
    account_known "$user" || fail "sacctmgr could not add account $ACCOUNT for $user (see $LOGS/sacctmgr.log)"
  done
fi

if pgrep -x slurmctld >/dev/null; then
  scontrol reconfigure >>"$LOGS/slurmctld.log" 2>&1 || true
else
  slurmctld >>"$LOGS/slurmctld.log" 2>&1 || fail "slurmctld did not start (see $LOGS/slurmctld.log)"
fi
wait_for 60 bash -c 'scontrol ping | grep -q UP' || fail "slurmctld does not answer (see $LOGS/slurmctld.log)"
[ "$(storage)" = "$STORAGE" ] || fail "slurmctld runs with $(storage), not $STORAGE (see $LOGS/slurmctld.log)"
if ! pgrep -x slurmd >/dev/null; then
  slurmd >>"$LOGS/slurmd.log" 2>&1 || fail "slurmd did not start (see $LOGS/slurmd.log)"
fi
wait_for 60 node_idle || scontrol update nodename="$NODE" state=resume >/dev/null 2>&1
wait_for 30 node_idle || fail "node $NODE is not ready: $(sinfo -h -n "$NODE" -o '%T %E' 2>&1) (see $LOGS/slurmd.log)"

# A real job, end to end: with accounting, its record in the database under the test account;
# without, its state as squeue shows it.
if [ "$STORAGE" = accounting_storage/slurmdbd ]; then
  job="$(sbatch --parsable -A "$ACCOUNT" -t 1 -o /dev/null --wrap true 2>"$LOGS/sbatch.log")" \
    || fail "sbatch of a test job failed: $(head -1 "$LOGS/sbatch.log")"
  wait_for 60 bash -c "sacct -n -X -P -j $job -o State | grep -qx COMPLETED" \
    || fail "test job $job did not complete in sacct: $(sacct -n -X -P -j "$job" -o State 2>&1 | head -1)"
  echo "start-cluster: SLURM cluster $CLUSTER up on $NODE ($(nproc) CPUs, $MEMORY_MB MB, account $ACCOUNT)"
else
  job="$(sbatch --parsable -t 1 -o /dev/null --wrap true 2>"$LOGS/sbatch.log")" \
    || fail "sbatch of a test job failed: $(head -1 "$LOGS/sbatch.log")"
  wait_for 60 bash -c "squeue -h --states=all -j $job -o %T | grep -qx COMPLETED" \
    || fail "test job $job did not complete: $(squeue -h --states=all -j "$job" -o %T 2>&1 | head -1)"
  echo "start-cluster: SLURM cluster $CLUSTER up on $NODE ($(nproc) CPUs, $MEMORY_MB MB, no accounting)"
fi
