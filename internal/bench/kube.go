package bench

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// The kube scenario measures the Kubernetes launcher (-kubernetes) on the
// test cluster scripts/k8s-up.sh starts, side by side with the Docker
// launcher on the same machine's engine: a session's create through each, in
// interleaved rounds (the pod's extra cost), then 20 sessions asked for at
// once of a hub with -limit 20, all of which must be served, with the start
// gate's pace.

// KubeconfigEnv names the test cluster's kubeconfig for the kube scenario,
// as for the e2e tests.
const KubeconfigEnv = "WEBSUMMONER_KUBECONFIG"

// ErrNoCluster says the kube scenario has no cluster to run on.
var ErrNoCluster = errors.New("no test cluster: " + KubeconfigEnv + " is unset (make k8s-up starts one and prints its kubeconfig)")

// Kube runs the kube scenario. It returns ErrNoCluster without a cluster and
// ErrNoChromiumImage without Docker or the Chromium image.
func (e *Env) Kube(ctx context.Context) (*Result, error) {
	kc := os.Getenv(KubeconfigEnv)
	if kc == "" {
		return nil, ErrNoCluster
	}
	chromium, err := chromiumImage(ctx)
	if err != nil {
		return nil, err
	}
	stub, err := newestImage(ctx, "websummoner/wdstub")
	if err != nil {
		return nil, err
	}
	rounds, burst := 20, 20
	if e.Short {
		rounds, burst = 3, 5
	}
	r := &Result{Scenario: "kube", Figures: map[string]float64{},
		Header: []string{"launcher", "creates", "create p50 ms", "create p99 ms", "p50 / Docker's"}}
	conf := fmt.Sprintf(`{"chrome": {"default": "1", "versions": {"1": {"image": %q, "port": "4444", "path": "/", "shmSize": 268435456,
  "caps": {"goog:chromeOptions": {"args": ["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-background-networking", "--disable-component-update", "--disable-sync"]}}}}},
 "stub": {"default": "1", "versions": {"1": {"image": %q, "port": "4444", "path": "/"}}}}`, chromium, stub)
	pid := os.Getpid()
	dockerInst, kubeInst := fmt.Sprintf("wsbench-kd-%d", pid), fmt.Sprintf("wsbench-kk-%d", pid)
	defer cleanupInstances(dockerInst, kubeInst, kc)
	dockerHub, err := e.startHub(ctx, conf, "-disable-docker=false", "-instance", dockerInst, "-limit", "2")
	if err != nil {
		return nil, fmt.Errorf("kube: starting the Docker hub: %w", err)
	}
	defer dockerHub.stop()
	kubeHub, err := e.startHub(ctx, conf, "-disable-docker=false", "-kubernetes", "-kubeconfig", kc, "-namespace", "default",
		"-instance", kubeInst, "-limit", fmt.Sprint(burst))
	if err != nil {
		return nil, fmt.Errorf("kube: starting the Kubernetes hub: %w", err)
	}
	defer kubeHub.stop()

	c := pooled(burst)
	defer c.CloseIdleConnections()
	w := wd{c: c}
	hubs := []*proc{dockerHub, kubeHub}
	lat := make([][]time.Duration, 2)
	failed := 0
	chromeCaps := `{"capabilities":{"alwaysMatch":{"browserName":"chrome"}}}`
	for round := range rounds + 1 { // the first warms the page cache: not counted
		for k := range hubs {
			h := hubs[(k+round)%2] // the order alternates
			if err := quiet(ctx, c, h.url, time.Minute); err != nil {
				return nil, err
			}
			t0 := time.Now()
			id, code, err := w.create(ctx, h.url+"/wd/hub", chromeCaps)
			took := time.Since(t0)
			if err != nil || code != 200 {
				failed++
				fmt.Fprintf(e.Log, "kube: create on %s: %d %v\n", h.url, code, err)
				continue
			}
			if round > 0 {
				lat[(k+round)%2] = append(lat[(k+round)%2], took)
			}
			w.remove(h.url+"/wd/hub", id)
		}
	}
	names := []string{"Docker container", "Kubernetes pod"}
	for k := range hubs {
		sortDurations(lat[k])
	}
	p50 := func(k int) time.Duration { return percentile(lat[k], 50) }
	for k, name := range names {
		ratio := "1.000"
		if k == 1 && p50(0) > 0 {
			ratio = fmt.Sprintf("%.3f", float64(p50(1))/float64(p50(0)))
		}
		r.Rows = append(r.Rows, []string{name, fmt.Sprint(len(lat[k])), ms(p50(k)), ms(percentile(lat[k], 99)), ratio})
	}
	if len(lat[0]) > 0 && len(lat[1]) > 0 {
		r.Figures["pod_create_p50_ms"] = float64(p50(1)) / 1e6
		r.Figures["container_create_p50_ms"] = float64(p50(0)) / 1e6
		r.Figures["pod_extra_p50_ms"] = float64(p50(1)-p50(0)) / 1e6
	}

	// burst sessions at once of the Kubernetes hub, each a stub driver's pod.
	if err := quiet(ctx, c, kubeHub.url, time.Minute); err != nil {
		return nil, err
	}
	var (
		mu          sync.Mutex
		ids         []string
		served      int
		first, last time.Duration
	)
	pace := make(chan struct{})
	var maxInFlight, minLimit, maxLimit float64 = 0, -1, 0
	go func() { // the gate's pace, sampled while the burst runs
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-pace:
				return
			case <-t.C:
			}
			f := metric(c, kubeHub.url, "websummoner_gate_starts_in_flight")
			l := metric(c, kubeHub.url, "websummoner_gate_limit")
			mu.Lock()
			maxInFlight = max(maxInFlight, f)
			if l >= 0 && (minLimit < 0 || l < minLimit) {
				minLimit = l
			}
			maxLimit = max(maxLimit, l)
			mu.Unlock()
		}
	}()
	t0 := time.Now()
	var wg sync.WaitGroup
	for range burst {
		wg.Go(func() {
			id, code, err := w.create(ctx, kubeHub.url+"/wd/hub", stubCaps)
			took := time.Since(t0)
			mu.Lock()
			defer mu.Unlock()
			if err != nil || code != 200 {
				fmt.Fprintf(e.Log, "kube: burst create: %d %v\n", code, err)
				return
			}
			served++
			ids = append(ids, id)
			if first == 0 || took < first {
				first = took
			}
			last = max(last, took)
		})
	}
	wg.Wait()
	close(pace)
	for _, id := range ids {
		w.remove(kubeHub.url+"/wd/hub", id)
	}
	r.Rows = append(r.Rows, []string{fmt.Sprintf("%d stub pods at once (-limit %d)", burst, burst), fmt.Sprint(served),
		fmt.Sprintf("first %s", ms(first)), fmt.Sprintf("last %s", ms(last)), "—"})
	r.Figures["burst_served"] = float64(served)
	r.Figures["burst_last_ms"] = float64(last) / 1e6
	r.Notes = append(r.Notes,
		fmt.Sprintf("%d rounds (after one not counted) of a headless Chromium session created and DELETEd on a hub with the Docker launcher and on one with -kubernetes, the order alternating, each when its hub was idle; the same image, %s, on the same engine (the cluster's node runs its pods there through cri-dockerd)", rounds, chromium),
		fmt.Sprintf("the start gate during the burst: at most %.0f starts in flight, its limit from %.0f to %.0f", maxInFlight, minLimit, maxLimit))
	r.correct("Chromium creates answered other than 200", float64(failed), 0, "")
	r.correct(fmt.Sprintf("sessions of the %d asked for at once not served", burst), float64(burst-served), 0, "")
	if err := quiet(ctx, c, kubeHub.url, time.Minute); err != nil {
		return nil, err
	}
	left, err := kubePods(ctx, kc, kubeInst)
	if err != nil {
		return nil, err
	}
	r.correct("pods left after the sessions ended", float64(left), 0, "")
	return r, nil
}

