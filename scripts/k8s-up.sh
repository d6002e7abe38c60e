#!/usr/bin/env bash
# Starts a real single-node Kubernetes cluster on this machine, built from
# sources (docs/kubernetes-cluster.md): etcd, kube-apiserver,
# kube-controller-manager, kube-scheduler, kube-proxy and kubelet from the
# multi-call binary of deploy/kubernetes/cluster, cri-dockerd in front of the
# local Docker Engine, pods on Docker's default bridge. Builds what is missing
# first (scripts/k8s-build.sh; cached, so a second run builds nothing), then
# waits until the node is Ready and a test pod ran. Prints the admin
# kubeconfig's path on its last line. Idempotent: with the cluster up, it
# only prints that path. Run as root. Stop it with scripts/k8s-down.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/k8s-lib.sh

[ "$(id -u)" -eq 0 ] || { k8s_log "run as root (kubelet, kube-proxy and cri-dockerd need it)"; exit 1; }

# fail COMPONENT MESSAGE: says what failed with the tail of COMPONENT's log.
fail() {
  k8s_log "FAILED: $2"
  if [ -n "$1" ] && [ -f "$K8S_LOGS/$1.log" ]; then
    echo "----- last lines of $K8S_LOGS/$1.log -----" >&2
    tail -n 40 "$K8S_LOGS/$1.log" >&2
    echo "-----" >&2
  fi
  exit 1
}

# wait_for SECONDS COMPONENT WHAT COMMAND...: runs COMMAND every half second
# until it succeeds; fails with COMPONENT's log when SECONDS pass or when
# COMPONENT's process is gone.
wait_for() {
  local secs=$1 comp=$2 what=$3 deadline
  shift 3
  deadline=$((SECONDS + secs))
  until "$@" >/dev/null 2>&1; do
    if [ -n "$comp" ] && ! k8s_pid "$comp" >/dev/null; then
      fail "$comp" "$comp exited while waiting for $what"
    fi
    [ $SECONDS -lt $deadline ] || fail "$comp" "no $what after ${secs}s"
    sleep 0.5
  done
}

node_ready() {
  [ "$(k8s_kubectl get node "$K8S_NODE" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null)" = True ]
}

all_running() {
  local c
  for c in "${K8S_COMPONENTS[@]}"; do k8s_pid "$c" >/dev/null || return 1; done
}

if [ -f "$K8S_KUBECONFIG" ] && [ -x "$K8S_BIN/k8s" ] && all_running && node_ready; then
  k8s_log "the cluster is already up"
  echo "$K8S_KUBECONFIG"
  exit 0
fi

t0=$SECONDS

# --- what the machine needs ------------------------------------------------
# iptables: kube-proxy's Service rules; conntrack: kube-proxy clears stale
# UDP flows with it; socat: cri-dockerd's kubectl port-forward, and the check
# below that cri-dockerd listens; openssl: the certificates below. Installed
# only when missing, as scripts/deps.sh does.
need=()
command -v iptables >/dev/null 2>&1 || need+=(iptables)
command -v conntrack >/dev/null 2>&1 || need+=(conntrack)
command -v socat >/dev/null 2>&1 || need+=(socat)
command -v openssl >/dev/null 2>&1 || need+=(openssl)
if [ "${#need[@]}" -gt 0 ]; then
  k8s_log "installing ${need[*]}"
  apt-get update -qq
  policy=/usr/sbin/policy-rc.d
  had_policy=false
  [ -e "$policy" ] && had_policy=true
  $had_policy || { printf '#!/bin/sh\nexit 101\n' > "$policy"; chmod 0755 "$policy"; }
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
  $had_policy || rm -f "$policy"
fi
docker info >/dev/null 2>&1 || { k8s_log "the Docker engine is not running"; exit 1; }

# --- binaries and the pause image ------------------------------------------
scripts/k8s-build.sh k8s cri-dockerd pause

# The node's address: docker0's, the gateway of every pod. The apiserver
# advertises it (the `kubernetes` Service's endpoint) and the kubelet reports
# it as the node's InternalIP, so pods and the apiserver reach them there.
NODE_IP=${WEBSUMMONER_K8S_NODE_IP:-$(ip -4 -o addr show docker0 | awk '{split($4, a, "/"); print a[1]; exit}')}
[ -n "$NODE_IP" ] || { k8s_log "docker0 has no IPv4 address"; exit 1; }
POD_CIDR=$(docker network inspect bridge -f '{{range .IPAM.Config}}{{.Subnet}}{{end}}')

mkdir -p "$K8S_PKI" "$K8S_LOGS" "$K8S_RUN" "$K8S_DIR/etcd" "$K8S_DIR/kubelet" "$K8S_DIR/cri-dockerd"
chmod 0700 "$K8S_PKI" "$K8S_DIR/etcd"

