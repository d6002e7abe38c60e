#!/usr/bin/env bash
# Proves the test cluster of scripts/k8s-up.sh does what a Kubernetes launcher
# needs, in a namespace of its own (removed at the end):
#   1. a pod of a locally built image runs, with a pod IP, and the host
#      reaches a TCP port of the pod at that IP;
#   2. a Deployment's pod with a ServiceAccount gets its token mounted, and
#      reaches the apiserver from inside through the `kubernetes` Service
#      (kube-proxy) as that ServiceAccount (kubectl exec ... kubectl auth whoami);
#   3. a ResourceQuota of pods: 2 refuses a third pod;
#   4. the node is Ready again after the apiserver was stopped and restarted.
# Needs the cluster up. Prints timings. Usage: scripts/k8s-smoke.sh
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/k8s-lib.sh

ns=websummoner-smoke
kc() { k8s_kubectl -n "$ns" "$@"; }
fail() { k8s_log "SMOKE FAILED: $*"; exit 1; }
ms() { date +%s%3N; }

# A FROM scratch image with the multi-call binary: its kubectl is the
# in-cluster client, its `kubectl proxy` the TCP server of test 1.
TOOLS=websummoner/k8s-tools:$K8S_VERSION
if ! docker image inspect "$TOOLS" >/dev/null 2>&1; then
  k8s_log "building $TOOLS"
  d=$(mktemp -d)
  cp "$K8S_BIN/k8s" "$d/k8s"
  printf 'FROM scratch\nCOPY k8s /k8s\nWORKDIR /tmp\nENV HOME=/tmp\nENTRYPOINT ["/k8s"]\n' > "$d/Dockerfile"
  docker build -q -t "$TOOLS" "$d" >/dev/null
  rm -rf "$d"
fi

k8s_kubectl delete namespace "$ns" --ignore-not-found --wait=true >/dev/null
k8s_kubectl create namespace "$ns" >/dev/null
trap 'k8s_kubectl delete namespace "$ns" --ignore-not-found --wait=false >/dev/null 2>&1 || true' EXIT
for _ in $(seq 1 60); do kc get serviceaccount default >/dev/null 2>&1 && break; sleep 0.5; done

# 1. The pause image's start time, then a TCP server in a pod.
t=$(ms)
# Guaranteed QoS (requests = limits): the kubelet asks for oom_score_adj -997,
# which cri-dockerd's patch must raise to 0 on this machine.
cat <<EOF | kc apply -f - >/dev/null
apiVersion: v1
kind: Pod
metadata:
  name: pause
spec:
  restartPolicy: Never
  containers:
  - name: pause
    image: $K8S_PAUSE_IMAGE
    imagePullPolicy: Never
    resources:
      limits: {cpu: 100m, memory: 32Mi}
EOF
kc wait --for=condition=Ready pod/pause --timeout=60s >/dev/null || fail "the pause pod did not run"
k8s_log "1. pause pod ($(kc get pod pause -o jsonpath='{.status.qosClass}') QoS) Running after $(($(ms) - t)) ms, IP $(kc get pod pause -o jsonpath='{.status.podIP}')"

kc create serviceaccount prober >/dev/null
kc create rolebinding prober-view --clusterrole=view --serviceaccount="$ns:prober" >/dev/null
cat <<EOF | kc apply -f - >/dev/null
apiVersion: apps/v1
kind: Deployment
metadata:
  name: prober
spec:
  replicas: 1
  selector:
    matchLabels: {app: prober}
  template:
    metadata:
      labels: {app: prober}
    spec:
      serviceAccountName: prober
      containers:
      - name: proxy
        image: $TOOLS
        imagePullPolicy: Never
        # kubectl proxy: a TCP server on 8001 forwarding to the apiserver with
        # the pod's ServiceAccount credentials (in-cluster config).
        args: [kubectl, proxy, --address=0.0.0.0, --port=8001, --accept-hosts=.*]
        ports:
        - containerPort: 8001
EOF
t=$(ms)
kc rollout status deployment/prober --timeout=90s >/dev/null || { kc describe pods -l app=prober >&2; fail "the Deployment's pod did not run"; }
pod=$(kc get pods -l app=prober -o jsonpath='{.items[0].metadata.name}')
ip=$(kc get pod "$pod" -o jsonpath='{.status.podIP}')
k8s_log "2. Deployment's pod $pod Running after $(($(ms) - t)) ms, IP $ip"
[ -n "$ip" ] || fail "no pod IP"
ok=
for _ in $(seq 1 20); do
  if out=$(curl -fsS --max-time 3 "http://$ip:8001/api/v1/namespaces/$ns/pods" 2>/dev/null); then ok=1; break; fi
  sleep 0.5
