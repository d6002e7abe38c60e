package hub

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/websummoner/websummoner/internal/launcher"
	"github.com/websummoner/websummoner/internal/queue"
)

// stream is a side-channel request served in the bubble: done is closed when
// its handler returns, after which code and body may be read.
type stream struct {
	cancel context.CancelFunc
	done   chan struct{}
	rec    *httptest.ResponseRecorder
}

// openStream serves GET path from addr (a client's IP and port) on a goroutine,
// as a live-log viewer's streamed request.
func openStream(f *fixture, path, addr string) *stream {
	ctx, cancel := context.WithCancel(context.Background())
	req := httptest.NewRequest("GET", path, nil).WithContext(ctx)
	req.RemoteAddr = addr
	s := &stream{cancel: cancel, done: make(chan struct{}), rec: httptest.NewRecorder()}
	go func() {
		defer close(s.done)
		f.hub.ServeHTTP(s.rec, req)
	}()
	synctest.Wait()
	return s
}

// refusedWith says the stream was answered at once with a W3C 429 whose
// message names flag.
func (s *stream) refusedWith(t *testing.T, flag string) {
	t.Helper()
	select {
	case <-s.done:
	default:
		t.Fatalf("a side channel past the cap was opened; want 429 naming %s", flag)
	}
	var body map[string]any
	_ = json.Unmarshal(s.rec.Body.Bytes(), &body)
	if code, msg := errOf(body); s.rec.Code != http.StatusTooManyRequests || code == "" || !strings.Contains(msg, flag) {
		t.Fatalf("past the cap: %d %q %q, want 429 naming %s", s.rec.Code, code, msg, flag)
	}
}

func (s *stream) open(t *testing.T) {
	t.Helper()
	select {
	case <-s.done:
		t.Fatalf("a side channel within the caps was refused: %d %s", s.rec.Code, s.rec.Body)
	default:
	}
}

// Side channels are capped per session and per client (its IP address here),
// with a W3C 429 naming the flag to raise; a closed one gives its place back.
func TestSideChannelCaps(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := &stubLauncher{mem: newMemTransport(), sides: func(e *launcher.Endpoints) { e.Log = launcher.NewBroadcast() }}
		f := newFixture(t, queue.Options{Limit: 2}, Options{MaxSideChannelsPerSession: 2, MaxSideChannelsPerClient: 3}, l)
		var ids []string
		for range 2 {
			_, body := f.do("POST", "/session", w3cChrome)
			ids = append(ids, body["value"].(map[string]any)["sessionId"].(string))
		}
		a1, a2 := openStream(f, "/logs/"+ids[0], "192.0.2.1:1000"), openStream(f, "/logs/"+ids[0], "192.0.2.1:1001")
		a1.open(t)
		a2.open(t)
		openStream(f, "/logs/"+ids[0], "192.0.2.9:1000").refusedWith(t, "-max-side-channels-per-session")
		openStream(f, "/logs/"+ids[1], "192.0.2.1:1002").open(t)
		openStream(f, "/logs/"+ids[1], "192.0.2.1:1003").refusedWith(t, "-max-side-channels-per-client")
		openStream(f, "/logs/"+ids[1], "192.0.2.2:1000").open(t) // another client
		a1.cancel()
		<-a1.done
		openStream(f, "/logs/"+ids[0], "192.0.2.1:1004").open(t) // a1's place, given back, for the session and the client
		f.sess.EndAll("shutdown")
		synctest.Wait()
		f.hub.side.mu.Lock()
		left := len(f.hub.side.bySession) + len(f.hub.side.byClient)
		f.hub.side.mu.Unlock()
		if left != 0 {
			t.Fatalf("side channels still counted after every session ended: %v %v", f.hub.side.bySession, f.hub.side.byClient)
		}
	})
}

// A live-log viewer does not keep its session alive: with a viewer open the
// session still ends an idle timeout after its last command, and the stream
// with it.
func TestLogViewerDoesNotKeepSessionAlive(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := &stubLauncher{mem: newMemTransport(), sides: func(e *launcher.Endpoints) { e.Log = launcher.NewBroadcast() }}
		f := newFixture(t, queue.Options{Limit: 1}, Options{IdleTimeout: time.Minute}, l)
		_, body := f.do("POST", "/session", w3cChrome)
		id := body["value"].(map[string]any)["sessionId"].(string)
		view := openStream(f, "/logs/"+id, "192.0.2.1:1000")
		view.open(t)
		time.Sleep(61 * time.Second)
		synctest.Wait()
		if f.sess.Len() != 0 || f.q.Stats().InUse != 0 {
			t.Fatal("an open log view kept an idle session and its slot past the idle timeout")
		}
		select {
		case <-view.done:
		default:
			t.Fatal("the log stream outlived its session")
		}
	})
}