# --- certificates -------------------------------------------------------------
# One CA signs everything; ECDSA P-256 keys are quick to make. Made once per
# state directory (k8s-down.sh removes it).
if [ ! -f "$K8S_PKI/ca.crt" ]; then
  openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$K8S_PKI/ca.key" 2>/dev/null
  openssl req -x509 -new -key "$K8S_PKI/ca.key" -subj "/CN=websummoner-k8s-ca" -days 3650 \
    -addext "basicConstraints=critical,CA:TRUE" \
    -addext "keyUsage=critical,keyCertSign,cRLSign,digitalSignature" \
    -out "$K8S_PKI/ca.crt"
fi

# cert NAME SUBJECT USAGE [SANS]: NAME.crt/NAME.key signed by the CA;
# USAGE is serverAuth or clientAuth.
cert() {
  local name=$1 subj=$2 usage=$3 sans=${4:-} ext
  [ -f "$K8S_PKI/$name.crt" ] && return 0
  ext=$(mktemp)
  {
    echo "basicConstraints=critical,CA:FALSE"
    echo "keyUsage=critical,digitalSignature,keyEncipherment"
    echo "extendedKeyUsage=$usage"
    echo "authorityKeyIdentifier=keyid"
    [ -z "$sans" ] || echo "subjectAltName=$sans"
  } > "$ext"
  openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$K8S_PKI/$name.key" 2>/dev/null
  openssl req -new -key "$K8S_PKI/$name.key" -subj "$subj" 2>/dev/null |
    openssl x509 -req -CA "$K8S_PKI/ca.crt" -CAkey "$K8S_PKI/ca.key" -CAcreateserial \
      -days 3650 -extfile "$ext" -out "$K8S_PKI/$name.crt" 2>/dev/null
  rm -f "$ext"
}
cert apiserver "/CN=kube-apiserver" serverAuth \
  "DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local,DNS:localhost,IP:127.0.0.1,IP:$K8S_SERVICE_IP,IP:$NODE_IP"
# The apiserver's client certificate towards kubelets (logs, exec, port-forward).
cert apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client" clientAuth
cert admin "/O=system:masters/CN=admin" clientAuth
# The Node authorizer and NodeRestriction know a kubelet by this name and group.
cert kubelet "/O=system:nodes/CN=system:node:$K8S_NODE" clientAuth
# These users are bound by the apiserver's bootstrap RBAC policy.
cert controller-manager "/CN=system:kube-controller-manager" clientAuth
cert scheduler "/CN=system:kube-scheduler" clientAuth
cert kube-proxy "/CN=system:kube-proxy" clientAuth
# Service account tokens: the apiserver signs with sa.key and verifies with sa.pub.
if [ ! -f "$K8S_PKI/sa.key" ]; then
  openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out "$K8S_PKI/sa.key" 2>/dev/null
  openssl pkey -in "$K8S_PKI/sa.key" -pubout -out "$K8S_PKI/sa.pub" 2>/dev/null
fi

# kubeconfig FILE USER: a kubeconfig with the CA and USER's cert embedded.
kubeconfig() {
  local file=$1 user=$2
  [ -f "$file" ] && return 0
  cat > "$file.tmp" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: websummoner
  cluster:
    server: https://127.0.0.1:$K8S_API_PORT
    certificate-authority-data: $(base64 -w0 < "$K8S_PKI/ca.crt")
users:
- name: $user
  user:
    client-certificate-data: $(base64 -w0 < "$K8S_PKI/$user.crt")
    client-key-data: $(base64 -w0 < "$K8S_PKI/$user.key")
contexts:
- name: websummoner
  context:
    cluster: websummoner
    user: $user
current-context: websummoner
EOF
  chmod 0600 "$file.tmp"
  mv "$file.tmp" "$file"
}
kubeconfig "$K8S_KUBECONFIG" admin
for u in kubelet controller-manager scheduler kube-proxy; do kubeconfig "$K8S_DIR/$u.kubeconfig" "$u"; done

# --- configuration files ------------------------------------------------------
# Pods' resolv.conf: the host's, less loopback name servers (unreachable from a
# pod's network namespace). There is no cluster DNS (no CoreDNS image here).
if [ ! -f "$K8S_DIR/resolv.conf" ]; then
  grep -vE '^nameserver[[:space:]]+(127\.|::1)' /etc/resolv.conf > "$K8S_DIR/resolv.conf" || true
fi

# write FILE: stdin into FILE, only if that changes FILE (kube-proxy exits
# when its configuration file is written to, even with the same content).
write() {
  local new
  new=$(cat)
  [ -f "$1" ] && [ "$(cat "$1")" = "$new" ] && return 0
  printf '%s\n' "$new" > "$1.tmp"
  mv "$1.tmp" "$1"
}

