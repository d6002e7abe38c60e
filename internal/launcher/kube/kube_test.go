package kube

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/streaming/pkg/httpstream"

	"github.com/websummoner/websummoner/internal/config"
	"github.com/websummoner/websummoner/internal/launcher"
	"github.com/websummoner/websummoner/internal/logtest"
	"github.com/websummoner/websummoner/internal/webdriver"
)

// These tests run the launcher over client-go's fake clientset: the API
// server's faults (a quota refusing, throttling) and a node's answers (a pod
// unschedulable, an image missing) are made on demand here; the real
// cluster's are in e2e's Kubernetes tests (make k8s-e2e).

func entry(image, port string) config.Resolved {
	return config.Resolved{Name: "chrome", Version: "1", Browser: &config.Browser{Image: config.Image{Name: image}, Port: port, Path: "/"}}
}

func newLauncher(t *testing.T, client *fake.Clientset) *Launcher {
	t.Helper()
	l, err := New(Options{Namespace: "browsers", HubAddresses: []string{"10.0.0.1"},
		Options: launcher.Options{Instance: "test", StartupTimeout: 20 * time.Second, StopTimeout: 10 * time.Second}}, client, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	l.Prepare(ctx)
	if up, why := l.Ready(); !up {
		t.Fatalf("not ready: %s", why)
	}
	return l
}

// node plays the kubelet: each pod created is given the status set returns.
func node(t *testing.T, client *fake.Clientset, set func(*corev1.Pod)) {
	t.Helper()
	w, err := client.CoreV1().Pods("browsers").Watch(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	go func() {
		for ev := range w.ResultChan() {
			pod, ok := ev.Object.(*corev1.Pod)
			if ev.Type != watch.Added || !ok {
				continue
			}
			pod = pod.DeepCopy()
			set(pod)
			_, _ = client.CoreV1().Pods("browsers").UpdateStatus(context.Background(), pod, metav1.UpdateOptions{})
		}
	}()
}

// servingNode is a fake cluster whose every pod runs at the address of a
// driver that answers (a local HTTP server), at host and port.
func servingNode(t *testing.T) (client *fake.Clientset, host, port string) {
	t.Helper()
	driver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(200) }))
	t.Cleanup(driver.Close)
	host, port, _ = net.SplitHostPort(driver.Listener.Addr().String())
	client = fake.NewClientset()
	node(t, client, running(host))
	return client, host, port
}

func running(ip string) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		p.Spec.NodeName = "node-1"
		p.Status.Phase = corev1.PodRunning
		p.Status.PodIP = ip
	}
}

