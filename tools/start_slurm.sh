#!/usr/bin/env bash
# A one-node SLURM for tests/test_slurm.py on Debian or Ubuntu, run as root by tools/system_packages.sh.
# Idempotent: a second run starts only what is not running, and restarts the daemons when a config changed.
# No systemd needed (the daemons are started directly, as in a container).
#
#   KVCACHE_BENCH_SLURM_GPUS   fake GPUs the node declares (gres gpu:fake:N on character devices), default 2
#   KVCACHE_BENCH_SLURM_WAIT   seconds to wait for the node to come up idle, default 120
#
# Accounting runs through slurmdbd and MariaDB because Snakemake's SLURM executor asks `sacct` for the state of
# its jobs; without accounting `sacct` answers nothing and every job looks lost.
set -euo pipefail
gpus=${KVCACHE_BENCH_SLURM_GPUS:-2}
wait_seconds=${KVCACHE_BENCH_SLURM_WAIT:-120}
node=$(hostname -s)
etc=/etc/slurm
say() { echo "[tools/start_slurm.sh] $*"; }
alive() { pgrep -x "$1" >/dev/null 2>&1; }

[ "$(id -u)" = 0 ] || { say "must run as root (sudo bash tools/start_slurm.sh)"; exit 1; }
[ "$gpus" -le 4 ] || { say "at most 4 fake GPUs (one per character device below)"; exit 1; }

