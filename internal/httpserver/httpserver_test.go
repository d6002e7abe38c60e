package httpserver

import (
	"bufio"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// serve runs a server for h on loopback; it is shut down with the test.
func serve(t *testing.T, opts Options, h http.Handler) (*Server, string) {
	t.Helper()
	s, err := New(opts, h, nil)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go s.Serve(ln)
	t.Cleanup(func() { s.srv.Close() })
	return s, ln.Addr().String()
}

// echoBody reads the whole body and answers 200, or 400 when it cannot.
var echoBody = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	if _, err := io.ReadAll(r.Body); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	fmt.Fprint(w, "ok")
})

// A body sent a byte at a time is cut at -body-read-timeout; a body that
// arrives in time is served, and the wait after it is not cut.
func TestBodyReadTimeout(t *testing.T) {
	waited := make(chan struct{})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := io.ReadAll(r.Body); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if r.URL.Path == "/wait" { // as a queued request: waits longer than the body timeout
			time.Sleep(600 * time.Millisecond)
			close(waited)
		}
		fmt.Fprint(w, "ok")
	})
	_, addr := serve(t, Options{BodyTimeout: 300 * time.Millisecond}, h)
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprint(c, "POST /slow HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{")
	start := time.Now()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err == nil {
		resp.Body.Close()
	}
	if took := time.Since(start); took > 5*time.Second || err == nil && resp.StatusCode != 400 {
		t.Fatalf("slow body: %v %v after %v", resp, err, took)
	}
	r, err := http.Post("http://"+addr+"/wait", "application/json", strings.NewReader(`{"capabilities":{}}`))
	if err != nil || r.StatusCode != 200 {
		t.Fatalf("a whole body followed by a long wait: %v %v", r, err)
	}
	r.Body.Close()
	<-waited
}

// A handler that makes a body wait before reading it (the hub's upload
// budget) restarts its clock: the body then has the whole -body-read-timeout
// from that moment, not what the wait left of it.
func TestBodyTimeoutRestarted(t *testing.T) {
	restarted := make(chan struct{})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(3500 * time.Millisecond) // the wait: longer than the timeout
		r.Body.(interface{ RestartTimeout() }).RestartTimeout()
		close(restarted)
		if _, err := io.ReadAll(r.Body); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		fmt.Fprint(w, "ok")
	})
	// 3 s: the two bytes sent after the restart have that long to arrive,
	// which no load eats.
	_, addr := serve(t, Options{BodyTimeout: 3 * time.Second}, h)
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprint(c, "POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n")
	<-restarted
	fmt.Fprint(c, "{}") // the body, once the handler reads
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("a body sent after the wait: %v %v", resp, err)
	}
	resp.Body.Close()
}

// A body read whole has no clock left to restart: a handler that then waits
// for something else (the hub's parse budget, the queue) with the
// connection watched is not cut at BodyTimeout, nor its client taken for gone.
func TestNoTimeoutAfterTheBody(t *testing.T) {
	answer := make(chan string, 1)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.ReadAll(r.Body)
		clock := r.Body.(interface {
			PauseTimeout()
			RestartTimeout()
		})
		clock.PauseTimeout()
		clock.RestartTimeout()
		// Three timeouts: a deadline set by the restart would have ended the
		// request's context by then, however loaded the machine.
		select {
		case <-r.Context().Done():
			answer <- "the request was cut"
		case <-time.After(3 * time.Second):
			answer <- "ok"
		}
		fmt.Fprint(w, "ok")
	})
	_, addr := serve(t, Options{BodyTimeout: time.Second}, h)
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprint(c, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}")
	if got := <-answer; got != "ok" {
		t.Fatal(got)
	}
}