func TestPodSpec(t *testing.T) {
	l := &Launcher{opts: Options{Namespace: "browsers", Mem: "1g", Options: launcher.Options{Instance: "hub_A"}}}
	b := entry("websummoner/chromium:latest", "")
	b.ShmSize = 256 << 20
	b.CPU = "0.5"
	b.Hosts = []string{"db:10.1.1.1"}
	b.Tmpfs = map[string]string{"/tmp": "size=64m,mode=1777"}
	b.Labels = map[string]string{"team": "web", "websummoner.instance": "forged"}
	r := launcher.Request{ID: "7", Browser: b, Options: webdriver.Options{Name: "my test: login", TimeZone: "Europe/Berlin",
		HostsEntries: []string{"api:10.1.1.2", "db2:10.1.1.1"}, Labels: map[string]string{"team": "client", "build": "not a label value!",
			"app": "websummoner", "container.apparmor.security.beta.kubernetes.io/browser": "localhost/x"}}}
	pod, err := l.podSpec(r, podName("hub_A", "7-abc"), "7-abc", "10.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	if pod.Name != "websummoner-hub-a-7-abc" {
		t.Errorf("name %q", pod.Name)
	}
	// The runtime's default seccomp profile, as a Docker container gets.
	if sc := pod.Spec.SecurityContext; sc == nil || sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("pod security context %+v: want seccompProfile RuntimeDefault", sc)
	}
	if len(pod.Labels) != 3 || pod.Labels[LabelInstance] != "hub_A" || pod.Labels[LabelSession] != "7-abc" || pod.Labels["team"] != "web" {
		t.Errorf("labels %v: want the instance, the session and the operator's alone", pod.Labels)
	}
	// The client's labels are one annotation of the hub's: none is a label a
	// Service or ReplicaSet selects by, or an annotation the kubelet reads.
	var client map[string]string
	if err := json.Unmarshal([]byte(pod.Annotations[AnnotationLabels]), &client); err != nil || !maps.Equal(client, r.Options.Labels) {
		t.Errorf("the client's labels annotation %q: %v", pod.Annotations[AnnotationLabels], err)
	}
	if len(pod.Annotations) != 3 || pod.Annotations[AnnotationName] != "my test: login" || pod.Annotations[AnnotationBrowser] != "chrome 1" {
		t.Errorf("annotations %v", pod.Annotations)
	}
	if sc := pod.Spec.Containers[0].SecurityContext; sc == nil || sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"NET_RAW"}) {
		t.Errorf("the browser container keeps NET_RAW: %+v", sc)
	}
	s := pod.Spec
	if s.AutomountServiceAccountToken == nil || *s.AutomountServiceAccountToken || s.EnableServiceLinks == nil || *s.EnableServiceLinks {
		t.Error("a browser pod must get no service account token and no service environment")
	}
	if s.RestartPolicy != corev1.RestartPolicyNever {
		t.Errorf("restart policy %s: a browser serves one session", s.RestartPolicy)
	}
	c := s.Containers[0]
	if c.ImagePullPolicy != corev1.PullNever || c.Image != "websummoner/chromium:latest" {
		t.Errorf("image %s, pull %s", c.Image, c.ImagePullPolicy)
	}
	mem := c.Resources.Limits[corev1.ResourceMemory]
	cpu := c.Resources.Requests[corev1.ResourceCPU]
	if mem.Cmp(resource.MustParse("1Gi")) != 0 || cpu.Cmp(resource.MustParse("500m")) != 0 || !equalLists(c.Resources.Requests, c.Resources.Limits) {
		t.Errorf("resources %v: want requests = limits, 1Gi and 500m", c.Resources)
	}
	env := map[string]string{}
	for _, e := range c.Env {
		env[e.Name] = e.Value
	}
	if env["TZ"] != "Europe/Berlin" || env["WEBSUMMONER_HUB_ADDRESSES"] != "10.0.0.1" {
		t.Errorf("env %v", env)
	}
	mounts := map[string]bool{}
	for _, m := range c.VolumeMounts {
		mounts[m.MountPath] = true
	}
	if !mounts["/dev/shm"] || !mounts["/tmp"] {
		t.Errorf("mounts %v: want /dev/shm and /tmp in memory", c.VolumeMounts)
	}
	for _, v := range s.Volumes {
		if v.Name == shmVolume && (v.EmptyDir == nil || v.EmptyDir.Medium != corev1.StorageMediumMemory || v.EmptyDir.SizeLimit.Value() != 256<<20) {
			t.Errorf("shm volume %+v", v)
		}
	}
	// The client's hostsEntries first, as in a Docker container (Selenoid's
	// order): the first line for a name is the one the resolver takes.
	if len(s.HostAliases) != 2 || s.HostAliases[0].IP != "10.1.1.2" || s.HostAliases[1].IP != "10.1.1.1" || strings.Join(s.HostAliases[1].Hostnames, ",") != "db2,db" {
		t.Errorf("host aliases %v", s.HostAliases)
	}
}

func equalLists(a, b corev1.ResourceList) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || v.Cmp(w) != 0 {
			return false
		}
	}
	return true
}