write "$K8S_DIR/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
# This machine's Docker runs on cgroup v1, which kubelet refuses by default since v1.35.
failCgroupV1: false
failSwapOn: false
# No CAP_SYS_RESOURCE here: the kubelet cannot lower its own oom_score_adj
# to the default -999 (it only logs the failure).
oomScoreAdj: 0
# Docker's cgroup driver here (docker info); kubelet and runtime must agree.
cgroupDriver: cgroupfs
containerRuntimeEndpoint: unix://$K8S_CRI_SOCKET
# Only TLS clients with the CA's certificates, authorized by the apiserver.
authentication:
  anonymous:
    enabled: false
  webhook:
    enabled: true
  x509:
    clientCAFile: $K8S_PKI/ca.crt
authorization:
  mode: Webhook
readOnlyPort: 0
address: $NODE_IP
healthzBindAddress: 127.0.0.1
clusterDomain: cluster.local
resolvConf: $K8S_DIR/resolv.conf
# The disk holds every locally built image and none can be pulled again:
# image garbage collection off (100), and eviction only on a truly full disk.
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard:
  memory.available: 100Mi
  nodefs.available: 1%
  nodefs.inodesFree: 1%
  imagefs.available: 1%
EOF

write "$K8S_DIR/kube-proxy.yaml" <<EOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: iptables
clientConnection:
  kubeconfig: $K8S_DIR/kube-proxy.kubeconfig
hostnameOverride: $K8S_NODE
# Pods' addresses: Docker's default bridge. Traffic from outside it to a
# ClusterIP is masqueraded.
clusterCIDR: $POD_CIDR
# Leave the host's conntrack table size alone.
conntrack:
  maxPerCore: 0
# No CAP_SYS_RESOURCE here to lower it to the default -999.
oomScoreAdj: 0
metricsBindAddress: 127.0.0.1:10249
healthzBindAddress: 127.0.0.1:10256
EOF

# Pod to ClusterIP to a pod on the same bridge: the bridge must pass its frames
# through iptables, or replies skip the DNAT's reverse translation.
modprobe br_netfilter 2>/dev/null || true
sysctl -qw net.bridge.bridge-nf-call-iptables=1 net.ipv4.ip_forward=1 || true

# --- components ------------------------------------------------------------------
# start NAME COMMAND...: runs COMMAND in the background in a session of its
# own, its output in logs/NAME.log and its pid in run/NAME.pid, unless NAME
# is already running.
start() {
  local name=$1
  shift
  if k8s_pid "$name" >/dev/null; then
    return 0
  fi
  k8s_log "starting $name"
  {
    echo "=== $(date -u +%FT%TZ) $*"
  } >> "$K8S_LOGS/$name.log"
  setsid "$@" >> "$K8S_LOGS/$name.log" 2>&1 < /dev/null &
  local pid=$! i
  echo "$pid" > "$K8S_RUN/$name.pid"
  # Until the child has exec'd, /proc/PID/exe is the shell's or setsid's and
  # k8s_pid calls the component gone; wait_for must not look before then.
  for ((i = 0; i < 600; i++)); do
    k8s_pid "$name" >/dev/null && return 0
    kill -0 "$pid" 2>/dev/null || return 0 # exited: wait_for says so, with its log
    sleep 0.05
  done
}

K8S=$K8S_BIN/k8s
CURL=(curl -fsS --cacert "$K8S_PKI/ca.crt" --cert "$K8S_PKI/admin.crt" --key "$K8S_PKI/admin.key")

start etcd "$K8S" etcd --name=websummoner --data-dir="$K8S_DIR/etcd" \
  --listen-client-urls="http://127.0.0.1:$K8S_ETCD_PORT" \
  --advertise-client-urls="http://127.0.0.1:$K8S_ETCD_PORT" \
  --listen-peer-urls="http://127.0.0.1:$K8S_ETCD_PEER_PORT" \
  --initial-advertise-peer-urls="http://127.0.0.1:$K8S_ETCD_PEER_PORT" \
  --initial-cluster="websummoner=http://127.0.0.1:$K8S_ETCD_PEER_PORT" \
  --unsafe-no-fsync=true \
  --log-level=warn
wait_for 60 etcd "etcd health" curl -fsS "http://127.0.0.1:$K8S_ETCD_PORT/health"