done
[ -n "$ok" ] || fail "the host could not reach $ip:8001"
echo "$out" | grep -q "\"name\": *\"$pod\"" || echo "$out" | grep -q "\"name\":\"$pod\"" ||
  fail "the pod's proxy answered, but not with the pod list"
k8s_log "1. the host reached $ip:8001 (kubectl proxy in the pod), which listed the namespace's pods as ServiceAccount prober"

kc exec "$pod" -- /k8s kubectl auth whoami -o jsonpath='{.status.userInfo.username}' > /tmp/k8s-smoke-whoami 2>&1 ||
  { cat /tmp/k8s-smoke-whoami >&2; fail "kubectl exec ... auth whoami"; }
who=$(cat /tmp/k8s-smoke-whoami); rm -f /tmp/k8s-smoke-whoami
[ "$who" = "system:serviceaccount:$ns:prober" ] || fail "whoami from the pod: $who"
kc exec "$pod" -- /k8s kubectl version -o yaml 2>/dev/null | grep -q 'gitVersion: v1.37' || fail "kubectl version from the pod"
env=$(kc exec "$pod" -- /k8s kubectl get --raw /version --v=6 2>&1 | grep -o 'https://[0-9.]*:[0-9]*' | head -1 || true)
k8s_log "2. inside the pod: token at /var/run/secrets/kubernetes.io/serviceaccount, apiserver at $env, whoami = $who"

# A Service's ClusterIP from the host (kube-proxy), the pod's log (apiserver
# to kubelet) and kubectl port-forward (cri-dockerd's streaming server).
kc expose deployment prober --port=80 --target-port=8001 >/dev/null
cip=$(kc get service prober -o jsonpath='{.spec.clusterIP}')
ok=
for _ in $(seq 1 20); do
  curl -fsS --max-time 3 "http://$cip/version" >/dev/null 2>&1 && { ok=1; break; }
  sleep 0.5
done
[ -n "$ok" ] || fail "the host could not reach Service prober at $cip:80"
kc logs "$pod" | grep -q 'Starting to serve' || fail "kubectl logs"
port=$((20000 + RANDOM % 20000))
k8s_kubectl -n "$ns" port-forward "pod/$pod" "$port:8001" >/dev/null 2>&1 &
pf=$!
ok=
for _ in $(seq 1 20); do
  curl -fsS --max-time 3 "http://127.0.0.1:$port/version" >/dev/null 2>&1 && { ok=1; break; }
  sleep 0.5
done
kill "$pf" 2>/dev/null || true
wait "$pf" 2>/dev/null || true
[ -n "$ok" ] || fail "kubectl port-forward"
k8s_log "2. Service prober reached at $cip:80 from the host; kubectl logs and port-forward work"

# 3. ResourceQuota: the pause pod and the prober make two.
kc create quota pods --hard=pods=2 >/dev/null
for _ in $(seq 1 40); do
  [ "$(kc get quota pods -o jsonpath='{.status.used.pods}' 2>/dev/null)" = 2 ] && break
  sleep 0.5
done
if out=$(kc run third --image="$K8S_PAUSE_IMAGE" --image-pull-policy=Never --restart=Never 2>&1); then
  fail "a third pod was admitted under pods: 2"
fi
echo "$out" | grep -q 'exceeded quota' || fail "third pod refused, but not by the quota: $out"
k8s_log "3. third pod refused: $out"

# 4. The apiserver restarted: the node must be Ready again. (A SIGTERMed
# apiserver waits up to --request-timeout, 60 s, for connections that hold
# watches; the restart is timed from its exit.)
pid=$(k8s_pid kube-apiserver) || fail "no apiserver"
t=$(ms)
kill -TERM "$pid"
while kill -0 "$pid" 2>/dev/null; do sleep 0.2; done
k8s_log "4. apiserver stopped after $(($(ms) - t)) ms; restarting it with k8s-up.sh"
t=$(ms)
scripts/k8s-up.sh >/dev/null
k8s_kubectl get node "$K8S_NODE" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' | grep -qx True || fail "node not Ready"
for c in "${K8S_COMPONENTS[@]}"; do k8s_pid "$c" >/dev/null || fail "$c is not running after the apiserver's restart"; done
k8s_log "4. apiserver back, node Ready and a test pod run after $(($(ms) - t)) ms"
kc get pods -o wide
k8s_log "smoke test passed"
