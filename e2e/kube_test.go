package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	yamlutil "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
)

// The Kubernetes tests run the hub with -kubernetes against a real
// single-node cluster that scripts/k8s-up.sh builds and starts on this
// machine (make k8s-e2e does both); WEBSUMMONER_KUBECONFIG names its
// kubeconfig. Browsers are pods of the websummoner/chromium image, which the
// node's Docker engine has (make images).

// kubeconfigEnv names the test cluster's kubeconfig.
const kubeconfigEnv = "WEBSUMMONER_KUBECONFIG"

type kubeEnv struct {
	config    string
	client    kubernetes.Interface
	namespace string
}

// requireKube skips without a test cluster (make k8s-e2e starts one) and
// makes a namespace of the test's, deleted at its end with whatever is in it.
func requireKube(t *testing.T) *kubeEnv {
	t.Helper()
	path := os.Getenv(kubeconfigEnv)
	if path == "" {
		msg := fmt.Sprintf("no test cluster: %s is unset (make test and make k8s-e2e start one with scripts/k8s-up.sh and set it)", kubeconfigEnv)
		if os.Getenv("CI") != "" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	requireDocker(t)
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		t.Fatal(err)
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ns := fmt.Sprintf("ws-e2e-%s-%d", strings.ToLower(runID), hubs.Add(1))
	ctx := context.Background()
	if _, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		zero := int64(0)
		_ = client.CoreV1().Pods(ns).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: &zero}, metav1.ListOptions{})
		_ = client.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{})
	})
	return &kubeEnv{config: path, client: client, namespace: ns}
}

// startKubeHub runs the hub binary on this machine with -kubernetes, its
// browsers pods in the test's namespace: "chrome" (real Chromium on the
// image's virtual screen), "ghost" (an image no node has) and "huge" (a
// stub asking for more CPUs than any node has). Videos go to a directory of
// the test's.
func (k *kubeEnv) startKubeHub(t *testing.T, instance string, args ...string) *hub {
	t.Helper()
	doc := fmt.Sprintf(`{
  "chrome": {"default": "156.0", "versions": {
    "156.0": {"image": %q, "port": "4444", "path": "/", "shmSize": 268435456,
      "caps": {"goog:chromeOptions": {"args": ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]}}}}},
  "ghost": {"default": "1", "versions": {"1": {"image": "websummoner/ghost:none", "port": "4444"}}},
  "huge": {"default": "1", "versions": {"1": {"image": %q, "port": "4444", "cpu": "1000"}}}
}`, chromeTag, stubTag)
	return k.startKubeHubWith(t, instance, doc, args...)
}

