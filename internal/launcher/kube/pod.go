package kube

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/websummoner/websummoner/internal/config"
	"github.com/websummoner/websummoner/internal/launcher"
	"github.com/websummoner/websummoner/internal/launcher/docker"
	"github.com/websummoner/websummoner/internal/webdriver"
)

// Names of the pod's containers and volumes.
const (
	browserContainer = "browser"
	shmVolume        = "dshm"
)

// Annotations a pod carries beside its labels: what is not a valid label
// value ("name version" has a space).
const (
	AnnotationBrowser = "websummoner.browser"
	AnnotationName    = "websummoner.name" // the client's session name (Selenoid's "name" label)
	// AnnotationLabels holds the client's labels, a JSON object: as pod
	// labels, a client's would put its browser behind another's Service or
	// ReplicaSet (app=…), and as annotations they would speak to the kubelet
	// and to admission webhooks (AppArmor profiles, injected credentials).
	AnnotationLabels = "websummoner.labels"
)

// maxNameservers is the most nameservers a pod's dnsConfig takes.
const maxNameservers = 3

// maxClientLabels bounds AnnotationLabels: a pod's annotations hold 256 KiB
// in all.
const maxClientLabels = 64 << 10

// Side-service ports of Selenoid's browser image contract. A pod's image is
// not inspected (the node has it, the hub may not), so every one is offered,
// as Selenoid does for an image that exposes none; a service the image lacks
// answers its side channel with a refused connection.
var sidePorts = []struct {
	name   string
	port   int32
	scheme string
	set    func(*launcher.Endpoints, string)
}{
	{"devtools", 7070, "http", func(e *launcher.Endpoints, h string) { e.DevTools = urlOf("http", h) }},
	{"vnc", 5900, "tcp", func(e *launcher.Endpoints, h string) { e.VNC = urlOf("tcp", h) }},
	{"files", 8080, "http", func(e *launcher.Endpoints, h string) { e.Files = urlOf("http", h) }},
	{"clipboard", 9090, "http", func(e *launcher.Endpoints, h string) { e.Clipboard = urlOf("http", h) }},
}

// podName is a pod's name: DNS-1123, at most 63 characters so that the
// hostname Kubernetes derives from it is the whole name. What is cut to fit
// is the instance's part, never the session's: a long -instance made every
// pod's name the same, and one session's start replaced another's pod.
func podName(instance, session string) string {
	s := dnsLabel(session)
	head := dnsLabel("websummoner-" + instance)
	head = strings.TrimRight(head[:min(len(head), max(62-len(s), 0))], "-")
	if head == "" {
		return s
	}
	return head + "-" + s
}

// dnsLabel makes s a DNS-1123 label: lower case letters, digits and '-',
// starting and ending with an alphanumeric, at most 63 characters.
func dnsLabel(s string) string {
	b := []byte(strings.ToLower(s))
	for k, c := range b {
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9') {
			b[k] = '-'
		}
	}
	out := strings.Trim(string(b[:min(len(b), 63)]), "-")
	if out == "" {
		return "x"
	}
	return out
}

// labelValue makes s a valid label value, for the labels the hub selects by:
// s itself when it is one, else what can be kept of it and a hash of the
// whole, so that two names never share a value (pk:x and pk_x, or two long
// names alike in their first 63 characters, swept each other's pods).
func labelValue(s string) string {
	if len(validation.IsValidLabelValue(s)) == 0 {
		return s
	}
	sum := sha256.Sum256([]byte(s))
	h := hex.EncodeToString(sum[:8])
	if kept := cleanLabel(s[:min(len(s), 46)]); kept != "" {
		return kept + "-" + h
	}
	return h
}

// cleanLabel replaces what a label value cannot hold with '_' and trims
// its ends.
func cleanLabel(s string) string {
	b := []byte(s)
	for k, c := range b {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_' || c == '.') {
			b[k] = '_'
		}
	}
	return strings.Trim(string(b[:min(len(b), 63)]), "-_.")
}

// CheckOptions refuses, before the request queues, a client's values the pod
// could not be made with (Kubernetes would refuse them): the same checks
// Start makes, answered without a wait for a slot.
func (l *Launcher) CheckOptions(b config.Resolved, o webdriver.Options) error {
	// Silent: what a start would log of the options (an unknown time
	// zone), the start logs under the request's own id.
	_, err := l.buildPod(launcher.Request{ID: "check", Browser: b, Options: o}, "check", "check", l.hub, slog.New(slog.DiscardHandler))
	if ae := (*webdriver.ArgumentError)(nil); errors.As(err, &ae) {
		return err
	}
	return nil
}

