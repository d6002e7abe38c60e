// Package kube runs each session's browser as a Kubernetes pod, through the
// API server: one pod per session, built from its browsers.json entry,
// labelled with the hub instance and the session, reached at the pod's
// address on the contract's ports, deleted when the session ends, and swept
// when nothing owns it.
//
// The package is split as the Docker launcher is: this file starts pods;
// pod.go builds a pod from its entry; handle.go is the running pod; watch.go
// follows the pods of this instance (one informer), the API server's health
// and the sweeps.
package kube

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/websummoner/websummoner/internal/config"
	"github.com/websummoner/websummoner/internal/launcher"
	"github.com/websummoner/websummoner/internal/logtag"
)

// Labels every pod of this hub carries; the hub selects its pods by them.
const (
	LabelInstance = "websummoner.instance" // the hub instance (-instance)
	LabelSession  = "websummoner.session"  // the start it belongs to: request id and a random token
)

// Options configure the Kubernetes launcher. The zero value works: pods in
// the "default" namespace, without resource limits, told the hub's own
// addresses.
type Options struct {
	// Options is the start policy shared with the other launchers; zero fields
	// take its defaults.
	launcher.Options
	// Namespace is -namespace, where the pods are made; empty means "default".
	Namespace string
	// Mem and CPU are hub-wide defaults (-mem, -cpu) for entries without their
	// own, made the pod's requests and limits.
	Mem, CPU string
	// HubAddresses are the addresses the hub's connections to a pod come
	// from, told to the browser image (docker.HubAddressesEnv) so that its
	// services accept the hub alone. Nil: the hub's own non-loopback
	// addresses, which a pod sees where nothing translates them (a hub in
	// the cluster, or on a node).
	HubAddresses []string
	// SweepInterval is how often pods with no live session are deleted;
	// zero means 30s.
	SweepInterval time.Duration
	// HealthInterval is how often the API server is asked; zero means 5s.
	HealthInterval time.Duration
	// OnHealth, if set, is told each change of the API server's health (the
	// start gate's second signal).
	OnHealth func(up bool)
	// VideoDir is -video-output-dir, where finished recordings are written;
	// with VideoImage (-video-recorder-image) and Exec it enables
	// enableVideo. Empty: sessions asking for video are refused.
	VideoDir   string
	VideoImage string
	// VideoMaxSize is -video-max-size: the bytes at which a recording ends
	// (launcher.RecorderEnv), and, with room for its index, the most of one
	// read out of a pod (launcher.VideoReadBound). Zero: no bound.
	VideoMaxSize int64
	// Exec runs commands in a pod's containers (stopping the recorder,
	// reading its file out); NewExecer makes the cluster's.
	Exec Execer
}

// Validate says which flag holds a value the launcher cannot work with.
func (o Options) Validate() error {
	if err := o.Options.Validate(); err != nil {
		return err
	}
	if o.Namespace != "" && dnsLabel(o.Namespace) != o.Namespace {
		return fmt.Errorf("-namespace must be a Kubernetes namespace name, lower-case letters, digits and '-' (got %q)", o.Namespace)
	}
	if o.SweepInterval < 0 {
		return fmt.Errorf("-sweep-interval must be a positive duration such as 30s (got %v)", o.SweepInterval)
	}
	return nil
}

// Launcher starts browsers in pods.
type Launcher struct {
	opts     Options
	client   kubernetes.Interface
	log      *slog.Logger
	ready    *http.Client
	factory  informers.SharedInformerFactory
	informer cache.SharedIndexInformer
	hub      string // HubAddressesEnv's value
	health   *launcher.Health

	mu   sync.Mutex
	pods map[string]*instance // pod name → instance, from before its creation until it is gone
}