// startKubeHubWith is startKubeHub with a browsers.json of the caller's.
func (k *kubeEnv) startKubeHubWith(t *testing.T, instance, doc string, args ...string) *hub {
	t.Helper()
	conf := filepath.Join(t.TempDir(), "browsers.json")
	if err := os.WriteFile(conf, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	all := append([]string{"-conf", conf, "-listen", addr, "-instance", instance, "-kubernetes",
		"-kubeconfig", k.config, "-namespace", k.namespace, "-sweep-interval", "2s",
		"-video-output-dir", t.TempDir(), "-video-recorder-image", recorderTag}, args...)
	return runHub(t, hubBinary, all, addr)
}

// pods lists the instance's pods that are not being deleted.
func (k *kubeEnv) pods(t *testing.T, instance string) []corev1.Pod {
	t.Helper()
	list, err := k.client.CoreV1().Pods(k.namespace).List(context.Background(), metav1.ListOptions{LabelSelector: "websummoner.instance=" + instance})
	if err != nil {
		t.Fatal(err)
	}
	var out []corev1.Pod
	for _, p := range list.Items {
		if p.DeletionTimestamp == nil {
			out = append(out, p)
		}
	}
	return out
}

// podsGone waits (at most a minute) until no pod of the instance exists.
func (k *kubeEnv) podsGone(t *testing.T, instance string) bool {
	t.Helper()
	return waitFor(time.Minute, func() bool {
		list, err := k.client.CoreV1().Pods(k.namespace).List(context.Background(), metav1.ListOptions{LabelSelector: "websummoner.instance=" + instance})
		return err == nil && len(list.Items) == 0
	})
}

// A session in a pod with Python Selenium: the page, an element and a script;
// the pod carries the instance's labels and no service account token, and
// it is gone when the session is.
func TestKubeSession(t *testing.T) {
	k := requireKube(t)
	instance := instanceFor(t)
	h := k.startKubeHub(t, instance, "-limit", "2")
	c := startWaitingClient(t, "testdata/kube.py", h.url+"/wd/hub", "wait")
	line := c.out.Text()
	f := strings.Fields(line)
	if len(f) != 4 || f[1] != "pod" || f[2] != "from_a_pod" || f[3] != "True" {
		t.Fatalf("client read %q; want the session id, the title, the element's text and a Chrome user agent", line)
	}
	pods := k.pods(t, instance)
	if len(pods) != 1 {
		t.Fatalf("%d pods for one session", len(pods))
	}
	p := pods[0]
	if p.Spec.AutomountServiceAccountToken == nil || *p.Spec.AutomountServiceAccountToken {
		t.Error("the browser's pod can read a service account token")
	}
	st := h.getJSON(t, "/status")
	if st["used"] != 1.0 {
		t.Errorf("status used %v with one session", st["used"])
	}
	out := c.finish(t)
	if strings.Contains(out, "Error") {
		t.Errorf("client: %s", out)
	}
	if !k.podsGone(t, instance) {
		t.Errorf("pods left after the session ended: %v", k.pods(t, instance))
	}
	h.settled(t)
}

// kubectl delete pod under a live session ends the session and frees its
// slot: the next request is served.
func TestKubePodDeletedEndsSession(t *testing.T) {
	k := requireKube(t)
	instance := instanceFor(t)
	h := k.startKubeHub(t, instance, "-limit", "1")
	id := chromeSession(t, h.url, "")
	pods := k.pods(t, instance)
	if len(pods) != 1 {
		t.Fatalf("%d pods for one session", len(pods))
	}
	if err := k.client.CoreV1().Pods(k.namespace).Delete(context.Background(), pods[0].Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if !waitFor(time.Minute, func() bool { return h.getJSON(t, "/status")["used"] == 0.0 }) {
		t.Fatalf("the slot of a session whose pod was deleted is still held: %v", h.getJSON(t, "/status"))
	}
	r := call(t, "GET", h.url+"/wd/hub/session/"+id+"/url", "")
	if r.status != 404 {
		t.Errorf("a command to the ended session: %d %s, want 404 invalid session id", r.status, r.Value.Error)
	}
	next := chromeSession(t, h.url, "")
	call(t, "DELETE", h.url+"/wd/hub/session/"+next, "")
	h.settled(t)
}

// A hub killed with live sessions leaves their pods; the next hub of the
// instance deletes them as it starts.
func TestKubeRestartSweeps(t *testing.T) {
	k := requireKube(t)
	instance := instanceFor(t)
	h := k.startKubeHub(t, instance, "-limit", "2")
	chromeSession(t, h.url, "")
	chromeSession(t, h.url, "")
	if n := len(k.pods(t, instance)); n != 2 {
		t.Fatalf("%d pods for two sessions", n)
	}
	syscall.Kill(h.cmd.Process.Pid, syscall.SIGKILL)
	<-h.ended
	if n := len(k.pods(t, instance)); n != 2 {
		t.Fatalf("%d pods after SIGKILL; the test needs the two left", n)
	}
	h2 := k.startKubeHub(t, instance, "-limit", "2")
	// Before it serves: the sweep is logged before [INIT].
	if !strings.Contains(h2.logs.String(), "[PODS_DELETED] [2]") {
		t.Errorf("the restarted hub logged no [PODS_DELETED] [2]:\n%s", h2.logs)
	}
	if !k.podsGone(t, instance) {
		t.Errorf("pods of the killed hub left: %v", k.pods(t, instance))
	}
}

// A ResourceQuota of 2 pods: the third request is answered 500 with
// Retry-After, naming the quota, and nothing is left of it; once a session
// ends the next request is served.
func TestKubeQuotaAnswersHonestly(t *testing.T) {
	k := requireKube(t)
	q := &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: "two-pods"},
		Spec: corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{corev1.ResourcePods: resource.MustParse("2")}}}
	if _, err := k.client.CoreV1().ResourceQuotas(k.namespace).Create(context.Background(), q, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The quota's usage is counted by the controller manager: wait until it is.
	if !waitFor(time.Minute, func() bool {
		got, err := k.client.CoreV1().ResourceQuotas(k.namespace).Get(context.Background(), "two-pods", metav1.GetOptions{})
		return err == nil && got.Status.Hard != nil
	}) {
		t.Fatal("the quota was never counted")
	}
	instance := instanceFor(t)
	h := k.startKubeHub(t, instance, "-limit", "3")
	a := chromeSession(t, h.url, "")
	chromeSession(t, h.url, "")
	r := call(t, "POST", h.url+"/wd/hub/session", `{"capabilities":{"alwaysMatch":{"browserName":"chrome"}}}`)
	if r.status != 500 || r.header.Get("Retry-After") == "" || !strings.Contains(r.Value.Message, "ResourceQuota") {
		t.Fatalf("third session under a quota of two: %d %q (Retry-After %q); want 500 naming the quota", r.status, r.Value.Message, r.header.Get("Retry-After"))
	}
	if n := len(k.pods(t, instance)); n != 2 {
		t.Errorf("%d pods with the quota at two", n)
	}
	call(t, "DELETE", h.url+"/wd/hub/session/"+a, "")
	// The quota counts a pod until the controller manager sees it gone: a
	// request before then is refused as the third was, honestly.
	if !waitFor(time.Minute, func() bool {
		got, err := k.client.CoreV1().ResourceQuotas(k.namespace).Get(context.Background(), "two-pods", metav1.GetOptions{})
		used := got.Status.Used[corev1.ResourcePods]
		return err == nil && used.Value() == 1
	}) {
		t.Fatal("the ended session's pod is still counted by the quota")
	}
	c := chromeSession(t, h.url, "")
	call(t, "DELETE", h.url+"/wd/hub/session/"+c, "")
}