// podSpec builds the pod from the browsers.json entry and the client's
// options. As for a container, what a client may influence is an explicit
// allow-list (env, labels, time zone, screen, VNC, hosts entries, DNS
// servers, hostname); mounts, resources and privileges come from the
// operator's configuration only, and the pod gets no credentials of the
// cluster's (no service account token) and no environment of its services.
func (l *Launcher) podSpec(r launcher.Request, name, session string, hub string) (*corev1.Pod, error) {
	return l.buildPod(r, name, session, hub, l.log)
}

// buildPod is podSpec, logging to log.
func (l *Launcher) buildPod(r launcher.Request, name, session string, hub string, log *slog.Logger) (*corev1.Pod, error) {
	b, o := r.Browser.Browser, r.Options
	if o.EnableVideo && (l.opts.VideoDir == "" || l.opts.VideoImage == "" || l.opts.Exec == nil) {
		return nil, errors.New("enableVideo needs -video-output-dir, a directory the hub could create and write at start (a [INIT] warning says why not), and -video-recorder-image on this hub")
	}
	if len(o.AdditionalNetworks) > 0 || len(o.ApplicationContainers) > 0 {
		return nil, &webdriver.ArgumentError{Msg: "additionalNetworks and applicationContainers name Docker networks and containers, which a pod on Kubernetes cannot join; reach other services by their Kubernetes names instead"}
	}
	port, err := strconv.ParseInt(portOf(b), 10, 32)
	if err != nil || port <= 0 || port > 65535 {
		return nil, fmt.Errorf("\"port\" %q is not a port number", b.Port)
	}
	labels, annotations := map[string]string{}, map[string]string{AnnotationBrowser: r.Browser.String()}
	put := func(k, v string) {
		if strings.HasPrefix(k, "websummoner.") || len(validation.IsQualifiedName(k)) > 0 {
			return // ours, or not a name Kubernetes takes for a label or an annotation
		}
		if len(validation.IsValidLabelValue(v)) == 0 {
			labels[k] = v
			return
		}
		annotations[k] = v
	}
	if len(o.Labels) > 0 {
		text, _ := json.Marshal(o.Labels)
		if len(text) > maxClientLabels {
			return nil, &webdriver.ArgumentError{Msg: fmt.Sprintf("labels take %d bytes, and a pod keeps at most %d of a client's (they are its %s annotation)", len(text), maxClientLabels, AnnotationLabels)}
		}
		annotations[AnnotationLabels] = string(text)
	}
	for _, k := range slices.Sorted(maps.Keys(b.Labels)) {
		put(k, b.Labels[k]) // the operator's own, as labels where valid
	}
	if o.Name != "" {
		annotations[AnnotationName] = o.Name
	}
	labels[LabelInstance] = labelValue(l.opts.Instance)
	labels[LabelSession] = labelValue(session)

	res, err := l.resources(b)
	if err != nil {
		return nil, err
	}
	browser := corev1.Container{
		Name:            browserContainer,
		Image:           b.Image.Name,
		ImagePullPolicy: corev1.PullNever,
		Resources:       res,
		// No raw sockets, as in a container of the Docker launcher: a
		// browser needs none, and with them a process in the pod could
		// forge frames from another address on the pod network's bridge.
		SecurityContext: &corev1.SecurityContext{Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"NET_RAW"}}},
		Ports:           []corev1.ContainerPort{{Name: "webdriver", ContainerPort: int32(port), Protocol: corev1.ProtocolTCP}},
	}
	for _, s := range sidePorts {
		if s.port != int32(port) {
			browser.Ports = append(browser.Ports, corev1.ContainerPort{Name: s.name, ContainerPort: s.port, Protocol: corev1.ProtocolTCP})
		}
	}
	for _, kv := range launcher.ContainerEnv(r, l.opts.TimeZone, log) {
		k, v, _ := strings.Cut(kv, "=")
		// Literal, as Docker passes it: Kubernetes would expand $(NAME) to
		// another variable's value and $$ to $.
		browser.Env = append(browser.Env, corev1.EnvVar{Name: k, Value: strings.ReplaceAll(v, "$", "$$")})
	}
	browser.Env = append(browser.Env, corev1.EnvVar{Name: docker.HubAddressesEnv, Value: hub})

	no := false
	grace := int64(1)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: l.opts.Namespace, Labels: labels, Annotations: annotations},
		Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever,
			// The runtime's default seccomp profile, as a Docker container
			// gets: Kubernetes' own default is none at all.
			SecurityContext:               &corev1.PodSecurityContext{SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
			AutomountServiceAccountToken:  &no,
			EnableServiceLinks:            &no,
			TerminationGracePeriodSeconds: &grace,
			Hostname:                      o.ContainerHostname,
		},
	}
	if h := o.ContainerHostname; h != "" && len(validation.IsDNS1123Label(h)) > 0 {
		return nil, &webdriver.ArgumentError{Msg: fmt.Sprintf("containerHostname %q is not a DNS label, which a pod's hostname must be (lower-case letters, digits and '-', at most 63)", h)}
	}
	// What Kubernetes refuses of a client's values is the client's to fix,
	// said before the API server is asked.
	for _, kv := range o.Env {
		if k, _, _ := strings.Cut(kv, "="); len(validation.IsRelaxedEnvVarName(k)) > 0 {
			return nil, &webdriver.ArgumentError{Msg: fmt.Sprintf("env %q: %q is not a name Kubernetes takes for a variable (printable ASCII, no '=')", kv, k)}
		}
	}
	for _, s := range o.DNSServers {
		if len(validation.IsValidIPForLegacyField(nil, s, true, nil)) > 0 {
			return nil, &webdriver.ArgumentError{Msg: fmt.Sprintf("dnsServers %q is not an address a pod takes (Kubernetes refuses, among others, IPv4-mapped IPv6 addresses)", s)}
		}
	}
	for _, e := range o.HostsEntries {
		host, ip, _ := strings.Cut(e, ":")
		if ip != "host-gateway" && len(validation.IsValidIPForLegacyField(nil, ip, true, nil)) > 0 {
			return nil, &webdriver.ArgumentError{Msg: fmt.Sprintf("hostsEntries %q: %q is not an address a pod's host aliases take (Kubernetes refuses, among others, IPv4-mapped IPv6 addresses)", e, ip)}
		}
		if len(validation.IsDNS1123Subdomain(host)) > 0 {
			return nil, &webdriver.ArgumentError{Msg: fmt.Sprintf("hostsEntries %q: %q is not a DNS name, which a pod's host aliases must be (lower-case letters, digits, '-' and '.')", e, host)}
		}
		if ip == "host-gateway" {
			return nil, &webdriver.ArgumentError{Msg: fmt.Sprintf("hostsEntries %q: host-gateway is Docker's name for the host, which a pod has no such name for; give an address", e)}
		}
	}
	if n := len(o.DNSServers); n > maxNameservers {
		return nil, &webdriver.ArgumentError{Msg: fmt.Sprintf("dnsServers has %d entries; a pod takes at most %d", n, maxNameservers)}
	}
	if _, own := b.Tmpfs["/dev/shm"]; !own {
		// Selenoid's 256 MiB when the entry sets none, not the runtime's 64
		// MiB, in which Chromium's tabs crash.
		shm := b.ShmSize
		if shm <= 0 {
			shm = config.ShmSizeDefault
		}
		addMemoryVolume(pod, &browser, shmVolume, "/dev/shm", shm)
	}
	for k, dir := range slices.Sorted(maps.Keys(b.Tmpfs)) {
		size, err := tmpfsSize(b.Tmpfs[dir])
		if err != nil {
			return nil, fmt.Errorf("\"tmpfs\" %s: %v", dir, err)
		}
		addMemoryVolume(pod, &browser, fmt.Sprintf("tmpfs-%d", k), dir, size)
	}
	for k, v := range b.Volumes {
		if err := addHostVolume(pod, &browser, fmt.Sprintf("volume-%d", k), v); err != nil {
			return nil, err
		}
	}
	aliases, err := hostAliases(append(slices.Clone(o.HostsEntries), b.Hosts...)) // the client's first, as in a container: the first line for a name wins
	if err != nil {
		return nil, err
	}
	pod.Spec.HostAliases = aliases
	if len(o.DNSServers) > 0 {
		pod.Spec.DNSPolicy = corev1.DNSNone
		pod.Spec.DNSConfig = &corev1.PodDNSConfig{Nameservers: o.DNSServers}
	}
	for _, k := range slices.Sorted(maps.Keys(b.Sysctl)) {
		pod.Spec.SecurityContext.Sysctls = append(pod.Spec.SecurityContext.Sysctls, corev1.Sysctl{Name: k, Value: b.Sysctl[k]})
	}
	pod.Spec.Containers = []corev1.Container{browser}
	if o.EnableVideo {
		if err := l.addRecorder(pod, r); err != nil {
			return nil, err
		}
	}
	return pod, nil
}