func TestPodSpecRefuses(t *testing.T) {
	l := &Launcher{opts: Options{Namespace: "browsers", Options: launcher.Options{Instance: "a"}}}
	for name, o := range map[string]webdriver.Options{
		"enableVideo":           {EnableVideo: true}, // no -video-output-dir here
		"additionalNetworks":    {AdditionalNetworks: []string{"net"}},
		"applicationContainers": {ApplicationContainers: []string{"db"}},
		"containerHostname":     {ContainerHostname: "Not_A_Label"},
		"hostsEntries":          {HostsEntries: []string{"db:not-an-ip"}},
	} {
		if _, err := l.podSpec(launcher.Request{ID: "1", Browser: entry("img", ""), Options: o}, "p", "s", ""); err == nil {
			t.Errorf("%s: a pod was made", name)
		}
	}
	b := entry("img", "")
	b.Volumes = []string{"named:/data"}
	if _, err := l.podSpec(launcher.Request{ID: "1", Browser: b}, "p", "s", ""); err == nil {
		t.Error("a named Docker volume was taken")
	}
	// What Kubernetes would refuse of a client's values is the client's
	// mistake (400), said before the API server is asked.
	for name, o := range map[string]webdriver.Options{
		"containerHostname": {ContainerHostname: "ABC"},
		"hostsEntries":      {HostsEntries: []string{"a_b:1.2.3.4"}},
		"host-gateway":      {HostsEntries: []string{"app:host-gateway"}},
		"dnsServers":        {DNSServers: []string{"1.1.1.1", "1.0.0.1", "8.8.8.8", "8.8.4.4"}},
		"labels":            {Labels: map[string]string{"big": strings.Repeat("x", maxClientLabels)}},
		"env non-ASCII":     {Env: []string{"ÄPFEL=1"}},
		"env control":       {Env: []string{"FOO\x01=bar"}},
		"dnsServers mapped": {DNSServers: []string{"::ffff:1.2.3.4"}},
		"hosts mapped":      {HostsEntries: []string{"foo:::ffff:1.2.3.4"}},
		"additionalNets":    {AdditionalNetworks: []string{"net"}},
	} {
		_, err := l.podSpec(launcher.Request{ID: "1", Browser: entry("img", ""), Options: o}, "p", "s", "")
		if ae := (*webdriver.ArgumentError)(nil); !errors.As(err, &ae) {
			t.Errorf("%s: %v, want the client's mistake", name, err)
		}
	}
}

// What the API server would refuse of a client's values is refused before
// the request queues (the hub calls CheckOptions first); the rest passes.
func TestCheckOptions(t *testing.T) {
	l := &Launcher{opts: Options{Namespace: "browsers", Options: launcher.Options{Instance: "a"}}}
	if err := l.CheckOptions(entry("img", ""), webdriver.Options{ContainerHostname: "MyHost"}); err == nil {
		t.Error("containerHostname MyHost passed")
	}
	// IPv6 not in its shortest form is an address the API server takes.
	if err := l.CheckOptions(entry("img", ""), webdriver.Options{ContainerHostname: "my-host", Env: []string{"A=$(B)"},
		DNSServers: []string{"2001:4860:4860:0:0:0:0:8888"}, HostsEntries: []string{"db:2001:db8:0:0:0:0:0:1"}}); err != nil {
		t.Errorf("good options refused: %v", err)
	}
	if err := l.CheckOptions(entry("img", "not-a-port"), webdriver.Options{}); err != nil {
		t.Errorf("the entry's fault is Start's to say, not a client's mistake: %v", err)
	}
}

// A client's env value reaches its browser as it was sent, as with Docker:
// Kubernetes would expand $(NAME) to another variable's value and $$ to $.
func TestPodEnvIsLiteral(t *testing.T) {
	l := &Launcher{opts: Options{Namespace: "browsers", Options: launcher.Options{Instance: "a"}}}
	pod, err := l.podSpec(launcher.Request{ID: "1", Browser: entry("img", ""), Options: webdriver.Options{Env: []string{"A=x$$y", "B=$(TZ)"}}}, "p", "s", "")
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, e := range pod.Spec.Containers[0].Env {
		got[e.Name] = e.Value
	}
	if got["A"] != "x$$$$y" || got["B"] != "$$(TZ)" {
		t.Fatalf("env A=%q B=%q, want each $ escaped as $$ (Kubernetes' literal $)", got["A"], got["B"])
	}
}

