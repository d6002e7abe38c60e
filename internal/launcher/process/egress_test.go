package process

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/websummoner/websummoner/internal/config"
	"github.com/websummoner/websummoner/internal/egress"
	"github.com/websummoner/websummoner/internal/launcher"
	"github.com/websummoner/websummoner/internal/netns"
)

// egressDriverEnv makes this test binary the sandboxed "driver" of
// TestSandboxEgress: a WebDriver /status, and requests the test asks it to
// make from inside its sandbox.
const egressDriverEnv = "PROCESS_TEST_EGRESS_DRIVER"

// egressDriver serves, on the --port it is given in its sandbox:
//
//	/status           ready, as a driver is
//	/get?url=U        GET U through the sandbox's proxy: "status\nbody"
//	/connect?dest=D   CONNECT D through it, "ping" sent with the request and
//	                  read back: "status\nwhat came back"
//	/direct?addr=A    a TCP connection to A without the proxy
//	/env              the proxy variables it was given
func egressDriver() int {
	port := ""
	for _, a := range os.Args[1:] {
		if p, ok := strings.CutPrefix(a, "--port="); ok {
			port = p
		}
	}
	proxy := "127.0.0.1:" + strconv.Itoa(egress.Port)
	proxyURL := &url.URL{Scheme: "http", Host: proxy}
	client := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(proxyURL)}, Timeout: time.Minute}
	mux := http.NewServeMux()
	mux.HandleFunc("/status", func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, `{"value":{"ready":true,"message":"egress test driver"}}`)
	})
	mux.HandleFunc("/get", func(w http.ResponseWriter, r *http.Request) {
		resp, err := client.Get(r.URL.Query().Get("url"))
		if err != nil {
			fmt.Fprintf(w, "error\n%v", err)
			return
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		fmt.Fprintf(w, "%d\n%s", resp.StatusCode, b)
	})
	mux.HandleFunc("/connect", func(w http.ResponseWriter, r *http.Request) {
		dest := r.URL.Query().Get("dest")
		c, err := net.DialTimeout("tcp", proxy, 5*time.Second)
		if err != nil {
			fmt.Fprintf(w, "error\n%v", err)
			return
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(time.Minute))
		fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %[1]s\r\n\r\nping", dest)
		br := bufio.NewReader(c)
		resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
		if err != nil {
			fmt.Fprintf(w, "error\n%v", err)
			return
		}
		if resp.StatusCode != 200 {
			b, _ := io.ReadAll(resp.Body)
			fmt.Fprintf(w, "%d\n%s", resp.StatusCode, b)
			return
		}
		b := make([]byte, 4)
		_, err = io.ReadFull(br, b)
		fmt.Fprintf(w, "%d\n%s%v", resp.StatusCode, b, err)
	})
	mux.HandleFunc("/direct", func(w http.ResponseWriter, r *http.Request) {
		c, err := net.DialTimeout("tcp", r.URL.Query().Get("addr"), 5*time.Second)
		if err != nil {
			fmt.Fprintf(w, "error\n%v", err)
			return
		}
		c.Close()
		io.WriteString(w, "connected")
	})
	mux.HandleFunc("/env", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "%s %s", os.Getenv("all_proxy"), os.Getenv("no_proxy"))
	})
	if err := http.ListenAndServe("127.0.0.1:"+port, mux); err != nil {
		fmt.Fprintln(os.Stderr, err)
	}
	return 1
}