// resources are the entry's mem and cpu (or the hub's -mem and -cpu) as
// requests equal to limits: the scheduler places the pod by what it may use.
func (l *Launcher) resources(b *config.Browser) (corev1.ResourceRequirements, error) {
	var rr corev1.ResourceRequirements
	memStr, cpuStr := b.Mem, b.CPU
	if memStr == "" {
		memStr = l.opts.Mem
	}
	if cpuStr == "" {
		cpuStr = l.opts.CPU
	}
	list := corev1.ResourceList{}
	if memStr != "" {
		// Selenoid's sizes: "512m" is 512 MiB, where to Kubernetes it would
		// be half a byte.
		n, err := config.ParseMem(memStr)
		if err != nil {
			return rr, fmt.Errorf("\"mem\": %v", err)
		}
		if n > 0 { // "0" is no limit, as under Selenoid
			list[corev1.ResourceMemory] = *resource.NewQuantity(n, resource.BinarySI)
		}
	}
	if cpuStr != "" {
		nano, err := config.ParseCPU(cpuStr)
		if err != nil {
			return rr, fmt.Errorf("\"cpu\": %v", err)
		}
		if nano > 0 {
			list[corev1.ResourceCPU] = *resource.NewMilliQuantity((nano+500_000)/1_000_000, resource.DecimalSI)
		}
	}
	if len(list) > 0 {
		rr.Requests, rr.Limits = list, list.DeepCopy()
	}
	return rr, nil
}