func TestStartServesAndStops(t *testing.T) {
	client, host, port := servingNode(t)
	l := newLauncher(t, client)
	inst, err := l.Start(context.Background(), launcher.Request{ID: "1", Browser: entry("img", port)})
	if err != nil {
		t.Fatal(err)
	}
	e := inst.Endpoints()
	if e.Driver.Host != net.JoinHostPort(host, port) || e.VNC == nil || e.VNC.Port() != "5900" || e.DevTools.Port() != "7070" {
		t.Errorf("endpoints %+v", e)
	}
	name, ip := inst.(launcher.Container).ContainerInfo()
	if ip != host || !strings.HasPrefix(name, "websummoner-test-1-") {
		t.Errorf("container info %s %s", name, ip)
	}
	if err := inst.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	pods, _ := client.CoreV1().Pods("browsers").List(context.Background(), metav1.ListOptions{})
	if len(pods.Items) != 0 {
		t.Errorf("%d pods left after Stop", len(pods.Items))
	}
	select {
	case <-inst.Exited():
		t.Error("a pod the hub deleted was reported as ended on its own")
	default:
	}
}

func TestPodDeletedUnderASessionEndsIt(t *testing.T) {
	client, _, port := servingNode(t)
	l := newLauncher(t, client)
	inst, err := l.Start(context.Background(), launcher.Request{ID: "1", Browser: entry("img", port)})
	if err != nil {
		t.Fatal(err)
	}
	name, _ := inst.(launcher.Container).ContainerInfo()
	if err := client.CoreV1().Pods("browsers").Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-inst.Exited():
	case <-time.After(10 * time.Second):
		t.Fatal("the session's pod was deleted and the instance did not exit")
	}
	if !strings.Contains(inst.ExitReason(), "deleted") {
		t.Errorf("exit reason %q", inst.ExitReason())
	}
	if err := inst.Stop(context.Background()); err != nil {
		t.Errorf("Stop after the pod went: %v", err)
	}
}

func TestStartFaults(t *testing.T) {
	for _, tc := range []struct {
		name   string
		status func(*corev1.Pod)
		phase  string
		down   bool
		says   string
	}{
		{"unschedulable", func(p *corev1.Pod) {
			p.Status.Phase = corev1.PodPending
			p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable, Message: "0/1 nodes are available: 1 Insufficient memory."}}
		}, launcher.PhaseStart, true, "Insufficient memory"},
		{"image missing", func(p *corev1.Pod) {
			p.Spec.NodeName = "node-1"
			p.Status.Phase = corev1.PodPending
			p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: browserContainer, State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ErrImageNeverPull", Message: "Container image \"img\" is not present with pull policy of Never"}}}}
		}, launcher.PhaseImage, false, "not on node node-1"},
		{"container exits", func(p *corev1.Pod) {
			p.Status.Phase = corev1.PodFailed
			p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: browserContainer, State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 137, Reason: "OOMKilled"}}}}
		}, launcher.PhaseStartup, false, "out of memory"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			client := fake.NewClientset()
			node(t, client, tc.status)
			l := newLauncher(t, client)
			_, err := l.Start(context.Background(), launcher.Request{ID: "1", Browser: entry("img", "4444")})
			var se *launcher.StartError
			if !errors.As(err, &se) || se.Phase != tc.phase || se.Down != tc.down || !strings.Contains(se.Msg, tc.says) {
				t.Fatalf("got %#v, want phase %s, down %v, saying %q", err, tc.phase, tc.down, tc.says)
			}
			pods, _ := client.CoreV1().Pods("browsers").List(context.Background(), metav1.ListOptions{})
			if len(pods.Items) != 0 {
				t.Errorf("%d pods left by a failed start", len(pods.Items))
			}
		})
	}
}