// New returns a Kubernetes launcher over client. Prepare and Watch must be
// called for the informer, the health checks and the sweeps.
func New(opts Options, client kubernetes.Interface, logger *slog.Logger, reg prometheus.Registerer) (*Launcher, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	opts.Options = opts.Options.WithDefaults()
	if opts.Namespace == "" {
		opts.Namespace = "default"
	}
	if opts.SweepInterval == 0 {
		opts.SweepInterval = 30 * time.Second
	}
	if opts.HealthInterval <= 0 {
		opts.HealthInterval = 5 * time.Second
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	hub := opts.HubAddresses
	if hub == nil {
		var err error
		if hub, err = ownAddresses(); err != nil {
			return nil, err
		}
	}
	l := &Launcher{opts: opts, client: client, log: logger, ready: opts.ReadyClient(),
		hub: strings.Join(hub, ","), pods: map[string]*instance{}}
	var err error
	if l.health, err = launcher.NewHealth(launcher.HealthOptions{Engine: "Kubernetes API server", Tag: "KUBERNETES", Metric: "websummoner_kubernetes_up",
		Advice: "check -kubeconfig and the cluster", OnHealth: opts.OnHealth}, logger, reg); err != nil {
		return nil, err
	}
	l.factory = informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithNamespace(opts.Namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = l.selector() }))
	l.informer = l.factory.Core().V1().Pods().Informer()
	if _, err := l.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { l.observe(obj, false) },
		UpdateFunc: func(_, obj any) { l.observe(obj, false) },
		DeleteFunc: func(obj any) { l.observe(obj, true) },
	}); err != nil {
		return nil, err
	}
	return l, nil
}

// selector selects this instance's pods.
func (l *Launcher) selector() string {
	return LabelInstance + "=" + labelValue(l.opts.Instance)
}

// ownAddresses are the host's (or the hub pod's) non-loopback IPv4
// addresses: where the hub's connections to a pod come from.
func ownAddresses() ([]string, error) {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil, fmt.Errorf("listing the hub's own addresses for the pods' allow-lists: %w", err)
	}
	var out []string
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && !n.IP.IsLoopback() && n.IP.To4() != nil && !slices.Contains(out, n.IP.String()) {
			out = append(out, n.IP.String())
		}
	}
	return out, nil
}

// Check fails fast, before a request takes a slot or queues, while the API
// server is down. Whether a node has the image is known only once the pod is
// scheduled: an image missing there fails the start.
func (l *Launcher) Check(_ context.Context, b config.Resolved) error {
	if !l.health.Up() {
		return l.health.DownErr(b, nil)
	}
	return nil
}

// Start creates the pod and waits until it runs and its driver answers. Any
// failure on the way deletes the pod before returning.
func (l *Launcher) Start(ctx context.Context, r launcher.Request) (launcher.Instance, error) {
	if !l.health.Up() {
		return nil, l.health.DownErr(r.Browser, nil)
	}
	ctx, cancel := context.WithTimeout(ctx, l.opts.StartupTimeout)
	defer cancel()
	token := make([]byte, 6)
	_, _ = rand.Read(token)
	session := r.ID + "-" + hex.EncodeToString(token)
	name := podName(l.opts.Instance, session)
	pod, err := l.podSpec(r, name, session, l.hub)
	if err != nil {
		return nil, &launcher.StartError{Phase: launcher.PhaseStart, Browser: r.Browser.String(), Msg: err.Error(), Err: err}
	}
	inst := newInstance(l, name, r)
	// Known before it exists: the informer's first word of it finds it, and
	// the sweep spares it.
	l.mu.Lock()
	l.pods[name] = inst
	l.mu.Unlock()
	// The creation is not the client's to cut short: a call cancelled in
	// flight may still make the pod, which the hub would then not know of
	// (it would run, outside -limit, until the sweep). It ends by the
	// start's deadline whatever the client does; a client gone by then has
	// its pod deleted below, as any failed start's.
	dl, _ := ctx.Deadline()
	cctx, ccancel := context.WithDeadline(context.WithoutCancel(ctx), dl)
	_, err = l.client.CoreV1().Pods(l.opts.Namespace).Create(cctx, pod, metav1.CreateOptions{})
	ccancel()
	if err != nil {
		if mayExist(err) {
			// No answer, or the API server's own timeout: the pod may
			// exist all the same.
			rctx := context.WithoutCancel(ctx)
			if l.health.Up() {
				_ = inst.remove(rctx)
			} else {
				go func() { _ = inst.remove(rctx) }() // the sweep deletes it if this cannot
			}
		} else {
			l.forget(inst)
		}
		return nil, l.apiErr(ctx, r.Browser, "creating the pod", err)
	}
	e, err := l.run(ctx, inst, r)
	if err != nil {
		// Deleted even when the client left: the context for that is not the client's.
		rctx := context.WithoutCancel(ctx)
		if !l.health.Up() {
			// The API server stopped answering during the start: that is what
			// the client is told, now, not after the removal's own wait on
			// it (the sweep deletes the pod if this cannot).
			go func() { _ = inst.remove(rctx) }()
			var se *launcher.StartError
			if errors.As(err, &se) && se.Phase == launcher.PhaseStartup {
				err = l.health.DownErr(r.Browser, nil)
			}
			return nil, err
		}
		_ = inst.remove(rctx)
		return nil, err
	}
	e.Log = inst
	inst.mu.Lock()
	inst.endpoints = e
	inst.mu.Unlock()
	logtag.Event(l.log, slog.LevelDebug, r.ID, "POD_STARTED", r.Browser, name, e.Driver.Host)
	return inst, nil
}

