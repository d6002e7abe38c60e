package egress

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// A bridge of the test's own, standing for docker0 or a session's network.
var testBridge = Network{Prefix: netip.MustParsePrefix("198.51.100.0/24"), Interface: "br-test"}

func fixedAttached() ([]Network, error) { return []Network{testBridge}, nil }

// The rule, address by address.
func TestCheck(t *testing.T) {
	ports := &PortSet{}
	ports.Add(32770)
	ports.AddHosts(netip.MustParseAddr("192.0.2.50"), netip.MustParseAddr("2001:db8::50")) // a Docker engine on another host
	g := &Guard{Ports: ports}
	attached := []Network{testBridge, {Prefix: netip.MustParsePrefix("fd12:3456::/64"), Interface: "br-v6"}}
	for _, c := range []struct {
		ip      string
		port    uint16
		refused string // a word of the reason; "" allowed
	}{
		{"127.0.0.1", 8080, ""},
		{"127.0.0.2", 8080, ""},
		{"::1", 8080, ""},
		{"192.0.2.10", 443, ""},  // routed
		{"2001:db8::1", 443, ""}, // routed
		{"198.51.101.1", 80, ""}, // beside the bridge
		{"127.100.0.1", 9515, "sandbox"},
		{"127.100.255.254", 3128, "sandbox"},
		{"::ffff:127.100.0.7", 9515, "sandbox"},
		{"198.51.100.2", 4444, "br-test"},
		{"198.51.100.1", 80, "br-test"}, // the host's own address on it
		{"::ffff:198.51.100.2", 4444, "br-test"},
		{"fd12:3456::2", 4444, "br-v6"},
		{"169.254.169.254", 80, "link-local"},
		{"fe80::1", 80, "link-local"},
		{"0.0.0.0", 80, "one host"},
		{"224.0.0.1", 80, "one host"},
		{"255.255.255.255", 80, "one host"},
		{"127.0.0.1", 32770, "Docker session"},
		{"::1", 32770, "Docker session"},
		{"192.0.2.50", 443, "Docker engine"},
		{"::ffff:192.0.2.50", 32770, "Docker engine"},
		{"2001:db8::50", 8080, "Docker engine"},
		{"2001:db8::50%lo", 8080, "Docker engine"},
		{"192.0.2.51", 443, ""},
	} {
		err := g.Check(netip.MustParseAddr(c.ip), c.port, attached)
		switch {
		case c.refused == "" && err != nil:
			t.Errorf("%s:%d refused: %v", c.ip, c.port, err)
		case c.refused != "" && (err == nil || !strings.Contains(err.Error(), c.refused)):
			t.Errorf("%s:%d: %v, want refused as %q", c.ip, c.port, err, c.refused)
		}
	}
	ports.Remove(32770)
	if err := g.Check(netip.MustParseAddr("127.0.0.1"), 32770, nil); err != nil {
		t.Errorf("a port no Docker session publishes any more: %v", err)
	}
}

// Which interfaces' networks are refused: every one but loopback and those
// with a default route, from what the kernel's tables say.
func TestAttachedRule(t *testing.T) {
	route4 := `Iface	Destination	Gateway 	Flags	RefCnt	Use	Metric	Mask		MTU	Window	IRTT
eth0	00000000	010200C0	0003	0	0	0	00000000	0	0	0
docker0	000011AC	00000000	0001	0	0	0	0000FFFF	0	0	0
eth0	000200C0	00000000	0001	0	0	0	00FFFFFF	0	0	0
`
	route6 := `fd000000000000000000000000000000 40 00000000000000000000000000000000 00 00000000000000000000000000000000 00000100 00000001 00000000 00000001     eth0
00000000000000000000000000000000 00 00000000000000000000000000000000 00 fd000000000000000000000000000001 00000400 00000003 00000000 00000003     wg0
00000000000000000000000000000000 00 00000000000000000000000000000000 00 00000000000000000000000000000000 ffffffff 00000001 00000000 00200200       br-dead
`
	defaults := map[string]bool{}
	defaultRoutes4([]byte(route4), defaults)
	defaultRoutes6([]byte(route6), defaults)
	if !defaults["eth0"] || !defaults["wg0"] || defaults["docker0"] || defaults["br-dead"] || len(defaults) != 2 {
		t.Fatalf("default-route interfaces: %v, want eth0 (IPv4) and wg0 (IPv6); a reject route is none", defaults)
	}
	links := []net.Interface{
		{Index: 1, Name: "lo", Flags: net.FlagLoopback | net.FlagUp},
		{Index: 2, Name: "eth0", Flags: net.FlagUp},
		{Index: 3, Name: "docker0"},
		{Index: 4, Name: "br-0123", Flags: net.FlagUp},
		{Index: 5, Name: "wg0", Flags: net.FlagUp},
		{Index: 6, Name: "br-dead", Flags: net.FlagUp},
	}
	p := netip.MustParsePrefix
	addrs := []ifaceAddr{
		{1, p("127.0.0.1/8")}, {1, p("::1/128")},
		{2, p("192.0.2.2/24")}, {2, p("fd00::2/64")},
		{3, p("172.17.0.1/16")},
		{4, p("172.18.0.1/16")}, {4, p("fd99::1/64")},
		{5, p("10.9.0.2/24")},
		{6, p("172.19.0.1/16")},
		{7, p("172.20.0.1/16")}, // an interface newer than the list of links
	}
	got := map[string]string{}
	for _, n := range attached(links, addrs, defaults) {
		got[n.Prefix.String()] = n.Interface
	}
	want := map[string]string{"172.17.0.0/16": "docker0", "172.18.0.0/16": "br-0123", "fd99::/64": "br-0123",
		"172.19.0.0/16": "br-dead", "172.20.0.0/16": "interface 7"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("attached networks %v, want %v", got, want)
	}
}

