# Shared settings of scripts/k8s-up.sh and scripts/k8s-down.sh (sourced, not run).
# Every path and port can be moved by the environment variable named beside it.

K8S_VERSION=v1.37.2
# The binaries (scripts/k8s-build.sh): kept by k8s-down.sh.
K8S_CACHE=${WEBSUMMONER_K8S_CACHE:-$HOME/.cache/websummoner/k8s}/$K8S_VERSION
K8S_BIN=$K8S_CACHE/bin
# The cluster's state: certificates, kubeconfigs, etcd's data, kubelet's root
# directory, logs and pid files. Removed by k8s-down.sh (but its logs/).
K8S_DIR=${WEBSUMMONER_K8S_DIR:-/tmp/websummoner-k8s}
K8S_PKI=$K8S_DIR/pki
K8S_LOGS=$K8S_DIR/logs
K8S_RUN=$K8S_DIR/run
K8S_KUBECONFIG=$K8S_DIR/admin.kubeconfig

K8S_API_PORT=${WEBSUMMONER_K8S_API_PORT:-6443}
K8S_ETCD_PORT=${WEBSUMMONER_K8S_ETCD_PORT:-12379}
K8S_ETCD_PEER_PORT=${WEBSUMMONER_K8S_ETCD_PEER_PORT:-12380}
K8S_SERVICE_CIDR=${WEBSUMMONER_K8S_SERVICE_CIDR:-10.96.0.0/16}
# The first address of the service range: the `kubernetes` Service's ClusterIP.
K8S_SERVICE_IP=${K8S_SERVICE_CIDR%.*/*}.1
K8S_PAUSE_IMAGE=${WEBSUMMONER_K8S_PAUSE_IMAGE:-websummoner/pause:3.10}
K8S_NODE=${WEBSUMMONER_K8S_NODE:-$(hostname | tr '[:upper:]' '[:lower:]')}
K8S_CRI_SOCKET=$K8S_DIR/cri-dockerd.sock

# Start order; k8s-down.sh stops them in the reverse order.
K8S_COMPONENTS=(etcd kube-apiserver kube-controller-manager kube-scheduler cri-dockerd kube-proxy kubelet)

k8s_log() { echo "k8s: $*" >&2; }

# The binary a component's process runs: its pid file is trusted only if
# /proc/<pid>/exe is still that binary (a recycled pid is not ours).
k8s_component_exe() {
  case $1 in
    cri-dockerd) echo "$K8S_BIN/cri-dockerd" ;;
    *) echo "$K8S_BIN/k8s" ;;
  esac
}

# k8s_pid NAME prints the pid of the running component NAME, or fails.
k8s_pid() {
  local f=$K8S_RUN/$1.pid pid exe
  [ -f "$f" ] || return 1
  pid=$(cat "$f")
  [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || return 1
  exe=$(readlink "/proc/$pid/exe" 2>/dev/null) || return 1
  exe=${exe% (deleted)} # still ours after a rebuild replaced the binary
  [ "$exe" = "$(readlink -f "$(k8s_component_exe "$1")")" ] || return 1
  echo "$pid"
}

k8s_kubectl() { "$K8S_BIN/kubectl" --kubeconfig "$K8S_KUBECONFIG" "$@"; }