// The sandbox's way out, with real sandboxes: a process in one fetches a
// page from the host's loopback and opens a CONNECT tunnel to the host
// through its proxy, and has no other way out; it is refused (403, saying
// why) another sandbox's address and a Docker bridge's (the host's docker0
// when there is one, and a bridge network the test adds to the host's).
// After Stop, no proxy listener, goroutine or process is left.
func TestSandboxEgress(t *testing.T) {
	dial := netns.New(net.Dialer{Timeout: 5 * time.Second})
	sbx, err := NewSandbox(dial)
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("CI installs bubblewrap (scripts/deps.sh), so the sandbox must work: %v", err)
		}
		t.Skipf("no sandbox on this machine: %v", err)
	}
	bridge := egress.Network{Prefix: netip.MustParsePrefix("198.51.100.0/24"), Interface: "br-test"}
	sbx.Egress = &egress.Guard{Attached: func() ([]egress.Network, error) {
		nets, err := egress.AttachedNetworks()
		return append(nets, bridge), err
	}}
	// The driver is this test binary, beside the stub, where the sandbox's
	// user can run it.
	dir := filepath.Dir(stub)
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	driver := filepath.Join(dir, "egress-driver")
	if err := copyFile(self, driver); err != nil {
		t.Fatal(err)
	}
	page := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "page from the host's loopback")
	}))
	defer page.Close()
	echo, stopEcho := echoServer(t)
	defer stopEcho()

	tr := &http.Transport{DialContext: dial.DialContext}
	defer tr.CloseIdleConnections()
	l := newLauncher(t, Options{Options: launcher.Options{ReadyTransport: tr}, Sandbox: sbx, DownloadDir: t.TempDir()})
	defer l.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b := config.Resolved{Name: "egress", Version: "1", Browser: &config.Browser{
		Image: config.Image{Command: []string{driver}}, Path: "/", Env: []string{egressDriverEnv + "=1"}}}
	var insts []*instance
	for i := range 2 {
		inst, err := l.Start(ctx, launcher.Request{ID: "egress", Browser: b})
		if err != nil {
			t.Fatalf("start %d: %v", i, err)
		}
		defer inst.Stop(context.Background())
		insts = append(insts, inst.(*instance))
	}
	a, other := insts[0], insts[1]
	ask := func(path string, q url.Values) (string, string) {
		t.Helper()
		// Above the sandboxed process's own bounds (a minute): its answer,
		// even a timeout, comes first.
		resp, err := (&http.Client{Transport: tr, Timeout: 2 * time.Minute}).Get(a.endpoints.Driver.String() + path + "?" + q.Encode())
		if err != nil {
			t.Fatalf("asking the sandboxed process for %s: %v", path, err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		status, rest, _ := strings.Cut(string(body), "\n")
		return status, rest
	}
	if env, _ := ask("/env", nil); env != "http://127.0.0.1:3128 <-loopback>" {
		t.Errorf("the driver's proxy variables: %q", env)
	}
	if status, body := ask("/get", url.Values{"url": {page.URL + "/"}}); status != "200" || body != "page from the host's loopback" {
		t.Errorf("a page on the host's loopback, through the proxy: %s %q", status, body)
	}
	if status, body := ask("/connect", url.Values{"dest": {echo}}); status != "200" || body != "ping<nil>" {
		t.Errorf("CONNECT to the host's loopback: %s %q", status, body)
	}
	if status, body := ask("/direct", url.Values{"addr": {page.Listener.Addr().String()}}); status != "error" {
		t.Errorf("the host's loopback without the proxy: %s %q", status, body)
	}
	otherDriver := other.endpoints.Driver.Host // 127.100.x.y:9515
	refused := []struct{ dest, why string }{
		{otherDriver, "sandbox"},
		{net.JoinHostPort(a.sandbox.String(), strconv.Itoa(egress.Port)), "sandbox"},
		{"198.51.100.7:4444", "br-test"},
	}
	if d0, err := net.InterfaceByName("docker0"); err == nil {
		if addrs, _ := d0.Addrs(); len(addrs) > 0 {
			ip, _, _ := net.ParseCIDR(addrs[0].String())
			refused = append(refused, struct{ dest, why string }{net.JoinHostPort(ip.String(), "4444"), "docker0"})
		}
	}
	for _, r := range refused {
		if status, body := ask("/get", url.Values{"url": {"http://" + r.dest + "/status"}}); status != "403" || !strings.Contains(body, r.why) {
			t.Errorf("GET http://%s through the proxy: %s %q, want 403 naming %s", r.dest, status, body, r.why)
		}
		if status, body := ask("/connect", url.Values{"dest": {r.dest}}); status != "403" || !strings.Contains(body, r.why) {
			t.Errorf("CONNECT %s: %s %q, want 403 naming %s", r.dest, status, body, r.why)
		}
	}

	// The proxy's listener, as the sandbox's namespace lists it.
	child, err := netns.Child(ctx, a.pid)
	if err != nil {
		t.Fatal(err)
	}
	inode := listenerInode(t, child, egress.Port)
	if inode == 0 {
		t.Fatalf("no listener on 127.0.0.1:%d in the sandbox's namespace", egress.Port)
	}
	if !holdsSocket(os.Getpid(), inode) {
		t.Fatalf("the hub holds no socket:[%d]: the check below would prove nothing", inode)
	}
	for i, inst := range insts {
		if err := inst.Stop(context.Background()); err != nil {
			t.Fatalf("stop %d: %v", i, err)
		}
	}
	tr.CloseIdleConnections()
	if holdsSocket(os.Getpid(), inode) {
		t.Errorf("the proxy's listener (socket:[%d]) is still open after Stop", inode)
	}
	// Stop returns once the proxy's handlers have; a tunnel's second
	// goroutine ends a few instructions after handing its result over.
	for deadline := time.Now().Add(10 * time.Second); egressStacks() > 0; runtime.Gosched() {
		if time.Now().After(deadline) {
			t.Errorf("goroutines of the sandboxes' proxies left 10s after Stop: %d frames", egressStacks())
			break
		}
	}
	if left := MarkedPIDs(func(v string) bool { return strings.HasPrefix(v, l.markerPrefix()) }); len(left) > 0 {
		t.Errorf("processes left: %v", left)
	}
}

// listenerInode is the inode of the socket listening on 127.0.0.1:port in
// the network namespace of process pid, from its /proc/net/tcp.
func listenerInode(t *testing.T, pid, port int) uint64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/net/tcp", pid))
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("0100007F:%04X", port)
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) > 9 && f[1] == want && f[3] == "0A" { // TCP_LISTEN
			n, _ := strconv.ParseUint(f[9], 10, 64)
			return n
		}
	}
	return 0
}

// egressStacks counts the stack frames of the proxies' code, in every
// goroutine.
func egressStacks() int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	return strings.Count(string(buf), "internal/egress.")
}

func copyFile(from, to string) error {
	b, err := os.ReadFile(from)
	if err != nil {
		return err
	}
	return os.WriteFile(to, b, 0o755)
}

// echoServer echoes what each connection sends.
func echoServer(t *testing.T) (string, func()) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { io.Copy(c, c); c.Close() }()
		}
	}()
	return ln.Addr().String(), func() { ln.Close() }
}