// addMemoryVolume mounts a memory-backed emptyDir of at most size bytes
// (none: 0) at dir: Docker's shm-size and tmpfs on Kubernetes.
func addMemoryVolume(pod *corev1.Pod, c *corev1.Container, name, dir string, size int64) {
	ed := &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory}
	if size > 0 {
		ed.SizeLimit = resource.NewQuantity(size, resource.BinarySI)
	}
	pod.Spec.Volumes = append(pod.Spec.Volumes, corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{EmptyDir: ed}})
	c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: name, MountPath: dir})
}

// tmpfsSize reads the size= of Docker's tmpfs options ("size=128m,mode=1777").
func tmpfsSize(opts string) (int64, error) {
	for _, o := range strings.Split(opts, ",") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(o), "size="); ok {
			return config.ParseMem(v)
		}
	}
	return 0, nil
}

// addHostVolume mounts a browsers.json "volumes" bind ("/host:/container" or
// "/host:/container:ro") as a hostPath volume of the node the pod runs on.
func addHostVolume(pod *corev1.Pod, c *corev1.Container, name, bind string) error {
	parts := strings.Split(bind, ":")
	if len(parts) < 2 || len(parts) > 3 || !strings.HasPrefix(parts[0], "/") || !strings.HasPrefix(parts[1], "/") {
		return fmt.Errorf("\"volumes\" %q is not /host/path:/container/path[:ro]; named volumes are Docker's and have no meaning on Kubernetes", bind)
	}
	pod.Spec.Volumes = append(pod.Spec.Volumes, corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: parts[0]}}})
	c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: name, MountPath: parts[1], ReadOnly: len(parts) == 3 && parts[2] == "ro"})
	return nil
}

// hostAliases turns Docker's "host:ip" extra hosts into the pod's
// hostAliases, one per address in the order first named.
func hostAliases(entries []string) ([]corev1.HostAlias, error) {
	var out []corev1.HostAlias
	at := map[string]int{}
	for _, e := range entries {
		host, ip, ok := strings.Cut(e, ":")
		if !ok || host == "" || ip == "" {
			return nil, fmt.Errorf("hosts entry %q is not host:ip", e)
		}
		if len(validation.IsValidIPForLegacyField(nil, ip, true, nil)) > 0 {
			return nil, fmt.Errorf("hosts entry %q: %q is not an IP address (Kubernetes' hostAliases take addresses only)", e, ip)
		}
		if k, ok := at[ip]; ok {
			out[k].Hostnames = append(out[k].Hostnames, host)
			continue
		}
		at[ip] = len(out)
		out = append(out, corev1.HostAlias{IP: ip, Hostnames: []string{host}})
	}
	return out, nil
}

func portOf(b *config.Browser) string {
	if b.Port != "" {
		return b.Port
	}
	return "4444"
}