// upgrades answers a WebSocket request with 101 and a connection whose far
// end it hands to the test (a DevTools endpoint); other requests go on to next.
type upgrades struct {
	next  http.RoundTripper
	peers chan net.Conn
}

func (u upgrades) RoundTrip(r *http.Request) (*http.Response, error) {
	if !strings.EqualFold(r.Header.Get("Upgrade"), "websocket") {
		return u.next.RoundTrip(r)
	}
	near, far := net.Pipe()
	u.peers <- far
	h := http.Header{"Upgrade": {"websocket"}, "Connection": {"Upgrade"}}
	return &http.Response{StatusCode: http.StatusSwitchingProtocols, Header: h, Body: near, Request: r, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1}, nil
}

// devToolsSession is a fixture, in fake time, with one live session whose
// DevTools endpoint is in memory: each socket opened to it arrives on peers.
func devToolsSession(t *testing.T, opts Options) (*fixture, string, chan net.Conn) {
	dt, _ := url.Parse("http://devtools-1:7070")
	l := &stubLauncher{mem: newMemTransport(), sides: func(e *launcher.Endpoints) { e.DevTools = dt }}
	f := newFixture(t, queue.Options{Limit: 1}, opts, l)
	peers := make(chan net.Conn, 1)
	f.hub.opts.Transport = upgrades{next: l.mem, peers: peers}
	_, body := f.do("POST", "/session", w3cChrome)
	return f, body["value"].(map[string]any)["sessionId"].(string), peers
}

// openSocket asks the hub for a WebSocket on path (with the headers hdr, in
// pairs) over an in-memory connection: the client's end of it, and a channel
// closed when the handler has returned.
func openSocket(f *fixture, path string, hdr ...string) (net.Conn, <-chan struct{}) {
	client, server := net.Pipe()
	req := httptest.NewRequest("GET", path, nil)
	req.Header.Set("Upgrade", "websocket")
	req.Header.Set("Connection", "Upgrade")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	served := make(chan struct{})
	go func() {
		defer close(served)
		f.hub.ServeHTTP(hijackable{ResponseWriter: httptest.NewRecorder(), conn: server}, req)
	}()
	return client, served
}

// hijackable is a client's connection as the hub's handler sees it.
type hijackable struct {
	http.ResponseWriter
	conn net.Conn
}

func (h hijackable) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	return h.conn, bufio.NewReadWriter(bufio.NewReader(h.conn), bufio.NewWriter(h.conn)), nil
}

// A DevTools client that talks through its socket keeps its session alive
// (each message restarts the idle timer), but an open silent socket does not:
// the session ends an idle timeout after the last message, and the socket
// closes with it.
func TestDevToolsTrafficKeepsSessionAlive(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f, id, peers := devToolsSession(t, Options{IdleTimeout: time.Minute})

		client, served := openSocket(f, "/devtools/"+id+"/page/p-1")
		devtools := <-peers
		var mu sync.Mutex
		var got []byte
		go func() { // DevTools reads what the client sends
			buf := make([]byte, 64)
			for {
				n, err := devtools.Read(buf)
				mu.Lock()
				got = append(got, buf[:n]...)
				mu.Unlock()
				if err != nil {
					return
				}
			}
		}()
		clientGone := make(chan struct{})
		go func() { // the client reads the 101 and then until its socket closes
			_, _ = io.Copy(io.Discard, client)
			close(clientGone)
		}()
		for range 3 {
			time.Sleep(50 * time.Second)
			if _, err := client.Write([]byte("m")); err != nil {
				t.Fatalf("the socket closed while its client talked: %v", err)
			}
		}
		synctest.Wait()
		mu.Lock()
		through := string(got)
		mu.Unlock()
		if f.sess.Len() != 1 || through != "mmm" {
			t.Fatalf("a client messaging every 50 s through DevTools for 150 s of a 1 min idle timeout: %d sessions, DevTools got %q", f.sess.Len(), through)
		}
		time.Sleep(59 * time.Second)
		synctest.Wait()
		if f.sess.Len() != 1 {
			t.Fatal("the session ended less than an idle timeout after the last message")
		}
		time.Sleep(2 * time.Second)
		synctest.Wait()
		if f.sess.Len() != 0 {
			t.Fatal("an open silent DevTools socket kept its session past the idle timeout")
		}
		<-clientGone
		<-served
		client.Close()
		devtools.Close()
	})
}