// On this host: Docker's bridge, when there is one, is refused; the networks
// of the default route and loopback are not.
func TestAttachedNetworksHere(t *testing.T) {
	nets, err := AttachedNetworks()
	if err != nil {
		t.Fatal(err)
	}
	defaults := map[string]bool{}
	b4, _ := os.ReadFile("/proc/net/route")
	b6, _ := os.ReadFile("/proc/net/ipv6_route")
	defaultRoutes4(b4, defaults)
	defaultRoutes6(b6, defaults)
	for _, n := range nets {
		if defaults[n.Interface] || n.Prefix.Addr().IsLoopback() {
			t.Errorf("%v of %s is refused: it is loopback or the way out", n.Prefix, n.Interface)
		}
	}
	d0, err := net.InterfaceByName("docker0")
	if err != nil {
		t.Logf("no docker0 here: only the rule's other half is checked")
		return
	}
	addrs, _ := d0.Addrs()
	for _, a := range addrs {
		ip, _ := netip.ParseAddr(strings.Split(a.String(), "/")[0])
		g := &Guard{}
		err := g.Check(ip, 4444, nets)
		// A link-local address (docker0 has one while a container is
		// attached) is refused as link-local, whatever interface holds it.
		if err == nil || !ip.IsLinkLocalUnicast() && !strings.Contains(err.Error(), "docker0") {
			t.Errorf("docker0's %v: %v, want refused", ip, err)
		}
	}
}

// proxyFor serves a proxy on the host's loopback, for the tests that need
// no sandbox; it is closed at the test's end.
func proxyFor(t *testing.T, g *Guard) (*Proxy, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := Serve(ln, g)
	t.Cleanup(func() { p.Close() })
	return p, ln.Addr().String()
}