// newestImage is the newest tagged image of a repository in the Docker engine.
func newestImage(ctx context.Context, repo string) (string, error) {
	out, err := exec.CommandContext(ctx, "docker", "image", "ls", repo, "--format", "{{.Repository}}:{{.Tag}}").Output()
	if err != nil {
		return "", fmt.Errorf("%s: %w", repo, ErrNoChromiumImage)
	}
	for _, tag := range strings.Fields(string(out)) {
		if !strings.HasSuffix(tag, ":<none>") {
			return tag, nil
		}
	}
	return "", fmt.Errorf("no %s image in the Docker engine (images/wdstub/build.sh builds it): %w", repo, ErrNoChromiumImage)
}

// quiet waits until a hub holds no slot: a DELETE is answered before the
// browser's teardown ends, and a timed create must not share the machine
// with one.
func quiet(ctx context.Context, c *http.Client, base string, d time.Duration) error {
	deadline := time.Now().Add(d)
	for statusField(c, base, "used") != 0 || statusField(c, base, "pending") != 0 {
		if time.Now().After(deadline) {
			return fmt.Errorf("kube: the hub at %s did not settle within %v", base, d)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	return nil
}

// kubePods counts the pods of an instance in the cluster.
func kubePods(ctx context.Context, kubeconfig, instance string) (int, error) {
	client, err := kubeClient(kubeconfig)
	if err != nil {
		return 0, err
	}
	list, err := client.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{LabelSelector: "websummoner.instance=" + instance})
	if err != nil {
		return 0, fmt.Errorf("kube: listing the pods of %s: %w", instance, err)
	}
	return len(list.Items), nil
}

func kubeClient(kubeconfig string) (kubernetes.Interface, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("kube: %s %s: %w", KubeconfigEnv, kubeconfig, err)
	}
	return kubernetes.NewForConfig(cfg)
}

// cleanupInstances removes whatever the scenario's hubs left, by their
// instance labels: containers on the engine, pods in the cluster.
func cleanupInstances(dockerInst, kubeInst, kubeconfig string) {
	label := "label=websummoner.instance=" + dockerInst
	exec.Command("sh", "-c", "docker ps -aq --filter "+label+" | xargs -r docker rm -f").Run()
	exec.Command("sh", "-c", "docker network ls -q --filter "+label+" | xargs -r docker network rm").Run()
	if client, err := kubeClient(kubeconfig); err == nil {
		zero := int64(0)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = client.CoreV1().Pods("default").DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: &zero},
			metav1.ListOptions{LabelSelector: "websummoner.instance=" + kubeInst})
	}
}
