package bench

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
)

// RelayEnv names the environment variable that turns the load tool's binary
// into a byte relay (see Relay): "port=host:port,..." — each port on 127.0.0.1
// relayed to its target.
const RelayEnv = "WSBENCH_RELAY"

// Relay is the cheapest proxy a Go process can be: one listener per driver,
// and every accepted connection copied both ways to a connection of its own to
// that driver (io.Copy between TCP connections, which Linux does with
// splice(2)). It reads no HTTP at all, so the proxy scenario's relay row is
// what one extra loopback hop costs by itself; the hub's row over the relay's
// is what the hub's own work adds. It runs as a separate process, as the hub
// does, with Go's default GOMAXPROCS, as the hub has, and prints "listening"
// once every listener is open. It returns only on error.
func Relay(spec string) error {
	targets := map[string]string{}
	for pair := range strings.SplitSeq(spec, ",") {
		port, target, ok := strings.Cut(pair, "=")
		if _, err := strconv.Atoi(port); !ok || err != nil || !strings.HasPrefix(target, "127.0.0.1:") {
			return fmt.Errorf("%s: %q is not port=127.0.0.1:port", RelayEnv, pair)
		}
		if _, dup := targets[port]; dup {
			return fmt.Errorf("%s: port %s is given twice", RelayEnv, port)
		}
		targets[port] = target
	}
	for port, target := range targets {
		l, err := net.Listen("tcp", "127.0.0.1:"+port)
		if err != nil {
			return err
		}
		go func() {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				go relayConn(c, target)
			}
		}()
	}
	fmt.Println("relay listening")
	<-context.Background().Done()
	return nil
}

func relayConn(c net.Conn, target string) {
	defer c.Close()
	d, err := net.Dial("tcp", target)
	if err != nil {
		return
	}
	defer d.Close()
	go func() {
		io.Copy(d, c)
		d.(*net.TCPConn).CloseWrite()
	}()
	io.Copy(c, d)
}

// ReverseProxyEnv names the environment variable that turns the load tool's
// binary into the standard library's bare reverse proxy (see ReverseProxy):
// "port=host:port".
const ReverseProxyEnv = "WSBENCH_REVERSEPROXY"

// ReverseProxy serves httputil.NewSingleHostReverseProxy to the target on
// 127.0.0.1:port with a zero http.Server: the cheapest HTTP proxy the standard
// library makes, with no work of the hub's. The realbrowser scenario's row
// for it is the floor of a proxy built on net/http; the hub's row over it is
// what the hub's own work adds. It runs as a separate process, as the hub
// does, prints "reverse proxy listening" once its listener is open, and
// returns only on error.
func ReverseProxy(spec string) error {
	port, target, ok := strings.Cut(spec, "=")
	if _, err := strconv.Atoi(port); !ok || err != nil || !strings.HasPrefix(target, "127.0.0.1:") || strings.Contains(target, ",") {
		return fmt.Errorf("%s: %q is not port=127.0.0.1:port", ReverseProxyEnv, spec)
	}
	l, err := net.Listen("tcp", "127.0.0.1:"+port)
	if err != nil {
		return err
	}
	fmt.Println("reverse proxy listening")
	return http.Serve(l, httputil.NewSingleHostReverseProxy(&url.URL{Scheme: "http", Host: target}))
}