start kube-apiserver "$K8S" kube-apiserver \
  --etcd-servers="http://127.0.0.1:$K8S_ETCD_PORT" \
  --bind-address=0.0.0.0 --secure-port="$K8S_API_PORT" --advertise-address="$NODE_IP" \
  --tls-cert-file="$K8S_PKI/apiserver.crt" --tls-private-key-file="$K8S_PKI/apiserver.key" \
  --client-ca-file="$K8S_PKI/ca.crt" \
  --kubelet-client-certificate="$K8S_PKI/apiserver-kubelet-client.crt" \
  --kubelet-client-key="$K8S_PKI/apiserver-kubelet-client.key" \
  --kubelet-preferred-address-types=InternalIP \
  --service-account-issuer=https://kubernetes.default.svc.cluster.local \
  --service-account-key-file="$K8S_PKI/sa.pub" \
  --service-account-signing-key-file="$K8S_PKI/sa.key" \
  --service-cluster-ip-range="$K8S_SERVICE_CIDR" \
  --authorization-mode=Node,RBAC \
  --enable-admission-plugins=NodeRestriction \
  --allow-privileged=true \
  --v=1
wait_for 120 kube-apiserver "apiserver readiness" "${CURL[@]}" "https://127.0.0.1:$K8S_API_PORT/readyz"

start kube-controller-manager "$K8S" kube-controller-manager \
  --kubeconfig="$K8S_DIR/controller-manager.kubeconfig" \
  --authentication-kubeconfig="$K8S_DIR/controller-manager.kubeconfig" \
  --authorization-kubeconfig="$K8S_DIR/controller-manager.kubeconfig" \
  --bind-address=127.0.0.1 \
  --leader-elect=false \
  --use-service-account-credentials=true \
  --service-account-private-key-file="$K8S_PKI/sa.key" \
  --root-ca-file="$K8S_PKI/ca.crt" \
  --v=1

start kube-scheduler "$K8S" kube-scheduler \
  --kubeconfig="$K8S_DIR/scheduler.kubeconfig" \
  --authentication-kubeconfig="$K8S_DIR/scheduler.kubeconfig" \
  --authorization-kubeconfig="$K8S_DIR/scheduler.kubeconfig" \
  --bind-address=127.0.0.1 \
  --leader-elect=false \
  --v=1

# A socket file left by a cri-dockerd that did not stop (a killed run, a
# machine stopped mid-run) exists before the new one listens: the new one
# removes it only after it has connected to Docker, and a kubelet started in
# between is refused and exits. So the file goes first, and the wait is for a
# connection, not for the file.
k8s_pid cri-dockerd >/dev/null || rm -f "$K8S_CRI_SOCKET"
start cri-dockerd "$K8S_BIN/cri-dockerd" \
  --container-runtime-endpoint="unix://$K8S_CRI_SOCKET" \
  --cri-dockerd-root-directory="$K8S_DIR/cri-dockerd" \
  --pod-infra-container-image="$K8S_PAUSE_IMAGE" \
  --docker-endpoint=unix:///var/run/docker.sock \
  --network-plugin= \
  --streaming-bind-addr=127.0.0.1:0
wait_for 30 cri-dockerd "a connection to cri-dockerd's socket" socat -u OPEN:/dev/null "UNIX-CONNECT:$K8S_CRI_SOCKET"

start kube-proxy "$K8S" kube-proxy --config="$K8S_DIR/kube-proxy.yaml" --v=1

start kubelet "$K8S" kubelet \
  --config="$K8S_DIR/kubelet.yaml" \
  --kubeconfig="$K8S_DIR/kubelet.kubeconfig" \
  --root-dir="$K8S_DIR/kubelet" \
  --hostname-override="$K8S_NODE" \
  --node-ip="$NODE_IP" \
  --v=1

wait_for 120 kubelet "node $K8S_NODE Ready" node_ready
for c in "${K8S_COMPONENTS[@]}"; do k8s_pid "$c" >/dev/null || fail "$c" "$c is not running"; done
k8s_log "node $K8S_NODE Ready after $((SECONDS - t0))s"

# --- a test pod -----------------------------------------------------------------
# The default ServiceAccount comes from the controller-manager; pods are
# refused until it exists.
wait_for 60 kube-controller-manager "the default ServiceAccount" k8s_kubectl -n default get serviceaccount default
pod=websummoner-k8s-up-check
k8s_kubectl -n default delete pod "$pod" --ignore-not-found --wait=true >/dev/null
t1=$SECONDS
k8s_kubectl -n default run "$pod" --image="$K8S_PAUSE_IMAGE" --image-pull-policy=Never --restart=Never >/dev/null
if ! k8s_kubectl -n default wait --for=condition=Ready "pod/$pod" --timeout=90s >/dev/null; then
  k8s_kubectl -n default describe pod "$pod" >&2 || true
  fail kubelet "the test pod did not run"
fi
ip=$(k8s_kubectl -n default get pod "$pod" -o jsonpath='{.status.podIP}')
k8s_log "test pod Running at $ip after $((SECONDS - t1))s"
k8s_kubectl -n default delete pod "$pod" --wait=true >/dev/null
k8s_log "cluster up in $((SECONDS - t0))s; KUBECONFIG:"
echo "$K8S_KUBECONFIG"
