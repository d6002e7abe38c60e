#!/usr/bin/env bash
# Stops the test cluster of scripts/k8s-up.sh: every component it started (by
# its pid file), the pods' containers cri-dockerd left in Docker, kube-proxy's
# iptables rules and the kubelet's mounts; then removes the state directory
# but its logs/. Keeps the binary cache. Idempotent: with nothing running it
# does nothing and exits 0.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/k8s-lib.sh

[ "$(id -u)" -eq 0 ] || { k8s_log "run as root"; exit 1; }

# stop NAME: SIGTERM to the component's pid, SIGKILL after 15 seconds.
stop() {
  local name=$1 pid i
  if pid=$(k8s_pid "$name"); then
    k8s_log "stopping $name ($pid)"
    kill -TERM "$pid" 2>/dev/null || true
    for i in $(seq 1 30); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.5
    done
    if kill -0 "$pid" 2>/dev/null; then
      k8s_log "$name ($pid) still running: SIGKILL"
      kill -KILL "$pid" 2>/dev/null || true
    fi
  fi
  rm -f "$K8S_RUN/$name.pid"
}

# The kubelet first, so it restarts no container removed below.
stop kubelet

# The pods' containers: cri-dockerd labels each sandbox and container it
# creates with io.kubernetes.docker.type (podsandbox or container).
ids=$(docker ps -aq --filter label=io.kubernetes.docker.type 2>/dev/null || true)
if [ -n "$ids" ]; then
  k8s_log "removing $(echo "$ids" | wc -l) pod containers"
  # shellcheck disable=SC2086
  docker rm -f -v $ids >/dev/null 2>&1 || true
fi

for ((i = ${#K8S_COMPONENTS[@]} - 1; i >= 0; i--)); do
  [ "${K8S_COMPONENTS[i]}" = kubelet ] || stop "${K8S_COMPONENTS[i]}"
done

# kube-proxy's chains (KUBE-*) in the iptables and nftables of the host.
if [ -x "$K8S_BIN/k8s" ] && iptables -t nat -S 2>/dev/null | grep -q '^-N KUBE-'; then
  "$K8S_BIN/k8s" kube-proxy --cleanup >> "$K8S_LOGS/kube-proxy.log" 2>&1 || true
fi
# The kubelet's own (KUBE-FIREWALL, KUBE-KUBELET-CANARY, KUBE-IPTABLES-HINT),
# which kube-proxy leaves: the jumps to them, then the chains.
for ipt in iptables ip6tables; do
  command -v "$ipt" >/dev/null 2>&1 || continue
  for t in filter nat mangle; do
    rules=$("$ipt" -t "$t" -S 2>/dev/null | grep -E '^-A [A-Z]+ .*-j KUBE-' | grep -v '^-A KUBE-' || true)
    while read -r rule; do
      [ -z "$rule" ] || eval "$ipt -w -t $t -D ${rule#-A }" 2>/dev/null || true
    done <<< "$rules"
    chains=$("$ipt" -t "$t" -S 2>/dev/null | awk '/^-N KUBE-/{print $2}' || true)
    for c in $chains; do "$ipt" -w -t "$t" -F "$c" 2>/dev/null || true; done
    for c in $chains; do "$ipt" -w -t "$t" -X "$c" 2>/dev/null || true; done
  done
done

# The kubelet's tmpfs and bind mounts of volumes (secrets, projected tokens).
if [ -d "$K8S_DIR/kubelet" ]; then
  # The kubelet also bind-mounts its root directory onto itself (shared
  # mount propagation): that one goes last.
  findmnt -rn -o TARGET | awk -v root="$K8S_DIR/kubelet" '$0 == root || index($0, root "/") == 1' | sort -r |
    while read -r m; do umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true; done
fi

# The state but its logs: the next k8s-up.sh starts a fresh cluster.
if [ -d "$K8S_DIR" ]; then
  find "$K8S_DIR" -mindepth 1 -maxdepth 1 ! -name logs -exec rm -rf {} +
fi
k8s_log "down"