// An idle keep-alive connection is closed at -idle-connection-timeout.
func TestIdleConnectionsAreClosed(t *testing.T) {
	_, addr := serve(t, Options{IdleTimeout: 200 * time.Millisecond}, echoBody)
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprint(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := br.ReadByte(); err != io.EOF {
		t.Fatalf("idle connection not closed by the server: %v", err)
	}
}

// Near the descriptor limit, idle and trickling connections are shed; a new
// request is served and a request already waiting (its body read) is kept.
func TestShedsIdleAndSlowNearTheLimit(t *testing.T) {
	release := make(chan struct{})
	var waiting sync.WaitGroup
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := io.ReadAll(r.Body); err != nil {
			return
		}
		if r.URL.Path == "/queued" {
			waiting.Done()
			<-release
		}
		fmt.Fprint(w, "ok")
	})
	s, addr := serve(t, Options{FileLimit: 24, Reserve: 10}, h) // as if the process could open 24

	waiting.Add(1)
	queued := make(chan error, 1)
	go func() {
		r, err := http.Post("http://"+addr+"/queued", "application/json", strings.NewReader("{}"))
		if err == nil {
			r.Body.Close()
		}
		queued <- err
	}()
	waiting.Wait()
	var held []net.Conn
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	for i := range 24 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
		c.SetReadDeadline(time.Now().Add(time.Minute)) // a broken server's bound, not a margin
		if i%2 == 0 {
			fmt.Fprint(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n") // answered, then idle
		} else {
			// Trickles: its handler is reading the body once the server
			// has said 100 Continue.
			fmt.Fprint(c, "POST / HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 100\r\n\r\n")
		}
		// The server has the connection where the test wants it: its
		// answer, or the 100 (a connection shed meanwhile, idle, is as
		// good).
		if line, err := bufio.NewReader(c).ReadString('\n'); err == nil && !strings.HasPrefix(line, "HTTP/1.1 ") {
			t.Fatalf("connection %d: %q", i, line)
		}
		if i%2 == 1 {
			fmt.Fprint(c, "{")
		}
	}
	// Shedding spares the first second of a trickle: the connections are
	// made older than that, rather than waited out (a wait load can eat).
	s.mu.Lock()
	for _, c := range s.conns {
		c.since, c.readAt = c.since.Add(-2*time.Second), c.readAt.Add(-2*time.Second)
	}
	s.mu.Unlock()
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	r, err := client.Get("http://" + addr + "/status")
	if err != nil || r.StatusCode != 200 {
		t.Fatalf("/status near the limit: %v %v", r, err)
	}
	r.Body.Close()
	s.mu.Lock()
	n := len(s.conns)
	s.mu.Unlock()
	if n > 3 {
		t.Fatalf("%d connections left after shedding", n)
	}
	close(release)
	if err := <-queued; err != nil {
		t.Fatalf("a queued request was shed: %v", err)
	}
}

func TestInstanceLock(t *testing.T) {
	name := fmt.Sprintf("test-%d", os.Getpid())
	l, err := LockInstance(name)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := LockInstance(name); err == nil || !strings.Contains(err.Error(), "another hub with -instance") {
		t.Fatalf("second lock: %v", err)
	}
	other, err := LockInstance(name + "-other")
	if err != nil {
		t.Fatalf("another name: %v", err)
	}
	other.Release()
	l.Release()
	if l, err = LockInstance(name); err != nil {
		t.Fatalf("after release: %v", err)
	}
	l.Release()
}

func TestTLS(t *testing.T) {
	dir := t.TempDir()
	cert, key, pool := selfSigned(t, dir)
	if _, err := New(Options{TLSCert: cert}, echoBody, nil); err == nil || !strings.Contains(err.Error(), "go together") {
		t.Fatalf("cert without key: %v", err)
	}
	if _, err := New(Options{TLSCert: key, TLSKey: key}, echoBody, nil); err == nil || !strings.Contains(err.Error(), "-tls-cert") {
		t.Fatalf("bad cert: %v", err)
	}
	_, addr := serve(t, Options{TLSCert: cert, TLSKey: key}, echoBody)
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	r, err := client.Get("https://" + addr + "/")
	if err != nil || r.StatusCode != 200 {
		t.Fatalf("HTTPS: %v %v", r, err)
	}
	r.Body.Close()
}

