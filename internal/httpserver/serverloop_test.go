package httpserver

import (
	"bufio"
	"bytes"
	"net"
	"net/http"
	"testing"
)

// The request and answer of a WebDriver command as the proxy scenario sends
// and the stub driver answers them, byte for byte.
var (
	loopRequest = []byte("GET /session/bcdc96d5056337939834e7401b96e648/title HTTP/1.1\r\nHost: 127.0.0.1:20043\r\n" +
		"Accept-Encoding: gzip\r\nUser-Agent: Go-http-client/1.1\r\n\r\n")
	loopAnswer = []byte("HTTP/1.1 200 OK\r\nContent-Type: application/json; charset=utf-8\r\n" +
		"Date: Mon, 30 Nov 2026 16:09:27 GMT\r\nContent-Length: 19\r\n\r\n{\"value\":\"wdstub\"}\n")
)

// BenchmarkServerLoop bounds what a server loop of the hub's own, in place of
// Go's HTTP server, could save on a command: the same keep-alive request
// answered by net/http and by a raw loop that reads to the blank line and
// writes the answer (no parsing, no background read). The difference per op
// is the most such a loop could take off the hub's CPU per command
// (docs/benchmarks.md; run with GOMAXPROCS=1, as the hub runs).
func BenchmarkServerLoop(b *testing.B) {
	b.Run("net-http", func(b *testing.B) {
		l := loopListen(b)
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			h := w.Header()
			h["Content-Type"] = []string{"application/json; charset=utf-8"}
			h["Content-Length"] = []string{"19"}
			w.WriteHeader(http.StatusOK)
			w.Write([]byte("{\"value\":\"wdstub\"}\n"))
		})}
		go srv.Serve(l)
		defer srv.Close()
		loopClient(b, l.Addr().String())
	})
	b.Run("raw-loop", func(b *testing.B) {
		l := loopListen(b)
		defer l.Close()
		go func() {
			c, err := l.Accept()
			if err != nil {
				return
			}
			defer c.Close()
			br := bufio.NewReader(c)
			for {
				for {
					line, err := br.ReadSlice('\n')
					if err != nil {
						return
					}
					if bytes.Equal(line, []byte("\r\n")) {
						break
					}
				}
				if _, err := c.Write(loopAnswer); err != nil {
					return
				}
			}
		}()
		loopClient(b, l.Addr().String())
	})
}

func loopListen(b *testing.B) net.Listener {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	return l
}

// loopClient sends the request b.N times on one connection, reading each
// whole answer (its length is known) before the next.
func loopClient(b *testing.B, addr string) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	buf := make([]byte, 4096)
	for b.Loop() {
		if _, err := c.Write(loopRequest); err != nil {
			b.Fatal(err)
		}
		for n := 0; n < len(loopAnswer); {
			m, err := c.Read(buf[n:])
			if err != nil {
				b.Fatalf("after %d of %d bytes of the answer: %v", n, len(loopAnswer), err)
			}
			n += m
		}
		if !bytes.HasPrefix(buf, []byte("HTTP/1.1 200 OK\r\n")) || !bytes.HasSuffix(buf[:len(loopAnswer)], []byte("\r\n\r\n{\"value\":\"wdstub\"}\n")) {
			b.Fatalf("answer %q", buf[:len(loopAnswer)])
		}
	}
}