// An image no node has: the request is answered at once with an error that
// names the image and the node, and no pod is left.
func TestKubeMissingImage(t *testing.T) {
	k := requireKube(t)
	instance := instanceFor(t)
	// A start-up timeout far beyond the bound below: an answer within it is
	// the fault's, not the timeout's, however slow the machine.
	h := k.startKubeHub(t, instance, "-limit", "1", "-service-startup-timeout", "10m")
	start := time.Now()
	r := call(t, "POST", h.url+"/wd/hub/session", `{"capabilities":{"alwaysMatch":{"browserName":"ghost"}}}`)
	if r.status != 500 || !strings.Contains(r.Value.Message, "websummoner/ghost:none") || !strings.Contains(r.Value.Message, "not on node") {
		t.Fatalf("missing image: %d %q", r.status, r.Value.Message)
	}
	if took := time.Since(start); took > 2*time.Minute {
		t.Errorf("answered after %v: it waited out the start-up timeout", took)
	}
	if !k.podsGone(t, instance) {
		t.Errorf("pods left: %v", k.pods(t, instance))
	}
}

// VNC and video of a session in a pod: RFB through the hub shows the page's
// colour; the recorder runs in the session's pod and its file, read out when
// the session ends, shows the page's colours in order.
func TestKubeVNCAndVideo(t *testing.T) {
	k := requireKube(t)
	instance := instanceFor(t)
	h := k.startKubeHub(t, instance, "-limit", "2")
	id := chromeSession(t, h.url, `"enableVNC":true,"enableVideo":true,"videoFrameRate":10,"screenResolution":"1280x720x24"`)
	pods := k.pods(t, instance)
	if len(pods) != 1 || len(pods[0].Spec.Containers) != 2 {
		t.Fatalf("pods %d: want one pod with the browser's and the recorder's containers", len(pods))
	}
	wsURL := "ws" + strings.TrimPrefix(h.url, "http") + "/vnc/" + id
	if _, err := dialRFB(wsURL, "wrong"); err == nil {
		t.Fatal("a wrong VNC password was accepted")
	}
	vnc, err := dialRFB(wsURL, "selenoid")
	if err != nil {
		t.Fatal("RFB through the hub into the pod:", err)
	}
	defer vnc.Close()
	if vnc.width != 1280 || vnc.height != 720 {
		t.Fatalf("the VNC framebuffer is %dx%d, want the session's 1280x720", vnc.width, vnc.height)
	}
	colours := [][3]int{{255, 0, 0}, {0, 255, 0}, {0, 0, 255}}
	for n, c := range colours {
		paint(t, h.url, id, c)
		if n == 0 {
			var got [3]int
			ok := waitFor(time.Minute, func() bool {
				px, err := vnc.frame()
				if err != nil {
					t.Fatal("framebuffer update:", err)
				}
				p := px[600*vnc.width+200]
				got = [3]int{int(p >> 16 & 255), int(p >> 8 & 255), int(p & 255)}
				return near(got, c)
			})
			if !ok {
				t.Fatalf("the screen is rgb%v over VNC, the page rgb%v", got, c)
			}
		}
		time.Sleep(2 * time.Second) // the scenario: each colour on screen for 2 s
	}
	call(t, "DELETE", h.url+"/wd/hub/session/"+id, "")
	h.await(t, "[VIDEO_SAVED]")
	name := id + ".mp4"
	file := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(file, rawCall(t, "GET", h.url+"/video/"+name, ""), 0o644); err != nil {
		t.Fatal(err)
	}
	p, dur := ffprobe(t, file)
	if dur <= 0 || p.Streams[0].Width != 1280 || p.Streams[0].Height != 720 || p.Streams[0].RFrameRate != "10/1" {
		t.Errorf("video %.2fs %+v, want 1280x720 at 10/1", dur, p.Streams[0])
	}
	if seen := coloursShown(t, file, 640, 360); !showsInOrder(seen, colours) {
		t.Errorf("the video shows %v at its centre, want %v in that order", seen, colours)
	}
	if !k.podsGone(t, instance) {
		t.Errorf("pods left: %v", k.pods(t, instance))
	}
}

