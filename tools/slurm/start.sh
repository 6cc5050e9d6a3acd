#!/usr/bin/env bash
# A single-node SLURM cluster on this machine, for the `slurm` tests and for trying the
# cluster set-up (docs/cluster.md): Debian's munge, slurmctld and slurmd, one node of this
# machine's CPUs, one partition. Installs the packages when they are missing (root, apt-get).
# Idempotent: a second start finds the cluster answering and does nothing. Stop it with
# tools/slurm/stop.sh, which leaves nothing running.
#
# No accounting database (slurmdbd): `sacct` fails here as it does on clusters without one,
# which is the case where submitit alone would wait forever on a dead job (state UNKNOWN);
# finished jobs are logged one per line to $TRASHFIRE_SLURM_DIR/jobcomp.log (jobcomp/filetxt).
#
# Environment: TRASHFIRE_SLURM_DIR (state, logs; default /tmp/trashfire-slurm),
# TRASHFIRE_SLURM_OVERSUBSCRIBE (jobs that may share one CPU; default 4: the tests' jobs wait
# more than they compute).
set -euo pipefail

STATE=${TRASHFIRE_SLURM_DIR:-/tmp/trashfire-slurm}
OVERSUBSCRIBE=${TRASHFIRE_SLURM_OVERSUBSCRIBE:-4}
CONF=/etc/slurm/slurm.conf
MARK="# written by trashfire tools/slurm/start.sh"

die() { echo "tools/slurm/start.sh: $*" >&2; exit 1; }

if command -v sinfo >/dev/null && timeout 10 sinfo -h -o %T 2>/dev/null | grep -qE '^(idle|mixed|allocated)'; then
  echo "a SLURM cluster already answers: $(sinfo -h -o '%P %D %T' | head -1)"
  exit 0
fi

[ "$(id -u)" = 0 ] || die "needs root (apt-get, munge and slurmd run as root here); run it as root or start a cluster yourself"
if ! command -v slurmctld >/dev/null || ! command -v slurmd >/dev/null || ! command -v sbatch >/dev/null || ! command -v munged >/dev/null; then
  echo "installing Debian's slurmctld, slurmd, slurm-client and munge"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends slurmctld slurmd slurm-client munge >/dev/null
fi
if [ -e "$CONF" ] && ! grep -qF "$MARK" "$CONF"; then
  die "$CONF exists and is not ours: this machine has a SLURM set-up of its own; use it (export SLURM_CONF) or move it away"
fi

mkdir -p "$STATE"/ctld "$STATE"/spool
rm -f "$STATE"/jobcomp.log  # one line per job of this cluster's run: stop.sh counts them
host=$(hostname -s)
# the node as slurmd sees it (CPUs, sockets, cores, memory), so that it is not drained for
# claiming more than it has
node=$(slurmd -C | head -1 | sed -e "s/^NodeName=[^ ]*/NodeName=$host NodeAddr=127.0.0.1/")
cat > "$CONF" <<CONFIG
$MARK
ClusterName=trashfire
SlurmctldHost=$host(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
StateSaveLocation=$STATE/ctld
SlurmdSpoolDir=$STATE/spool
SlurmctldPidFile=$STATE/slurmctld.pid
SlurmdPidFile=$STATE/slurmd.pid
SlurmctldLogFile=$STATE/slurmctld.log
SlurmdLogFile=$STATE/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/filetxt
JobCompLoc=$STATE/jobcomp.log
MpiDefault=none
ReturnToService=2
# a time limit or a scancel ends a job within seconds (SIGTERM, then SIGKILL after KillWait)
KillWait=5
# finished jobs stay visible to scontrol for 10 minutes: without accounting, the only
# record of how a job ended
MinJobAge=600
$node State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:$OVERSUBSCRIBE
CONFIG

# munge authenticates slurmctld and slurmd to each other (Debian's key from its install)
[ -s /etc/munge/munge.key ] || { mungekey --create --keyfile /etc/munge/munge.key 2>/dev/null || create-munge-key -f; chown munge:munge /etc/munge/munge.key; chmod 400 /etc/munge/munge.key; }
mkdir -p /run/munge /var/log/munge /var/lib/munge
chown munge:munge /run/munge /var/log/munge /var/lib/munge
if ! pgrep -x munged >/dev/null; then
  runuser -u munge -- /usr/sbin/munged
fi

pgrep -x slurmctld >/dev/null || slurmctld
pgrep -x slurmd >/dev/null || slurmd

for _ in $(seq 60); do
  if timeout 5 sinfo -h -o %T 2>/dev/null | grep -qE '^(idle|mixed|allocated)'; then
    echo "SLURM cluster up: $(sinfo -h -o 'partition %P, %D node (%N), %c CPUs, %T') (state and logs in $STATE)"
    exit 0
  fi
  sleep 1
done
die "the cluster did not come up within 60 s: $(sinfo -h -o '%N %T %E' 2>&1 | head -3); see $STATE/slurmctld.log and $STATE/slurmd.log"