// mayExist reports whether a failed creation may have made its pod all the
// same: the API server gave no answer (the call timed out or its connection
// broke) or answered that it ran out of time. A refusal it answered made none.
func mayExist(err error) bool {
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		return true
	}
	return apierrors.IsTimeout(err) || apierrors.IsServerTimeout(err)
}

// run waits until the pod runs with an address, then until its driver
// answers; a pod that cannot be scheduled, whose image is missing, or that
// ends on the way fails the start at once, saying why.
func (l *Launcher) run(ctx context.Context, inst *instance, r launcher.Request) (launcher.Endpoints, error) {
	var e launcher.Endpoints
	var last *corev1.Pod
	// The informer's watch carries the pod's news; a watch being re-made
	// (the API server restarted) can lag by many seconds, so the pod is
	// also read now and then.
	look := time.NewTicker(lookInterval)
	defer look.Stop()
	for ip := ""; ip == ""; {
		select {
		case <-look.C:
			l.look(ctx, inst)
		case <-ctx.Done():
			if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return e, ctx.Err()
			}
			return e, &launcher.StartError{Phase: launcher.PhaseStartup, Browser: r.Browser.String(), Engine: true, Err: ctx.Err(),
				Msg: fmt.Sprintf("pod %s did not run within -service-startup-timeout %v (%s); raise it if pods start slowly, or check the node", inst.name, l.opts.StartupTimeout, describe(last))}
		case <-inst.exited:
			return e, &launcher.StartError{Phase: launcher.PhaseStartup, Browser: r.Browser.String(), Engine: true,
				Msg: "waiting for the pod: " + inst.ExitReason()}
		case <-inst.changed:
			last = inst.latest()
			if err := startFault(last, r.Browser); err != nil {
				return e, err
			}
			if last.Status.Phase == corev1.PodRunning {
				ip = last.Status.PodIP
			}
		}
	}
	inst.mu.Lock()
	inst.ip = last.Status.PodIP
	inst.mu.Unlock()
	e = endpointsOf(inst.ip, portOf(r.Browser.Browser), r.Browser.Path)
	err := launcher.WaitReady(ctx, l.ready, e.Driver, inst.exited)
	switch {
	case err == nil:
		return e, nil
	case errors.Is(err, launcher.ErrExited):
		return e, &launcher.StartError{Phase: launcher.PhaseStartup, Browser: r.Browser.String(), Engine: true,
			Msg: "waiting for the driver: the pod ended before its driver answered (" + inst.ExitReason() + ")"}
	case errors.Is(err, context.DeadlineExceeded):
		return e, &launcher.StartError{Phase: launcher.PhaseStartup, Browser: r.Browser.String(), Engine: true, Err: err,
			Msg: fmt.Sprintf("pod %s did not answer on %s within -service-startup-timeout %v; raise it if the node is slow, or check the image", inst.name, e.Driver.Host, l.opts.StartupTimeout)}
	default:
		return e, err // the client went away
	}
}