func selfSigned(t *testing.T, dir string) (certFile, keyFile string, pool *x509.CertPool) {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k)
	if err != nil {
		t.Fatal(err)
	}
	kder, _ := x509.MarshalECPrivateKey(k)
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600)
	os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600)
	c, _ := x509.ParseCertificate(der)
	pool = x509.NewCertPool()
	pool.AddCert(c)
	return certFile, keyFile, pool
}

// reholding answers /hijack by hand on the hijacked connection and hands the
// connection back with Rehold (or closes it when Rehold is nil); other paths
// answer "next" as any handler does.
var reholding = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/hijack" {
		fmt.Fprint(w, "next")
		return
	}
	rehold := Rehold(r.Context())
	c, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		panic(err)
	}
	if rehold == nil {
		fmt.Fprint(c, "HTTP/1.1 200 OK\r\nContent-Length: 6\r\nConnection: close\r\n\r\nclosed")
		c.Close()
		return
	}
	fmt.Fprint(c, "HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nkept")
	rehold(c)
})

// A connection hijacked and handed back with Rehold serves the client's next
// request, and is then an idle keep-alive connection like any (closed after
// IdleTimeout); over TLS, or from another server, Rehold is nil.
func TestReholdServesTheNextRequest(t *testing.T) {
	_, addr := serve(t, Options{IdleTimeout: 300 * time.Millisecond}, reholding)
	// A connection that sends nothing, held by the gate throughout, as on a
	// busy hub: the gate's watcher keeps its epoll set, which still holds the
	// fired registration of a connection handed back.
	silent, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	br := bufio.NewReader(c)
	get := func(path string) string {
		t.Helper()
		fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: x\r\n\r\n", path)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("GET %s on the same connection: %v", path, err)
		}
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	if got := get("/hijack"); got != "kept" {
		t.Fatalf("the hijacked answer: %q", got)
	}
	if got := get("/next"); got != "next" {
		t.Fatalf("the next request on the handed-back connection: %q", got)
	}
	if got := get("/hijack"); got != "kept" { // handed back twice
		t.Fatalf("the second hijacked answer: %q", got)
	}
	// Handed back and then silent: closed after IdleTimeout, as any idle
	// keep-alive connection.
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := br.ReadByte(); err != io.EOF {
		t.Fatalf("a handed-back idle connection was not closed: %v", err)
	}

	// TLS: the gate hands the HTTP server raw connections, so no Rehold.
	cert, key, pool := selfSigned(t, t.TempDir())
	_, tlsAddr := serve(t, Options{TLSCert: cert, TLSKey: key}, reholding)
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	resp, err := client.Get("https://" + tlsAddr + "/hijack")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(b) != "closed" {
		t.Fatalf("over TLS the handler got a Rehold (answered %q)", b)
	}
	// Another server: no Rehold.
	other := httptest.NewServer(reholding)
	defer other.Close()
	resp, err = http.Get(other.URL + "/hijack")
	if err != nil {
		t.Fatal(err)
	}
	b, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(b) != "closed" {
		t.Fatalf("a request of another server got a Rehold (answered %q)", b)
	}
}

// A body read to its end after its handler returned (a Transport still
// writing it to a driver that answered early) sets no deadline then: over
// HTTP/2 the stream's writer is gone, and the deadline crashed the server.
func TestBodyEndAfterTheHandlerOverHTTP2(t *testing.T) {
	cert, key, pool := selfSigned(t, t.TempDir())
	bodies := make(chan io.Reader, 1)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		bodies <- r.Body
		fmt.Fprint(w, "early")
	})
	_, addr := serve(t, Options{TLSCert: cert, TLSKey: key}, h)
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, ForceAttemptHTTP2: true}}
	for range 10 {
		r, err := client.Post("https://"+addr+"/", "text/plain", strings.NewReader("body"))
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, r.Body) // the whole answer: the handler has returned
		r.Body.Close()
		if r.ProtoMajor != 2 {
			t.Fatalf("%s, want HTTP/2", r.Proto)
		}
		io.ReadAll(<-bodies) // its result is net/http's; the server must outlive it
	}
	r, err := client.Get("https://" + addr + "/")
	if err != nil {
		t.Fatalf("after the late reads: %v", err)
	}
	r.Body.Close()
}