// Through the proxy: a page on the host's loopback, a CONNECT tunnel (with
// the bytes the client sends right behind its CONNECT), and 403s, with a
// body that says why, for a sandbox's address and a bridge's, asked by
// address or by a name that resolves there; a name is resolved once and the
// address checked is the one dialled.
func TestProxy(t *testing.T) {
	page := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "page %s via=%q", r.URL.Path, r.Header.Get("X-Forwarded-For"))
	}))
	defer page.Close()
	echo := echoServer(t)
	var lookups atomic.Int32
	g := &Guard{Attached: fixedAttached, Lookup: func(_ context.Context, host string) ([]netip.Addr, error) {
		n := lookups.Add(1)
		switch host {
		case "app.test":
			return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil
		case "rebind.test": // the first answer is checked and dialled; a later one never used
			if n == 1 {
				return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil
			}
			return []netip.Addr{netip.MustParseAddr("127.100.0.1")}, nil
		case "mixed.test":
			return []netip.Addr{netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("198.51.100.9")}, nil
		}
		return nil, errors.New("no such host")
	}}
	_, addr := proxyFor(t, g)
	proxyURL, _ := url.Parse("http://" + addr)
	client := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(proxyURL)}, Timeout: ioTimeout}
	defer client.CloseIdleConnections()
	get := func(u string) (int, string) {
		t.Helper()
		resp, err := client.Get(u)
		if err != nil {
			t.Fatalf("GET %s: %v", u, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	_, pagePort, _ := net.SplitHostPort(page.Listener.Addr().String())
	if code, body := get(page.URL + "/a"); code != 200 || body != `page /a via=""` {
		t.Fatalf("a page on the host's loopback: %d %q", code, body)
	}
	lookups.Store(0)
	if code, body := get("http://rebind.test:" + pagePort + "/b"); code != 200 || body != `page /b via=""` || lookups.Load() != 1 {
		t.Fatalf("by name: %d %q after %d lookups", code, body, lookups.Load())
	}
	for _, c := range []struct{ url, why string }{
		{"http://127.100.0.1:9515/status", "sandbox"},
		{"http://198.51.100.2:4444/status", "br-test"},
		{"http://mixed.test:" + pagePort + "/", "br-test"},
	} {
		if code, body := get(c.url); code != 403 || !strings.Contains(body, c.why) || !strings.Contains(body, "refuses") {
			t.Errorf("GET %s: %d %q, want 403 saying %q", c.url, code, body, c.why)
		}
	}
	if code, body := get("http://nowhere.test/"); code != 502 || !strings.Contains(body, "nowhere.test: the name does not resolve") {
		t.Errorf("an unknown name: %d %q", code, body)
	}

	// A page is told why in words, not the hub's own addresses and ports.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	unused := l.Addr().String()
	l.Close() // a port nothing listens on now
	if code, body := get("http://" + unused + "/"); code != 502 || !strings.Contains(body, "connection refused") || strings.Contains(body, "->") {
		t.Errorf("a port nothing listens on: %d %q", code, body)
	}

	// CONNECT, by hand: the client's first bytes ride with its request.
	c := dial(t, addr)
	defer c.Close()
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %[1]s\r\n\r\nhello", echo)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("CONNECT %s: %v %v", echo, resp, err)
	}
	fmt.Fprint(c, " world")
	got := make([]byte, len("hello world"))
	if _, err := io.ReadFull(br, got); err != nil || string(got) != "hello world" {
		t.Fatalf("through the tunnel: %q %v", got, err)
	}
	for _, dest := range []string{"127.100.0.1:9515", "198.51.100.2:443"} {
		resp, body := connect(t, addr, dest)
		if resp.StatusCode != 403 || !strings.Contains(body, "refuses "+dest) {
			t.Errorf("CONNECT %s: %d %q, want 403", dest, resp.StatusCode, body)
		}
	}
	// An origin-form request is not for a proxy.
	if resp, err := (&http.Client{Timeout: ioTimeout}).Get("http://" + addr + "/x"); err != nil || resp.StatusCode != 400 {
		t.Errorf("a request for the proxy itself: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}
}

func connect(t *testing.T, proxy, dest string) (*http.Response, string) {
	t.Helper()
	c := dial(t, proxy)
	defer c.Close()
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %[1]s\r\n\r\n", dest)
	resp, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: http.MethodConnect})
	if err != nil {
		t.Fatalf("CONNECT %s: %v", dest, err)
	}
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// echoServer echoes each connection's bytes back, half-closing when the
// client does.
func echoServer(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				io.Copy(c, c)
				c.Close()
			}()
		}
	}()
	return ln.Addr().String()
}

// Close ends open tunnels and keep-alive connections, and returns once the
// goroutines that served them have: none of the proxy's is left, nor its
// listener.
func TestCloseLeavesNothing(t *testing.T) {
	echo := echoServer(t)
	page := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	defer page.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	p := Serve(ln, &Guard{Attached: fixedAttached})
	var tunnels []net.Conn
	for range 3 {
		c := dial(t, addr)
		defer c.Close()
		fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %[1]s\r\n\r\n", echo)
		if resp, err := http.ReadResponse(bufio.NewReader(c), nil); err != nil || resp.StatusCode != 200 {
			t.Fatalf("CONNECT: %v %v", resp, err)
		}
		tunnels = append(tunnels, c)
	}
	proxyURL, _ := url.Parse("http://" + addr)
	tr := &http.Transport{Proxy: http.ProxyURL(proxyURL)}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr, Timeout: ioTimeout}).Get(page.URL)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close() // the connection stays open, idle
	// The accept loop and 3 tunnels at least.
	if n := proxyStacks(); n < 4 {
		t.Fatalf("%d goroutines of the proxy's while it serves 3 tunnels: the count below would prove nothing", n)
	}
	closed := make(chan error, 1) // Close waits for the tunnels: one it missed would hang it
	go func() { closed <- p.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Fatalf("Close: %v", err)
		}
	case <-time.After(ioTimeout):
		t.Fatalf("Close did not return within %v", ioTimeout)
	}
	// Close waited for every handler; a tunnel's second goroutine ends a
	// moment after handing its result over.
	waitUntil(t, "the proxy's goroutines end", func() bool { return proxyStacks() == 0 })
	for i, c := range tunnels {
		// A tunnel left open would block here until dial's deadline: a
		// timeout is an open tunnel too.
		if _, err := c.Read(make([]byte, 1)); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
			t.Errorf("tunnel %d still open after Close (%v)", i, err)
		}
	}
	if c, err := net.Dial("tcp", addr); err == nil {
		c.Close()
		t.Error("the proxy's listener still accepts after Close")
	}
	if err := p.Close(); err != nil {
		t.Errorf("a second Close: %v", err)
	}
}