// A pod no node can run: answered 500 with Retry-After at once, with the
// scheduler's reason, and nothing left.
func TestKubeUnschedulable(t *testing.T) {
	k := requireKube(t)
	instance := instanceFor(t)
	h := k.startKubeHub(t, instance, "-limit", "1", "-service-startup-timeout", "10m") // as in TestKubeMissingImage
	start := time.Now()
	r := call(t, "POST", h.url+"/wd/hub/session", `{"capabilities":{"alwaysMatch":{"browserName":"huge"}}}`)
	if r.status != 500 || r.header.Get("Retry-After") == "" || !strings.Contains(r.Value.Message, "Insufficient cpu") {
		t.Fatalf("a pod asking for 1000 CPUs: %d %q (Retry-After %q); want 500 with the scheduler's reason", r.status, r.Value.Message, r.header.Get("Retry-After"))
	}
	if took := time.Since(start); took > 2*time.Minute {
		t.Errorf("answered after %v: it waited out the start-up timeout", took)
	}
	if !k.podsGone(t, instance) {
		t.Errorf("pods left: %v", k.pods(t, instance))
	}
}

// k8sDir is the test cluster's state directory (scripts/k8s-lib.sh).
func k8sDir() string {
	if d := os.Getenv("WEBSUMMONER_K8S_DIR"); d != "" {
		return d
	}
	return "/tmp/websummoner-k8s"
}