// The API server stops answering while a pod starts: the client is told so
// (Down: 500 + Retry-After) at the start-up timeout, without waiting on the pod's
// removal, which goes on against an API server that does not answer.
func TestAPIServerDownDuringAStart(t *testing.T) {
	client := fake.NewClientset()
	node(t, client, func(p *corev1.Pod) { p.Status.Phase = corev1.PodPending })
	l, err := New(Options{Namespace: "browsers", HubAddresses: []string{"10.0.0.1"},
		Options: launcher.Options{Instance: "test", StartupTimeout: time.Second, StopTimeout: 10 * time.Second}}, client, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	l.Prepare(ctx)
	deleting := make(chan struct{})
	t.Cleanup(func() { close(deleting) })
	client.PrependReactor("delete", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		<-deleting // an API server that does not answer
		return true, nil, apierrors.NewServiceUnavailable("down")
	})
	client.PrependReactor("create", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		l.health.MarkDown(errors.New("dial tcp 10.96.0.1:443: connect: connection refused"))
		return false, nil, nil // created; the API server goes away after
	})
	done := make(chan error, 1)
	go func() {
		_, err := l.Start(context.Background(), launcher.Request{ID: "1", Browser: entry("img", "4444")})
		done <- err
	}()
	select {
	case err := <-done:
		var se *launcher.StartError
		if !errors.As(err, &se) || !se.Down || !strings.Contains(se.Msg, "unreachable") {
			t.Fatalf("got %#v, want the API server unreachable", err)
		}
	case <-time.After(time.Minute): // the timeout is a second; this only ends a hang
		t.Fatal("the start waited on the pod's removal")
	}
}

func TestCreateRefusals(t *testing.T) {
	pods := schema.GroupResource{Resource: "pods"}
	for _, tc := range []struct {
		name string
		err  error
		down bool
		says string
	}{
		{"quota", apierrors.NewForbidden(pods, "p", errors.New("exceeded quota: two-pods, requested: pods=1, used: pods=2, limited: pods=2")), true, "ResourceQuota"},
		{"throttled", apierrors.NewTooManyRequests("slow down", 1), true, "throttling"},
		{"rbac", apierrors.NewForbidden(pods, "p", errors.New("User \"system:serviceaccount:x:hub\" cannot create resource \"pods\"")), false, "websummoner.yaml"},
		{"down", apierrors.NewServiceUnavailable("etcd is down"), true, "unreachable"},
		// The namespace's Pod Security level: not the hub's rights, and not
		// the engine failing (no cut of the start gate).
		{"pod security", apierrors.NewForbidden(pods, "p", errors.New(`violates PodSecurity "restricted:latest": runAsNonRoot != true`)), false, "Pod Security level"},
		// A quota that needs every container's limits: the configuration's
		// to give, not the hub's rights (it was told to fix its Role).
		{"quota needs limits", apierrors.NewForbidden(pods, "p", errors.New("failed quota: mem: must specify limits.memory for: recorder")), false, "give that browsers.json entry"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			client := fake.NewClientset()
			l := newLauncher(t, client)
			client.PrependReactor("create", "pods", func(k8stesting.Action) (bool, runtime.Object, error) { return true, nil, tc.err })
			_, err := l.Start(context.Background(), launcher.Request{ID: "1", Browser: entry("img", "4444")})
			var se *launcher.StartError
			config := tc.name == "pod security" || tc.name == "quota needs limits"
			if !errors.As(err, &se) || se.Down != tc.down || se.Engine == config || !strings.Contains(se.Msg, tc.says) {
				t.Fatalf("got %#v, want down %v saying %q", err, tc.down, tc.says)
			}
			l.mu.Lock()
			left := len(l.pods)
			l.mu.Unlock()
			if left != 0 {
				t.Errorf("%d pods still owned after a refused create", left)
			}
		})
	}
}

// A creation whose answer never came (the connection broke, the call timed
// out) may have made the pod all the same: the start deletes it, as any
// failed start's, rather than leave it running unowned until the sweep.
func TestCreateWithoutAnAnswerDeletesThePod(t *testing.T) {
	client := fake.NewClientset()
	l := newLauncher(t, client)
	pods := schema.GroupVersionResource{Version: "v1", Resource: "pods"}
	client.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		obj := a.(k8stesting.CreateAction).GetObject()
		if err := client.Tracker().Create(pods, obj, "browsers"); err != nil {
			t.Error(err)
		}
		return true, nil, errors.New("http2: client connection lost")
	})
	if _, err := l.Start(context.Background(), launcher.Request{ID: "1", Browser: entry("img", "4444")}); err == nil {
		t.Fatal("a creation without an answer started")
	}
	list, err := client.CoreV1().Pods("browsers").List(context.Background(), metav1.ListOptions{})
	if err != nil || len(list.Items) != 0 {
		t.Fatalf("pods left after a creation without an answer: %d (%v)", len(list.Items), err)
	}
}