// A WebSocket asked for through the command path (chromedriver serves BiDi at
// /session/{id} itself) is refused before the driver is asked: it would be a
// side channel counted nowhere, closed by nothing, holding the idle timer.
func TestNoUpgradeThroughTheCommandPath(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := &stubLauncher{mem: newMemTransport()}
		f := newFixture(t, queue.Options{Limit: 1}, Options{IdleTimeout: time.Minute}, l)
		peers := make(chan net.Conn, 4)
		f.hub.opts.Transport = upgrades{next: l.mem, peers: peers}
		f.hub.proxy.Transport = f.hub.opts.Transport
		_, body := f.do("POST", "/session", w3cChrome)
		id := body["value"].(map[string]any)["sessionId"].(string)
		for _, path := range []string{"/session/" + id, "/wd/hub/session/" + id + "/", "/session/" + id + "/url"} {
			client, server := net.Pipe()
			req := httptest.NewRequest("GET", path, nil)
			req.Header.Set("Upgrade", "websocket")
			req.Header.Set("Connection", "Upgrade")
			rec := httptest.NewRecorder()
			served := make(chan struct{})
			go func() {
				defer close(served)
				f.hub.ServeHTTP(hijackable{ResponseWriter: rec, conn: server}, req)
			}()
			synctest.Wait()
			client.Close()
			select {
			case <-served:
			default:
				t.Fatalf("%s: the upgrade was tunnelled to the driver", path)
			}
			if rec.Code != http.StatusNotFound || !strings.Contains(rec.Body.String(), `"unknown command"`) || !strings.Contains(rec.Body.String(), "/se/bidi") {
				t.Errorf("%s: %d %s", path, rec.Code, rec.Body)
			}
		}
		select {
		case <-peers:
			t.Fatal("an upgrade through the command path reached the driver")
		default:
		}
		// Java's HttpClient offers h2c on a new connection's first request:
		// the command goes on in HTTP/1.1, without the offer.
		resp, body := f.do("GET", "/session/"+id+"/url", "", "Connection", "Upgrade, HTTP2-Settings", "Upgrade", "h2c", "HTTP2-Settings", "AAMAAABkAARAAAAAAAIAAAAA")
		if resp.StatusCode != http.StatusOK {
			t.Errorf("a command offering h2c: %d %v", resp.StatusCode, body)
		}
		time.Sleep(61 * time.Second) // the refusals held nothing: the session idles out
		synctest.Wait()
		if f.sess.Len() != 0 {
			t.Fatal("the session outlived its idle timeout")
		}
	})
}

// A DevTools client that has stopped reading while its browser talks blocks
// the tunnel's write to it; the session's end still closes its connection,
// ends the handler and gives back its side-channel count.
func TestNonReadingSocketEndsWithItsSession(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f, id, peers := devToolsSession(t, Options{})

		client, served := openSocket(f, "/devtools/"+id+"/page/p-1")
		devtools := <-peers
		defer devtools.Close()
		head := make([]byte, 4096)
		if n, err := client.Read(head); err != nil || !strings.Contains(string(head[:n]), "101") {
			t.Fatalf("no 101 for the socket: %q %v", head[:n], err)
		}
		// The browser sends events; the client reads none of them.
		go func() { _, _ = devtools.Write(make([]byte, 1<<16)) }()
		synctest.Wait()
		endsWithItsSession(t, f, client, served)
		if _, err := client.Read(head); err == nil {
			t.Error("the client's connection is still open after its session ended")
		}
	})
}

// A live-log viewer that has stopped reading blocks the follow's write to it;
// the session's end still closes its socket and ends the handler.
func TestNonReadingLogViewerEndsWithItsSession(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		out := launcher.NewBroadcast()
		l := &stubLauncher{mem: newMemTransport(), sides: func(e *launcher.Endpoints) { e.Log = out }}
		f := newFixture(t, queue.Options{Limit: 1}, Options{}, l)
		_, body := f.do("POST", "/session", w3cChrome)
		id := body["value"].(map[string]any)["sessionId"].(string)

		client, served := openSocket(f, "/logs/"+id, "Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ==", "Sec-WebSocket-Version", "13")
		head := make([]byte, 4096)
		if n, err := client.Read(head); err != nil || !strings.Contains(string(head[:n]), "101") {
			t.Fatalf("no 101 for the viewer: %q %v", head[:n], err)
		}
		synctest.Wait()
		out.Write(make([]byte, 1<<16)) // the viewer reads none of it
		synctest.Wait()
		endsWithItsSession(t, f, client, served)
	})
}

// endsWithItsSession ends every session and checks, in fake time, that the
// side channel served went with it: its handler returned, its count given back.
func endsWithItsSession(t *testing.T, f *fixture, client net.Conn, served <-chan struct{}) {
	t.Helper()
	f.sess.EndAll("shutdown")
	time.Sleep(sideChannelCloseGrace) // what a socket gets to finish (fake time)
	synctest.Wait()
	select {
	case <-served:
	default:
		client.Close()
		<-served
		t.Fatal("the side channel's handler outlived its session: a client that stops reading held it")
	}
	f.hub.side.mu.Lock()
	defer f.hub.side.mu.Unlock()
	if len(f.hub.side.bySession) != 0 || len(f.hub.side.byClient) != 0 {
		t.Errorf("side channels still counted: %v %v", f.hub.side.bySession, f.hub.side.byClient)
	}
}