// The API server killed and started again: while it is down the hub says
// so (/readyz 503, and 500 with Retry-After for a new session) and a live session
// goes on (its commands go to the pod, not through the API server); once it
// is back the hub serves new sessions, and the live one ends cleanly.
func TestKubeAPIServerRestart(t *testing.T) {
	k := requireKube(t)
	instance := instanceFor(t)
	h := k.startKubeHub(t, instance, "-limit", "2")
	live := chromeSession(t, h.url, "")
	pidFile := filepath.Join(k8sDir(), "run", "kube-apiserver.pid")
	data, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatalf("the test cluster's API server pid (scripts/k8s-up.sh writes it): %v", err)
	}
	var pid int
	fmt.Sscan(string(data), &pid)
	// The pid file is k8s-up.sh's marker; a recycled pid is not the API server.
	if cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid)); !strings.Contains(string(cmdline), "kube-apiserver") {
		t.Fatalf("pid %d of %s is not the test cluster's API server: %q", pid, pidFile, cmdline)
	}
	// Whatever happens, the cluster is up again for the tests after this one.
	t.Cleanup(func() {
		if out, err := exec.Command("../scripts/k8s-up.sh").CombinedOutput(); err != nil {
			t.Errorf("restarting the API server: %v\n%s", err, out)
		}
	})
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if !waitFor(time.Minute, func() bool {
		r := call(t, "GET", h.url+"/readyz", "")
		return r.status == 503 && strings.Contains(r.Value.Message, "Kubernetes API server unreachable")
	}) {
		t.Fatalf("/readyz with the API server killed: %s", rawCall(t, "GET", h.url+"/readyz", ""))
	}
	r := call(t, "POST", h.url+"/wd/hub/session", `{"capabilities":{"alwaysMatch":{"browserName":"chrome"}}}`)
	if r.status != 500 || r.header.Get("Retry-After") == "" || !strings.Contains(r.Value.Message, "API server is unreachable") {
		t.Fatalf("a new session with the API server down: %d %q (Retry-After %q)", r.status, r.Value.Message, r.header.Get("Retry-After"))
	}
	if got := execute(t, h.url, live, "return 6*7"); got != 42.0 {
		t.Fatalf("the live session's command with the API server down: %v", got)
	}
	if out, err := exec.Command("../scripts/k8s-up.sh").CombinedOutput(); err != nil {
		t.Fatalf("restarting the API server: %v\n%s", err, out)
	}
	h.await(t, "[KUBERNETES_UP]")
	next := chromeSession(t, h.url, "")
	for _, id := range []string{live, next} {
		if r := call(t, "DELETE", h.url+"/wd/hub/session/"+id, ""); r.status != 200 {
			t.Errorf("DELETE %s: %d %s", id, r.status, r.Value.Message)
		}
	}
	if !k.podsGone(t, instance) {
		t.Errorf("pods left: %v", k.pods(t, instance))
	}
	h.settled(t)
}

