package hub

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"sync"
)

// memTransport carries the hub's requests to in-memory driver handlers, so that
// hub tests of timeouts run in a synctest bubble: a real socket is not durably
// blocking and would keep fake time from advancing. It is a stand-in for the
// network only; the drivers are the real wdstub handler.
type memTransport struct {
	mu    sync.Mutex
	next  int
	hosts map[string]http.Handler
}

func newMemTransport() *memTransport { return &memTransport{hosts: map[string]http.Handler{}} }

func (m *memTransport) add(h http.Handler) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.next++
	host := fmt.Sprintf("driver-%d:4444", m.next)
	m.hosts[host] = h
	return host
}

func (m *memTransport) remove(host string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.hosts, host)
}

// RoundTrip serves req with the host's handler, or fails as a refused
// connection would; it returns early when req's context ends.
func (m *memTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	m.mu.Lock()
	h := m.hosts[req.URL.Host]
	m.mu.Unlock()
	if h == nil {
		return nil, errors.New("dial tcp " + req.URL.Host + ": connection refused")
	}
	// A server always hands its handler a body; a client request may have none.
	req = req.Clone(req.Context())
	if req.Body == nil {
		req.Body = http.NoBody
	}
	// As Go's Transport, it tells a client trace when the request is
	// written whole: here, when the handler has read the body to its end.
	if trace := httptrace.ContextClientTrace(req.Context()); trace != nil && trace.WroteRequest != nil {
		wrote := sync.OnceFunc(func() { trace.WroteRequest(httptrace.WroteRequestInfo{}) })
		if req.Body == http.NoBody {
			wrote()
		} else {
			req.Body = &wroteBody{ReadCloser: req.Body, wrote: wrote}
		}
	}
	rec := httptest.NewRecorder()
	done := make(chan struct{})
	go func() {
		defer close(done)
		h.ServeHTTP(rec, req)
	}()
	select {
	case <-done:
		resp := rec.Result()
		resp.Request = req // as Go's Transport gives it
		return resp, nil
	case <-req.Context().Done():
		return nil, req.Context().Err()
	}
}

// wroteBody is a request body that calls wrote once it has been read to
// its end.
type wroteBody struct {
	io.ReadCloser
	wrote func()
}

func (b *wroteBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF {
		b.wrote()
	}
	return n, err
}