func TestPrepareSweepsThisInstancesPods(t *testing.T) {
	mk := func(name, instance string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "browsers", Labels: map[string]string{LabelInstance: instance}}}
	}
	client := fake.NewClientset(mk("old", "test"), mk("other", "another-hub"))
	newLauncher(t, client)
	pods, _ := client.CoreV1().Pods("browsers").List(context.Background(), metav1.ListOptions{})
	if len(pods.Items) != 1 || pods.Items[0].Name != "other" {
		t.Errorf("pods after the start-up sweep: %v; want only another hub's", pods.Items)
	}
}

// fakeExec plays exec for the video test: "kill" ends the recorder (its
// status set as the node would), "cat" writes the recording.
type fakeExec struct {
	client *fake.Clientset
	cmds   chan []string
	// hang makes "cat" send one part, then nothing until its context ends:
	// a client's own program in its container, in cat's place.
	hang bool
	// empty makes "cat" send nothing: a recording ffmpeg could not write.
	empty bool
}

func (f *fakeExec) Exec(ctx context.Context, ns, pod, container string, cmd []string, stdout io.Writer) error {
	f.cmds <- append([]string{container}, cmd...)
	if container == recorderContainer {
		p, err := f.client.CoreV1().Pods(ns).Get(ctx, pod, metav1.GetOptions{})
		if err != nil {
			return err
		}
		p.Status.ContainerStatuses = append(p.Status.ContainerStatuses, corev1.ContainerStatus{Name: recorderContainer,
			State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0}}})
		_, err = f.client.CoreV1().Pods(ns).UpdateStatus(ctx, p, metav1.UpdateOptions{})
		return err
	}
	if f.empty {
		return nil
	}
	_, err := io.WriteString(stdout, "the recording")
	if f.hang {
		<-ctx.Done()
		return ctx.Err()
	}
	return err
}

// Exec goes over SPDY only when the API server refused the WebSocket
// upgrade; a command that ran and failed is not run a second time.
func TestExecFallsBackOnlyWhenRefused(t *testing.T) {
	refused := fmt.Errorf("exec: %w", &httpstream.UpgradeFailureError{Cause: errors.New("400 Bad Request")})
	if !fallBack(refused) {
		t.Error("a refused upgrade is not tried over SPDY")
	}
	if fallBack(errors.New("command terminated with exit code 3")) {
		t.Error("a command that failed would run twice")
	}
}

// A video read out of the browser's container, which is the client's, ends
// within -session-delete-timeout whatever runs there as cat: one that never
// ended held the session's slot for ever. Nothing of it is kept.
func TestVideoReadOutIsBounded(t *testing.T) {
	videos := t.TempDir()
	inst, _, _ := recordedSession(t, videos, true, time.Second)
	inst.SessionCreated("abc", nil)
	inst.Stop(context.Background()) // as the hub stops it: no deadline of its own
	if left, _ := os.ReadDir(videos); len(left) != 0 {
		t.Errorf("kept %v of a read-out cut short, want nothing", left)
	}
	c := &capped{w: io.Discard, left: 3}
	if _, err := c.Write([]byte("abcd")); err == nil {
		t.Error("capped wrote past its bound")
	}
}

