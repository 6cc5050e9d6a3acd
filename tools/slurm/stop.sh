#!/usr/bin/env bash
# Stops the cluster tools/slurm/start.sh started: cancels its jobs, shuts slurmctld and slurmd
# down, stops munged, says how many jobs ran, and checks that none of them (nor a job's
# process) is left running.
set -uo pipefail

STATE=${TRASHFIRE_SLURM_DIR:-/tmp/trashfire-slurm}
CONF=/etc/slurm/slurm.conf
MARK="# written by trashfire tools/slurm/start.sh"
DAEMONS=(slurmctld slurmd slurmstepd munged)

running() {  # the PIDs of what is still up, of the daemons named (default: all)
  local name
  for name in "${@:-${DAEMONS[@]}}"; do pgrep -x "$name"; done
}

if [ -e "$CONF" ] && ! grep -qF "$MARK" "$CONF"; then
  echo "tools/slurm/stop.sh: $CONF is not ours; leaving this machine's SLURM alone" >&2
  exit 1
fi
if [ -n "$(running slurmctld)" ]; then
  timeout 10 scancel --full --quiet --user "$(id -un)" 2>/dev/null || true
  timeout 10 scontrol shutdown 2>/dev/null || true
fi
for _ in $(seq 20); do
  [ -z "$(running slurmctld slurmd slurmstepd)" ] && break
  sleep 0.5
done
for name in slurmctld slurmd slurmstepd; do pkill -KILL -x "$name" 2>/dev/null || true; done
pkill -x munged 2>/dev/null || true
for _ in $(seq 20); do
  [ -z "$(running)" ] && break
  sleep 0.5
done
if [ -n "$(running)" ]; then
  echo "tools/slurm/stop.sh: still running: $(running | xargs ps -o pid=,comm= -p | xargs)" >&2
  exit 1
fi
if [ -s "$STATE/jobcomp.log" ]; then
  states=$(sed -n 's/.* JobState=\([A-Z_]*\).*/\1/p' "$STATE/jobcomp.log" | sort | uniq -c | awk '{printf "%s%s %s", sep, $1, $2; sep=", "}')
  echo "SLURM jobs run since the cluster started: $(wc -l < "$STATE/jobcomp.log") ($states; from $STATE/jobcomp.log)"
fi
echo "SLURM cluster stopped (logs in $STATE)"