// lookInterval is how often a pod the hub waits on is read, beside the
// informer's word of it.
const lookInterval = 2 * time.Second

// look reads a pod the hub waits on and hands it to its instance as the
// informer would: a pod that is gone is gone.
func (l *Launcher) look(ctx context.Context, inst *instance) {
	pod, err := l.client.CoreV1().Pods(l.opts.Namespace).Get(ctx, inst.name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		inst.see(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: inst.name}}, true)
	case err == nil:
		inst.see(pod, false)
	}
}

// endpointsOf says where a running pod's driver and side services are: its
// address on the cluster's network, at the contract's ports.
func endpointsOf(ip, port, path string) launcher.Endpoints {
	var e launcher.Endpoints
	e.Driver = &url.URL{Scheme: "http", Host: net.JoinHostPort(ip, port), Path: path}
	for _, s := range sidePorts {
		s.set(&e, net.JoinHostPort(ip, fmt.Sprint(s.port)))
	}
	return e
}

func urlOf(scheme, host string) *url.URL { return &url.URL{Scheme: scheme, Host: host} }

// Reasons a container waits for an image it will not get: with
// imagePullPolicy Never, the image is not on the node.
var imageReasons = []string{"ErrImageNeverPull", "ErrImagePull", "ImagePullBackOff", "InvalidImageName"}

// Reasons a container waits for what the node could not make of it.
var createReasons = []string{"CreateContainerConfigError", "CreateContainerError", "RunContainerError", "PreCreateHookError", "PreStartHookError"}

// startFault is the start error a pod's status already tells, or nil while
// it may yet run.
func startFault(pod *corev1.Pod, b config.Resolved) error {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
			// Waiting helps: a session ending elsewhere, or a node joining.
			return &launcher.StartError{Phase: launcher.PhaseStart, Browser: b.String(), Engine: true, Down: true,
				Msg: fmt.Sprintf("no node can run the pod now (%s: %s); try again later, or free or add nodes, or lower the entry's \"cpu\"/\"mem\"", c.Reason, c.Message)}
		}
	}
	for _, cs := range pod.Status.ContainerStatuses {
		w := cs.State.Waiting
		switch {
		case w == nil:
		case slices.Contains(imageReasons, w.Reason):
			return &launcher.StartError{Phase: launcher.PhaseImage, Browser: b.String(),
				Msg: fmt.Sprintf("image %q is not on node %s (%s: %s); pods never pull (imagePullPolicy Never): load the image on every node that may run browsers", imageOf(pod, cs.Name), pod.Spec.NodeName, w.Reason, w.Message)}
		case slices.Contains(createReasons, w.Reason):
			return &launcher.StartError{Phase: launcher.PhaseStart, Browser: b.String(), Engine: true,
				Msg: fmt.Sprintf("node %s could not start the pod's %s container (%s: %s)", pod.Spec.NodeName, cs.Name, w.Reason, w.Message)}
		}
	}
	return nil
}

// imageOf is the image of a pod's container.
func imageOf(pod *corev1.Pod, container string) string {
	for _, c := range pod.Spec.Containers {
		if c.Name == container {
			return c.Image
		}
	}
	return ""
}

// describe says where a pod is on its way to running, for a timeout's message.
func describe(pod *corev1.Pod) string {
	if pod == nil {
		return "the API server has not reported it yet"
	}
	parts := []string{"phase " + string(pod.Status.Phase)}
	for _, c := range pod.Status.Conditions {
		if c.Status != corev1.ConditionTrue && c.Reason != "" {
			parts = append(parts, fmt.Sprintf("%s: %s %s", c.Type, c.Reason, c.Message))
		}
	}
	for _, cs := range pod.Status.ContainerStatuses {
		if w := cs.State.Waiting; w != nil {
			parts = append(parts, fmt.Sprintf("%s waiting: %s %s", cs.Name, w.Reason, w.Message))
		}
	}
	return strings.Join(parts, "; ")
}

