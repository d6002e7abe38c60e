package bench

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// The relay carries an HTTP exchange both ways unchanged and keeps the
// connection for the next request, as the proxy scenario's relay row needs.
func TestRelayConn(t *testing.T) {
	var seen []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen = append(seen, r.Method+" "+r.URL.Path+" "+r.RemoteAddr)
		io.WriteString(w, `{"value":"`+r.URL.Path+`"}`)
	}))
	defer srv.Close()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go relayConn(c, strings.TrimPrefix(srv.URL, "http://"))
		}
	}()
	client := &http.Client{Transport: &http.Transport{}}
	for _, p := range []string{"/session/a/title", "/session/a/url"} {
		resp, err := client.Get("http://" + l.Addr().String() + p)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(b) != `{"value":"`+p+`"}` {
			t.Fatalf("through the relay %s answered %q", p, b)
		}
	}
	if len(seen) != 2 || strings.Fields(seen[0])[2] != strings.Fields(seen[1])[2] {
		t.Fatalf("the driver saw %q: want two requests on one relayed connection", seen)
	}
}

func TestRelayRefusesOtherHosts(t *testing.T) {
	for _, spec := range []string{"1=10.0.0.1:80", "x=127.0.0.1:80", "127.0.0.1:80", "1=127.0.0.1:80,1=127.0.0.1:81"} {
		if err := Relay(spec); err == nil || !strings.Contains(err.Error(), RelayEnv) {
			t.Fatalf("Relay(%q) = %v, want an error naming %s", spec, err, RelayEnv)
		}
	}
}

func TestEchoRefusesABadPort(t *testing.T) {
	if err := Echo("http"); err == nil || !strings.Contains(err.Error(), EchoEnv) {
		t.Fatalf("Echo(\"http\") = %v, want an error naming %s", err, EchoEnv)
	}
}