// The hub in the cluster, deployed as deploy/kubernetes/websummoner.yaml
// deploys it (in the test's namespace, with this build's images): its
// Deployment's pod becomes ready, and Python Selenium through its Service
// gets a session in a pod the hub made with its service account.
func TestKubeHubInCluster(t *testing.T) {
	k := requireKube(t)
	out, err := exec.Command("make", "-s", "-C", "..", "image", "IMAGE=websummoner/hub:e2e-"+strings.ToLower(runID)).Output()
	if err != nil {
		t.Fatalf("make image: %v", err)
	}
	hubImage := strings.TrimSpace(string(out))
	t.Cleanup(func() { exec.Command("docker", "rmi", hubImage).Run() })
	data, err := os.ReadFile("../deploy/kubernetes/websummoner.yaml")
	if err != nil {
		t.Fatal(err)
	}
	manifest := strings.NewReplacer("namespace: websummoner", "namespace: "+k.namespace,
		"websummoner/hub:latest", hubImage).Replace(string(data))
	ctx := context.Background()
	var policy *networkingv1.NetworkPolicy
	dec := yamlutil.NewYAMLOrJSONDecoder(strings.NewReader(manifest), 4096)
	for {
		var raw runtime.RawExtension
		if err := dec.Decode(&raw); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			t.Fatal(err)
		}
		if len(raw.Raw) == 0 {
			continue
		}
		obj, _, err := scheme.Codecs.UniversalDeserializer().Decode(raw.Raw, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		switch o := obj.(type) {
		case *corev1.Namespace: // the test's own stands in for it
		case *corev1.ServiceAccount:
			_, err = k.client.CoreV1().ServiceAccounts(k.namespace).Create(ctx, o, metav1.CreateOptions{})
		case *rbacv1.Role:
			_, err = k.client.RbacV1().Roles(k.namespace).Create(ctx, o, metav1.CreateOptions{})
		case *rbacv1.RoleBinding:
			_, err = k.client.RbacV1().RoleBindings(k.namespace).Create(ctx, o, metav1.CreateOptions{})
		case *corev1.ConfigMap:
			_, err = k.client.CoreV1().ConfigMaps(k.namespace).Create(ctx, o, metav1.CreateOptions{})
		case *appsv1.Deployment:
			_, err = k.client.AppsV1().Deployments(k.namespace).Create(ctx, o, metav1.CreateOptions{})
		case *corev1.Service:
			_, err = k.client.CoreV1().Services(k.namespace).Create(ctx, o, metav1.CreateOptions{})
		case *networkingv1.NetworkPolicy:
			// The test cluster has no network plugin that enforces it (docs/
			// kubernetes-cluster.md); the API server still validates it, and
			// its selectors must match the pods the hub makes (checked below).
			policy = o
			_, err = k.client.NetworkingV1().NetworkPolicies(k.namespace).Create(ctx, o, metav1.CreateOptions{})
		default:
			t.Fatalf("the manifest has a %T the test does not apply", obj)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	hubLogs := func() string {
		pods, _ := k.client.CoreV1().Pods(k.namespace).List(ctx, metav1.ListOptions{LabelSelector: "app=websummoner"})
		var b strings.Builder
		for _, p := range pods.Items {
			logs, _ := k.client.CoreV1().Pods(k.namespace).GetLogs(p.Name, &corev1.PodLogOptions{}).DoRaw(ctx)
			fmt.Fprintf(&b, "%s (%s):\n%s\n", p.Name, p.Status.Phase, logs)
		}
		return b.String()
	}
	if !waitFor(2*time.Minute, func() bool {
		d, err := k.client.AppsV1().Deployments(k.namespace).Get(ctx, "websummoner", metav1.GetOptions{})
		return err == nil && d.Status.ReadyReplicas == 1
	}) {
		t.Fatalf("the hub's Deployment did not become ready:\n%s", hubLogs())
	}
	svc, err := k.client.CoreV1().Services(k.namespace).Get(ctx, "websummoner", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + svc.Spec.ClusterIP + ":4444"
	c := startWaitingClient(t, "testdata/kube.py", url+"/wd/hub", "wait")
	if f := strings.Fields(c.out.Text()); len(f) != 4 || f[2] != "from_a_pod" {
		t.Fatalf("client through the in-cluster hub read %q\n%s", c.out.Text(), hubLogs())
	}
	browsers, err := k.client.CoreV1().Pods(k.namespace).List(ctx, metav1.ListOptions{LabelSelector: "websummoner.instance=hub"})
	if err != nil || len(browsers.Items) != 1 {
		t.Fatalf("browser pods of the in-cluster hub: %v %v", browsers, err)
	}
	// The policy guards the browser's pod and lets the hub's pod in, and
	// nothing else: a selector that matched no browser would guard nothing.
	if policy == nil {
		t.Fatal("the manifest has no NetworkPolicy for the browsers")
	}
	if sel := labels.SelectorFromSet(policy.Spec.PodSelector.MatchLabels); !sel.Matches(labels.Set(browsers.Items[0].Labels)) {
		t.Errorf("the NetworkPolicy's selector %v does not select the browser pod (labels %v)", sel, browsers.Items[0].Labels)
	}
	hubs, err := k.client.CoreV1().Pods(k.namespace).List(ctx, metav1.ListOptions{LabelSelector: "app=websummoner"})
	if err != nil || len(hubs.Items) != 1 {
		t.Fatalf("the hub's pods: %v %v", hubs, err)
	}
	if in := policy.Spec.Ingress; len(in) != 1 || len(in[0].From) != 1 || in[0].From[0].PodSelector == nil ||
		!labels.SelectorFromSet(in[0].From[0].PodSelector.MatchLabels).Matches(labels.Set(hubs.Items[0].Labels)) ||
		labels.SelectorFromSet(in[0].From[0].PodSelector.MatchLabels).Matches(labels.Set(browsers.Items[0].Labels)) {
		t.Errorf("the NetworkPolicy's ingress %+v does not let the hub's pod in alone", in)
	}
	c.finish(t)
	if !waitFor(time.Minute, func() bool {
		l, err := k.client.CoreV1().Pods(k.namespace).List(ctx, metav1.ListOptions{LabelSelector: "websummoner.instance=hub"})
		return err == nil && len(l.Items) == 0
	}) {
		t.Errorf("the browser pod outlived its session\n%s", hubLogs())
	}
	// Deleted with the namespace; its hub first, so it makes no more pods.
	zero := int32(0)
	d, _ := k.client.AppsV1().Deployments(k.namespace).Get(ctx, "websummoner", metav1.GetOptions{})
	d.Spec.Replicas = &zero
	k.client.AppsV1().Deployments(k.namespace).Update(ctx, d, metav1.UpdateOptions{})
}

// The warm pool on Kubernetes: a ready browser is a pod with its session
// made; Python Selenium's stock ChromeOptions() is a hit, served by that
// pod, and the pool makes another.
func TestKubeWarmPool(t *testing.T) {
	k := requireKube(t)
	instance := instanceFor(t)
	doc := fmt.Sprintf(`{"chrome": {"default": "156.0", "versions": {"156.0": {"image": %q, "port": "4444", "path": "/", "shmSize": 268435456,
  "caps": {"goog:chromeOptions": {"args": ["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
    "--disable-background-networking", "--disable-component-update", "--disable-sync"]}}}}}}`, chromeTag)
	h := k.startKubeHubWith(t, instance, doc, "-limit", "2", "-warm-pool", "1")
	poolReady := func() bool {
		rows, _ := h.getJSON(t, "/status")["pool"].([]any)
		return len(rows) == 1 && rows[0].(map[string]any)["ready"] == 1.0
	}
	if !waitFor(2*time.Minute, poolReady) {
		t.Fatalf("the pool is not ready: %v", h.getJSON(t, "/status")["pool"])
	}
	ready := k.pods(t, instance)
	if len(ready) != 1 {
		t.Fatalf("%d pods for one ready browser", len(ready))
	}
	c := startWaitingClient(t, "testdata/kube.py", h.url+"/wd/hub", "wait")
	if f := strings.Fields(c.out.Text()); len(f) != 4 || f[2] != "from_a_pod" {
		t.Fatalf("client read %q", c.out.Text())
	}
	if got := h.metric(t, `websummoner_pool_claims_total{result="hit"}`); got != 1 {
		t.Fatalf("hits = %v, want 1", got)
	}
	if !strings.Contains(h.logs.String(), "[warm pool hit]") {
		t.Error("no session was logged as a warm pool hit")
	}
	c.finish(t)
	// The session's pod goes; the pool makes a new one, never the used one.
	if !waitFor(2*time.Minute, poolReady) {
		t.Fatalf("the pool did not refill: %v", h.getJSON(t, "/status")["pool"])
	}
	now := k.pods(t, instance)
	if len(now) != 1 || now[0].Name == ready[0].Name {
		t.Errorf("pods after the session: %d, the used one among them: %v", len(now), len(now) == 1 && now[0].Name == ready[0].Name)
	}
}
