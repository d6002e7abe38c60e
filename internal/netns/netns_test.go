package netns

import (
	"bufio"
	"context"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The child side of TestDialIntoSandbox: a server on the loopback of the
// network namespace it runs in, answering "hello" to each connection.
func TestMain(m *testing.M) {
	if os.Getenv("NETNS_TEST_SERVE") != "" {
		ln, err := net.Listen("tcp", "127.0.0.1:"+os.Getenv("NETNS_TEST_SERVE"))
		if err != nil {
			os.Exit(3)
		}
		os.Stdout.WriteString("listening\n")
		for {
			c, err := ln.Accept()
			if err != nil {
				os.Exit(0)
			}
			c.Write([]byte("hello"))
			c.Close()
		}
	}
	os.Exit(m.Run())
}

// A server in a namespace of its own is reached through the sandbox's
// address, and not on the hub's loopback; so is a listener the hub opens in
// it; a forgotten sandbox's address is refused rather than dialled or
// listened on in the hub's namespace.
func TestDialIntoSandbox(t *testing.T) {
	bwrap, err := exec.LookPath("bwrap")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("CI installs bubblewrap (scripts/deps.sh): it must be here")
		}
		t.Skip("bubblewrap is not installed (scripts/deps.sh installs it)")
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// A port nobody listens on in the hub's namespace.
	probe, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := strconv.Itoa(probe.Addr().(*net.TCPAddr).Port)
	probe.Close()

	cmd := exec.Command(bwrap, "--unshare-net", "--unshare-pid", "--die-with-parent", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", self)
	cmd.Env = append(os.Environ(), "NETNS_TEST_SERVE="+port)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	// Every wait below is bounded by ioTimeout, so that a hang fails the test
	// instead of holding the suite; none is a measure.
	out.(*os.File).SetReadDeadline(time.Now().Add(ioTimeout))
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || line != "listening\n" {
		t.Fatalf("the sandboxed server did not start: %q %v", line, err)
	}
	child, err := Child(context.Background(), cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	d := New(net.Dialer{Timeout: ioTimeout})
	a, err := d.Add(child)
	if err != nil {
		t.Fatal(err)
	}
	if !Holds(a.String()+":"+port) || Holds("127.0.0.1:"+port) {
		t.Fatalf("Holds is wrong for %v", a)
	}
	ctx, cancel := context.WithTimeout(context.Background(), ioTimeout)
	defer cancel()
	for i := range 3 { // the thread is back in the hub's namespace each time
		c, err := d.DialContext(ctx, "tcp", net.JoinHostPort(a.String(), port))
		if err != nil {
			t.Fatalf("dial %d into the sandbox: %v", i, err)
		}
		c.SetReadDeadline(time.Now().Add(ioTimeout))
		b, _ := io.ReadAll(c)
		c.Close()
		if string(b) != "hello" {
			t.Fatalf("dial %d: read %q", i, b)
		}
	}
	if c, err := d.DialContext(ctx, "tcp", "127.0.0.1:"+port); err == nil {
		c.Close()
		t.Fatal("the sandbox's server is reachable on the hub's own loopback")
	}
	// A listener of the hub's in the sandbox: on its loopback, not the hub's.
	ln, err := d.Listen(ctx, a, "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listening in the sandbox: %v", err)
	}
	lport := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	accepted := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err == nil {
			c.Close()
		}
		accepted <- err
	}()
	if c, err := net.DialTimeout("tcp", "127.0.0.1:"+lport, time.Second); err == nil {
		c.Close()
		t.Fatal("the hub's listener in the sandbox is reachable on the hub's own loopback")
	}
	c, err := d.DialContext(ctx, "tcp", net.JoinHostPort(a.String(), lport))
	if err != nil {
		t.Fatalf("dialling the hub's listener in the sandbox: %v", err)
	}
	c.Close()
	select {
	case err := <-accepted:
		if err != nil {
			t.Fatalf("accepting in the sandbox: %v", err)
		}
	case <-time.After(ioTimeout):
		t.Fatal("the hub's listener in the sandbox accepted nothing")
	}
	ln.Close()
	d.Remove(a)
	if _, err := d.DialContext(ctx, "tcp", net.JoinHostPort(a.String(), port)); err == nil || !strings.Contains(err.Error(), "no sandbox holds") {
		t.Fatalf("a forgotten sandbox: %v", err)
	}
	if ln, err := d.Listen(ctx, a, "127.0.0.1:0"); err == nil || !strings.Contains(err.Error(), "no sandbox holds") {
		if ln != nil {
			ln.Close()
		}
		t.Fatalf("listening in a forgotten sandbox: %v", err)
	}
}

// ioTimeout bounds each wait of these tests on a sandboxed process.
const ioTimeout = time.Minute