// proxyStacks counts the goroutines running the proxy's code, or started
// by it (the test's own functions are not counted).
func proxyStacks() int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	count := 0
	for _, g := range strings.Split(string(buf), "\n\n") {
		for _, f := range []string{"(*Proxy)", "(*Guard)", "(*limited)", "(*slotConn)", "relay", "pipe", "Serve"} {
			if strings.Contains(g, "internal/egress."+f) {
				count++
				break
			}
		}
	}
	return count
}

// waitUntil waits for cond, yielding the processor between looks; what it
// waits for is a goroutine's last instructions, not a timer.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(ioTimeout) // a bound for a hang, not a measure
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, ioTimeout)
		}
		runtime.Gosched()
	}
}

// ioTimeout bounds every network read of these tests on real sockets, so
// that a proxy that hangs fails its test instead of holding the suite; it is
// far above what any read needs on a busy machine.
const ioTimeout = time.Minute

// dial connects to addr with every read and write bounded by ioTimeout.
func dial(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, ioTimeout)
	if err != nil {
		t.Fatal(err)
	}
	c.SetDeadline(time.Now().Add(ioTimeout))
	return c
}

// At most MaxConns connections of a sandbox are served at once; the next
// waits, unaccepted, until one closes. (Pipes in a bubble: "waits" is every
// goroutine blocked, not a time.)
func TestConnectionCap(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ln := &pipeListener{conns: make(chan net.Conn), done: make(chan struct{})}
		p := Serve(ln, &Guard{Attached: fixedAttached})
		var clients []net.Conn
		for range MaxConns {
			c, s := net.Pipe()
			ln.conns <- s // returns once accepted
			clients = append(clients, c)
		}
		c, s := net.Pipe()
		go func() { ln.conns <- s }()
		synctest.Wait()
		if n := ln.accepted.Load(); n != MaxConns {
			t.Fatalf("%d connections accepted, want %d", n, MaxConns)
		}
		clients[0].Close() // the server sees the end and lets its slot go
		synctest.Wait()
		if n := ln.accepted.Load(); n != MaxConns+1 {
			t.Fatalf("after one closed: %d accepted, want %d", n, MaxConns+1)
		}
		// The newcomer is served as any.
		go fmt.Fprint(c, "GET /x HTTP/1.1\r\nHost: p\r\n\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil || resp.StatusCode != 400 {
			t.Fatalf("the connection let in: %v %v", resp, err)
		}
		c.Close()
		for _, c := range clients[1:] {
			c.Close()
		}
		p.Close()
	})
}

// A connection that sends no head is closed after headerTimeout.
func TestHeaderTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ln := &pipeListener{conns: make(chan net.Conn), done: make(chan struct{})}
		p := Serve(ln, &Guard{Attached: fixedAttached})
		defer p.Close()
		c, s := net.Pipe()
		ln.conns <- s
		start := time.Now()
		fmt.Fprint(c, "GET http://x/ HTTP/1.1\r\n") // and nothing more
		_, err := io.ReadAll(c)
		if took := time.Since(start); err != nil || took != headerTimeout {
			t.Fatalf("a head that never ends: closed after %v (%v), want %v", took, err, headerTimeout)
		}
	})
}

// A tunnel stays open while bytes pass either way, even one way only, and
// closes when nothing has passed for tunnelIdle.
func TestTunnelIdle(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		browser, a := net.Pipe()
		b, site := net.Pipe()
		done := make(chan struct{})
		start := time.Now()
		go func() { relay(a, b, tunnelIdle); close(done) }()
		go io.Copy(io.Discard, browser)
		// The site streams, a byte every half idle period, for three periods:
		// the browser's way is silent all along.
		for range 6 {
			time.Sleep(tunnelIdle / 2)
			if _, err := site.Write([]byte("x")); err != nil {
				t.Fatalf("the tunnel closed at %v with traffic flowing: %v", time.Since(start), err)
			}
		}
		last := time.Now()
		<-done
		if idle := time.Since(last); idle != tunnelIdle {
			t.Fatalf("closed %v after the last byte, want %v", idle, tunnelIdle)
		}
		if _, err := site.Write([]byte("x")); err == nil {
			t.Fatal("the site's end is still open")
		}
	})
}

// pipeListener hands the server in-memory connections.
type pipeListener struct {
	conns    chan net.Conn
	done     chan struct{}
	once     sync.Once
	accepted atomic.Int32
}

func (l *pipeListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		l.accepted.Add(1)
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *pipeListener) Close() error { l.once.Do(func() { close(l.done) }); return nil }

func (l *pipeListener) Addr() net.Addr { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: Port} }