// recordedSession starts a recorded session (video login.mp4 into videos)
// on a fake node, its exec played by a fakeExec.
func recordedSession(t *testing.T, videos string, hang bool, stop time.Duration) (launcher.Instance, *fake.Clientset, *fakeExec) {
	t.Helper()
	client, _, port := servingNode(t)
	ex := &fakeExec{client: client, cmds: make(chan []string, 4), hang: hang}
	l, err := New(Options{Namespace: "browsers", HubAddresses: []string{}, VideoDir: videos, VideoImage: "websummoner/recorder:1", Exec: ex,
		Options: launcher.Options{Instance: "test", StartupTimeout: 20 * time.Second, StopTimeout: stop}, Mem: "256m", CPU: "0.5"}, client, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	l.Prepare(ctx)
	b := entry("img", port)
	b.Mem = "1g" // the browser's own; the recorder runs under the hub's -mem
	inst, err := l.Start(ctx, launcher.Request{ID: "1", Browser: b, Options: webdriver.Options{EnableVideo: true, VideoName: "login.mp4"}})
	if err != nil {
		t.Fatal(err)
	}
	return inst, client, ex
}

func TestVideoRecorderInThePod(t *testing.T) {
	videos := t.TempDir()
	inst, client, ex := recordedSession(t, videos, false, 10*time.Second)
	ctx := context.Background()
	name, _ := inst.(launcher.Container).ContainerInfo()
	pod, _ := client.CoreV1().Pods("browsers").Get(ctx, name, metav1.GetOptions{})
	if len(pod.Spec.Containers) != 2 || pod.Spec.Containers[1].Image != "websummoner/recorder:1" || pod.Spec.Containers[1].ImagePullPolicy != corev1.PullNever {
		t.Fatalf("containers %+v: want the browser and the recorder", pod.Spec.Containers)
	}
	if sc := pod.Spec.Containers[1].SecurityContext; sc == nil || sc.Capabilities == nil || len(sc.Capabilities.Drop) != 1 || sc.Capabilities.Drop[0] != "NET_RAW" {
		t.Errorf("recorder security context %+v: want NET_RAW dropped, as the browser's", sc)
	}
	// Bounded as the Docker launcher's recorder is (a page can make it
	// encode without end), and so admitted by a ResourceQuota that needs
	// every container's limits.
	rec := pod.Spec.Containers[1].Resources
	if rec.Limits.Memory().String() != "256Mi" || rec.Limits.Cpu().String() != "500m" || rec.Requests.Memory().String() != "256Mi" {
		t.Errorf("recorder resources %+v: want the hub's -mem 256m and -cpu 0.5 as requests and limits", rec)
	}
	if m := pod.Spec.Containers[0].Resources.Limits.Memory().String(); m != "1Gi" {
		t.Errorf("browser memory %s, want the entry's 1g", m)
	}
	inst.SessionCreated("abc", nil)
	if err := inst.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if c := <-ex.cmds; c[0] != recorderContainer || !strings.Contains(strings.Join(c, " "), "kill -INT 1") {
		t.Errorf("first exec %v: want the recorder stopped with SIGINT", c)
	}
	if c := <-ex.cmds; c[0] != browserContainer || c[len(c)-1] != videoMount+"/video.mp4" {
		t.Errorf("second exec %v: want the file read through the browser's container", c)
	}
	data, err := os.ReadFile(filepath.Join(videos, "login.mp4"))
	if err != nil || string(data) != "the recording" {
		t.Errorf("video: %q %v", data, err)
	}
}

// A recording its ffmpeg wrote nothing to (a codec its format cannot hold:
// vp8 in .mp4) is no video: none is kept (VIDEO_FAILED says why).
func TestEmptyRecordingIsNotKept(t *testing.T) {
	videos := t.TempDir()
	inst, _, ex := recordedSession(t, videos, false, 10*time.Second)
	ex.empty = true
	inst.SessionCreated("abc", nil)
	inst.Stop(context.Background())
	if left, _ := os.ReadDir(videos); len(left) != 0 {
		t.Errorf("kept %v of an empty recording, want nothing", left)
	}
}

// A kept log is the browser container's output, read through the API
// before the pod goes (client-go's fake answers "fake logs").
func TestKeptLogFromThePod(t *testing.T) {
	client, _, port := servingNode(t)
	logs := t.TempDir()
	l, err := New(Options{Namespace: "browsers", HubAddresses: []string{},
		Options: launcher.Options{Instance: "test", LogDir: logs, StartupTimeout: 20 * time.Second, StopTimeout: 10 * time.Second}}, client, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	l.Prepare(ctx)
	inst, err := l.Start(ctx, launcher.Request{ID: "1", Browser: entry("img", port), Options: webdriver.Options{EnableLog: true, LogName: "run.log"}})
	if err != nil {
		t.Fatal(err)
	}
	inst.SessionCreated("abc", nil)
	if err := inst.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if data, err := os.ReadFile(filepath.Join(logs, "run.log")); err != nil || string(data) != "fake logs" {
		t.Errorf("kept log: %q %v", data, err)
	}
}

// A pod gets what a Selenoid container gets when its entry and client say
// nothing: 256 MiB of /dev/shm (unless its tmpfs mounts one), the hub's time
// zone, and no limit for a "0" cpu or mem.
func TestPodDefaultsAsSelenoid(t *testing.T) {
	l := &Launcher{opts: Options{Namespace: "browsers", Options: launcher.Options{Instance: "hub", TimeZone: "Asia/Tokyo"}}}
	b := entry("websummoner/chromium:latest", "")
	b.CPU, b.Mem = "0", "0"
	pod, err := l.podSpec(launcher.Request{ID: "1", Browser: b}, podName("hub", "1-a"), "1-a", "10.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	shm := 0
	for _, v := range pod.Spec.Volumes {
		if v.Name == shmVolume && v.EmptyDir != nil && v.EmptyDir.SizeLimit.Value() == 256<<20 {
			shm++
		}
	}
	if shm != 1 {
		t.Errorf("volumes %v: want one /dev/shm of 256 MiB", pod.Spec.Volumes)
	}
	c := pod.Spec.Containers[0]
	if !slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == "TZ" && e.Value == "Asia/Tokyo" }) {
		t.Errorf("env %v: want the hub's TZ", c.Env)
	}
	if len(c.Resources.Limits) != 0 {
		t.Errorf("limits %v: \"0\" is no limit", c.Resources.Limits)
	}
	b.Tmpfs = map[string]string{"/dev/shm": "size=1g"}
	pod, err = l.podSpec(launcher.Request{ID: "1", Browser: b}, podName("hub", "1-a"), "1-a", "10.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	mounts := 0
	for _, m := range pod.Spec.Containers[0].VolumeMounts {
		if m.MountPath == "/dev/shm" {
			mounts++
		}
	}
	if mounts != 1 {
		t.Errorf("%d mounts at /dev/shm, want the entry's tmpfs alone", mounts)
	}
	// A zone the hub does not know: the hub's, and said so, as in a container.
	lines, log := logtest.New(10)
	l.log = log
	pod, err = l.podSpec(launcher.Request{ID: "1", Browser: b, Options: webdriver.Options{TimeZone: "Mars/Olympus_Mons"}}, podName("hub", "1-a"), "1-a", "10.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	if env := pod.Spec.Containers[0].Env; !slices.ContainsFunc(env, func(e corev1.EnvVar) bool { return e.Name == "TZ" && e.Value == "Asia/Tokyo" }) {
		t.Errorf("env %v: an unknown zone, want the hub's TZ", env)
	}
	if m := lines.Wait(t, "BAD_TIMEZONE", time.Second); !strings.Contains(m, "Mars/Olympus_Mons") {
		t.Errorf("BAD_TIMEZONE does not name the zone: %s", m)
	}
}

// Pods of one hub never share a name, and two hubs never a label: a long
// -instance cut the session's part off every pod name (the second start
// replaced the first's pod, which the sweep then deleted under its session),
// and names alike but for a character Kubernetes' labels cannot hold (pk:x,
// pk_x) swept each other's pods.
func TestNamesAndLabelsDoNotCollide(t *testing.T) {
	long := "probek-" + strings.Repeat("x", 49)
	a, b := podName(long, "1-0a1b2c3d4e5f"), podName(long, "2-0a1b2c3d4e5f")
	if a == b || len(a) > 63 || len(validation.IsDNS1123Label(a)) > 0 || !strings.HasSuffix(a, "-1-0a1b2c3d4e5f") {
		t.Errorf("pod names %q and %q: want two DNS labels, each ending in its session", a, b)
	}
	seen := map[string]string{}
	for _, inst := range []string{"pk:x", "pk_x", "hub", strings.Repeat("h", 70) + "1", strings.Repeat("h", 70) + "2", ":::", "websummoner-host"} {
		v := labelValue(inst)
		if len(validation.IsValidLabelValue(v)) > 0 {
			t.Errorf("instance %q: label %q is not a label value", inst, v)
		}
		if other, ok := seen[v]; ok {
			t.Errorf("instances %q and %q share the label %q", other, inst, v)
		}
		seen[v] = inst
	}
	if labelValue("websummoner-host") != "websummoner-host" {
		t.Error("a name that is a label value is not kept as it is")
	}
}