# 1. Debian's packages
wanted=(munge slurm-client slurmctld slurmd slurmdbd mariadb-server)
absent=()
for package in "${wanted[@]}"; do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "ok installed" || absent+=("$package")
done
if [ ${#absent[@]} -gt 0 ]; then
  say "installing ${absent[*]}"
  DEBIAN_FRONTEND=noninteractive apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${absent[@]}" >/dev/null
fi

# 2. configuration: the node as slurmd detects it (memory lowered to 90%, which must not exceed what it finds)
mkdir -p "$etc" /var/spool/slurm/ctld /var/spool/slurm/d /var/log/slurm /run/munge /run/mysqld
detected=$(slurmd -C | head -n 1)
memory=$(sed -n 's/.*RealMemory=\([0-9]*\).*/\1/p' <<<"$detected")
node_line=$(sed "s/RealMemory=[0-9]*/RealMemory=$((memory * 9 / 10))/" <<<"$detected")
gres_types="" node_gres="" gres_conf=""
devices=(/dev/null /dev/zero /dev/full /dev/urandom)
if [ "$gpus" -gt 0 ]; then
  gres_types=$'GresTypes=gpu\nAccountingStorageTRES=gres/gpu'
  node_gres=" Gres=gpu:fake:$gpus"
  for ((i = 0; i < gpus; i++)); do gres_conf+="NodeName=$node Name=gpu Type=fake File=${devices[$i]}"$'\n'; done
fi
slurm_conf="ClusterName=kvcache-bench
SlurmctldHost=$node(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
StateSaveLocation=/var/spool/slurm/ctld
SlurmdSpoolDir=/var/spool/slurm/d
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/linux
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=127.0.0.1
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU=500
MinJobAge=300
ReturnToService=2
MpiDefault=none
SwitchType=switch/none
$gres_types
$node_line NodeAddr=127.0.0.1$node_gres State=UNKNOWN
PartitionName=debug Nodes=$node Default=YES MaxTime=INFINITE State=UP"
dbd_conf="AuthType=auth/munge
DbdHost=localhost
DbdAddr=127.0.0.1
SlurmUser=root
LogFile=/var/log/slurm/slurmdbd.log
PidFile=/run/slurmdbd.pid
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StorageUser=slurm
StoragePass=kvcache-bench
StorageLoc=slurm_acct_db"
changed=no
install_file() {  # path mode content: rewritten only when different, so a rerun restarts nothing
  if [ ! -f "$1" ] || [ "$(cat "$1")" != "$3" ]; then printf '%s\n' "$3" >"$1"; chmod "$2" "$1"; changed=yes; fi
}
install_file "$etc/slurm.conf" 644 "$slurm_conf"
install_file "$etc/gres.conf" 644 "${gres_conf%$'\n'}"
install_file "$etc/slurmdbd.conf" 600 "$dbd_conf"
stop() {  # daemon pidfile
  [ -f "$2" ] && kill "$(cat "$2")" 2>/dev/null || true
  for _ in $(seq 40); do alive "$1" || return 0; sleep 0.25; done
}
if [ "$changed" = yes ]; then
  say "configuration changed: restarting the SLURM daemons that run"
  stop slurmd /run/slurmd.pid; stop slurmctld /run/slurmctld.pid; stop slurmdbd /run/slurmdbd.pid
  # slurmctld refuses a state directory saved under another cluster name (an earlier test cluster's)
  saved=/var/spool/slurm/ctld/clustername
  [ -f "$saved" ] && [ "$(cat "$saved")" != kvcache-bench ] && rm -rf /var/spool/slurm/ctld/*
fi

# 3. munge: the daemons authenticate to each other with its key
[ -s /etc/munge/munge.key ] || mungekey --create --force 2>/dev/null || dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 2>/dev/null
chown -R munge:munge /etc/munge /run/munge /var/lib/munge /var/log/munge
chmod 400 /etc/munge/munge.key
alive munged || { say "starting munged"; runuser -u munge -- /usr/sbin/munged; }
for _ in $(seq 20); do munge -n | unmunge >/dev/null 2>&1 && break; sleep 0.5; done

# 4. accounting: MariaDB, its database and user, slurmdbd, and this cluster, account and users registered
chown mysql:mysql /run/mysqld
if ! mariadb -e 'select 1' >/dev/null 2>&1; then
  say "starting mariadb"
  nohup /usr/sbin/mariadbd --user=mysql >/var/log/slurm/mariadb.log 2>&1 &
  for _ in $(seq 60); do mariadb -e 'select 1' >/dev/null 2>&1 && break; sleep 0.5; done
fi
mariadb -e "CREATE DATABASE IF NOT EXISTS slurm_acct_db;
  CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED BY 'kvcache-bench';
  ALTER USER 'slurm'@'localhost' IDENTIFIED BY 'kvcache-bench';
  GRANT ALL ON slurm_acct_db.* TO 'slurm'@'localhost'; FLUSH PRIVILEGES;"
alive slurmdbd || { say "starting slurmdbd"; /usr/sbin/slurmdbd; }
for _ in $(seq 60); do sacctmgr -n list cluster >/dev/null 2>&1 && break; sleep 0.5; done
sacctmgr -i add cluster kvcache-bench >/dev/null 2>&1 || true
sacctmgr -i add account kvcache-bench Description=tests Organization=kvcache-bench >/dev/null 2>&1 || true
for user in root ${SUDO_USER:-}; do
  sacctmgr -i add user "$user" Account=kvcache-bench DefaultAccount=kvcache-bench >/dev/null 2>&1 || true
done

# 5. the controller and the node, then wait until the node takes jobs
alive slurmctld || { say "starting slurmctld"; /usr/sbin/slurmctld; }
alive slurmd || { say "starting slurmd"; /usr/sbin/slurmd; }
state=""
for _ in $(seq $((wait_seconds * 2))); do
  state=$(sinfo -h -n "$node" -o %t 2>/dev/null || true)
  case "$state" in
    idle | mix | alloc) break ;;
    down* | drain* | inval*) scontrol update nodename="$node" state=resume >/dev/null 2>&1 || true ;;
  esac
  sleep 0.5
done
sinfo -o '%P %a %D %t %N %G'
if [[ ! "$state" =~ ^(idle|mix|alloc)$ ]]; then
  say "node $node not ready (state: ${state:-none}); the ends of the daemons' logs:"
  tail -n 20 /var/log/slurm/*.log
  exit 1
fi
say "SLURM ready: node $node, $gpus fake GPU(s)"