// apiErr says what an API call's failure means for a start: the client
// leaving (returned as is), the start-up budget running out, the API server
// down or throttling, a ResourceQuota refusing, or the hub not allowed.
func (l *Launcher) apiErr(ctx context.Context, b config.Resolved, what string, err error) error {
	se := &launcher.StartError{Phase: launcher.PhaseStart, Browser: b.String(), Engine: true, Err: err}
	switch {
	case ctx.Err() != nil && !errors.Is(ctx.Err(), context.DeadlineExceeded):
		return ctx.Err()
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		se.Msg = fmt.Sprintf("%s took longer than -service-startup-timeout %v: %v", what, l.opts.StartupTimeout, err)
	case apierrors.IsForbidden(err) && strings.Contains(err.Error(), "exceeded quota"):
		// Waiting helps: a session ending frees the quota.
		se.Down = true
		se.Msg = fmt.Sprintf("%s: namespace %s's ResourceQuota refuses another pod (%v); try again when a session ends, or raise the quota (or lower -limit to match it)", what, l.opts.Namespace, apiMessage(err))
	case apierrors.IsForbidden(err) && strings.Contains(err.Error(), "failed quota"):
		// A ResourceQuota that needs every container's requests and
		// limits: the configuration's to give, not the engine failing.
		se.Engine = false
		se.Msg = fmt.Sprintf("%s: namespace %s's ResourceQuota refuses the pod made from %s (%v); give that browsers.json entry \"mem\" and \"cpu\", and the hub -mem and -cpu (a video recorder runs under those)", what, l.opts.Namespace, b, apiMessage(err))
	case apierrors.IsForbidden(err) && strings.Contains(err.Error(), "violates PodSecurity"):
		// The namespace's Pod Security level, not the hub's rights.
		se.Engine = false
		se.Msg = fmt.Sprintf("%s: namespace %s's Pod Security level refuses the pod made from %s (%v); run the hub's browsers in a namespace labelled pod-security.kubernetes.io/enforce=baseline or privileged, as browser images run as root with Chromium's own sandbox off (docs/kubernetes.md)", what, l.opts.Namespace, b, apiMessage(err))
	case apierrors.IsForbidden(err):
		se.Msg = fmt.Sprintf("%s: the hub may not (%v); give its service account a Role with get, list, watch, create and delete on pods, get on pods/log and create on pods/exec in namespace %s (deploy/kubernetes/websummoner.yaml)", what, apiMessage(err), l.opts.Namespace)
	case apierrors.IsTooManyRequests(err):
		se.Down = true
		se.Msg = fmt.Sprintf("%s: the API server is throttling the hub (%v); try again later, or raise the API server's limits or the hub's -kube-qps and -kube-burst", what, apiMessage(err))
	case apierrors.IsInvalid(err):
		se.Engine = false
		se.Msg = fmt.Sprintf("%s: the API server refused the pod made from %s (%v); fix that browsers.json entry", what, b, apiMessage(err))
	case apierrors.IsServiceUnavailable(err), apierrors.IsServerTimeout(err), apierrors.IsTimeout(err), isConnErr(err):
		l.health.MarkDown(err)
		return l.health.DownErr(b, err)
	default:
		se.Msg = fmt.Sprintf("%s: %v", what, err)
	}
	return se
}

// apiMessage is an API error's own message.
func apiMessage(err error) string {
	var st apierrors.APIStatus
	if errors.As(err, &st) {
		return st.Status().Message
	}
	return err.Error()
}

// isConnErr reports an API call that did not reach the API server.
func isConnErr(err error) bool {
	var ne net.Error
	var oe *net.OpError
	return errors.As(err, &oe) || errors.As(err, &ne) || errors.Is(err, syscall.ECONNREFUSED)
}
