package process

import (
	"bufio"
	"context"
	"errors"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/websummoner/websummoner/internal/launcher"
	"github.com/websummoner/websummoner/internal/logtest"
)

// A program that takes a driver's port after the launcher checked it was free
// (another hub on the machine starting a driver on the same port) answers the
// readiness poll before the driver has even tried to listen. The session must
// not be bound to that program's driver: the launcher sees the listener is
// not its driver's, and starts again on another port.
func TestForeignListenerOnTheDriversPortIsNotTheDriver(t *testing.T) {
	var (
		mu      sync.Mutex
		foreign []string // what reached the other program
	)
	lines, log := logtest.New(64)
	rt := &http.Transport{}
	defer rt.CloseIdleConnections()
	closed := make(chan struct{}, 16) // the other program's connections, closed
	l := closeAtEnd(t, New(Options{Options: launcher.Options{StartupTimeout: 20e9, StopTimeout: 2e9, Instance: instanceFor("test-" + t.Name()), ReadyTransport: rt}}, log))
	var taken int
	l.reserved = func(port int) {
		if taken != 0 {
			return
		}
		taken = port
		ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
		if err != nil {
			t.Errorf("taking port %d: %v", port, err)
			return
		}
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			foreign = append(foreign, r.Method+" "+r.URL.Path)
			mu.Unlock()
			w.Write([]byte(`{"value":{"ready":true}}`))
		}), ConnState: func(_ net.Conn, st http.ConnState) {
			if st == http.StateClosed {
				closed <- struct{}{}
			}
		}}
		go srv.Serve(ln)
		t.Cleanup(func() { srv.Close() })
	}
	// The driver waits before it listens, so the other program answers the
	// first poll while the driver still runs (and then fails to listen).
	inst, err := l.Start(context.Background(), req("-listen-delay", "300ms"))
	if err != nil {
		t.Fatal(err)
	}
	defer inst.Stop(context.Background())
	if taken == 0 {
		t.Fatal("the test's hook never ran")
	}
	if got := inst.Endpoints().Driver.Port(); got == strconv.Itoa(taken) {
		t.Fatalf("the session's driver is the other program on port %s", got)
	}
	if pid, own := pidOf(t, inst), inst.(*instance).pid; pid != own {
		t.Fatalf("%s answered by pid %d, not its own driver %d", inst.Endpoints().Driver.Host, pid, own)
	}
	// A poll keeps no connection: none is left for a later call to reuse
	// with whatever answered on the port.
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Error("the poll's connection to the other program is still open 10s after the start")
	}
	mu.Lock()
	for _, r := range foreign {
		if r != "GET /status" {
			t.Errorf("the other program got %q; only the readiness poll may reach it", r)
		}
	}
	mu.Unlock()
	// Start logs before it returns: the line is in the channel already.
	for {
		select {
		case m := <-lines:
			if strings.Contains(m, "PORT_TAKEN") {
				return
			}
			continue
		default:
		}
		t.Fatal("the retry was not logged as PORT_TAKEN")
	}
}

// The kernel names the socket listening on a port, and the check finds it
// among the fds of the process holding it or of any ancestor's descendants —
// and not in an unrelated process.
func TestListenerInodeAndHolder(t *testing.T) {
	var diag SockDiag
	defer diag.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	f, err := ln.(*net.TCPListener).File()
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var st syscall.Stat_t
	if err := syscall.Fstat(int(f.Fd()), &st); err != nil {
		t.Fatal(err)
	}
	inode, ok, err := diag.listener(port)
	if err != nil || !ok || inode != st.Ino {
		t.Fatalf("listener on %d: inode %d ok %v err %v; want %d", port, inode, ok, err, st.Ino)
	}
	if !holdsSocket(os.Getpid(), inode) {
		t.Fatal("this process holds its listener, but the check says not")
	}
	// A listener on every address (a driver told to allow remote clients)
	// answers on 127.0.0.1 too, and is found.
	all, err := net.Listen("tcp", ":0")
	if err != nil {
		t.Fatal(err)
	}
	defer all.Close()
	if _, ok, err := diag.listener(all.Addr().(*net.TCPAddr).Port); !ok || err != nil {
		t.Fatalf("a listener on every address was not found (ok %v, err %v)", ok, err)
	}
	// A connection's local port is not a listener.
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, ok, err := diag.listener(c.LocalAddr().(*net.TCPAddr).Port); ok || err != nil {
		t.Fatalf("a client port was taken for a listener (ok %v, err %v)", ok, err)
	}

	// A listener held by a child: the child holds it, so does this process
	// through its descendants, and an unrelated process does not.
	cmd, stubPort := listeningStub(t)
	inode, ok, err = diag.listener(stubPort)
	if err != nil || !ok {
		t.Fatalf("the stub's listener on %d: ok %v err %v", stubPort, ok, err)
	}
	if !holdsSocket(cmd.Process.Pid, inode) || !holdsSocket(os.Getpid(), inode) {
		t.Fatal("the stub's listener was not found under the stub or under its parent")
	}
	other := exec.Command("sleep", "60")
	if err := other.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { other.Process.Kill(); other.Wait() }()
	if holdsSocket(other.Process.Pid, inode) {
		t.Fatal("an unrelated process was said to hold the stub's listener")
	}
}

// What the check costs a start: the kernel's answer for the port, and the
// driver's descriptors read, highest first, until its listener is found (a
// Go stub's is its third from the top, after its poller's epoll and eventfd).
func BenchmarkCheckListener(b *testing.B) {
	cmd, port := listeningStub(b)
	var diag SockDiag
	defer diag.Close()
	for b.Loop() {
		inode, ok, err := diag.listener(port)
		if err != nil || !ok || !holdsSocket(cmd.Process.Pid, inode) {
			b.Fatalf("the stub's listener: ok %v err %v", ok, err)
		}
	}
}

// listeningStub runs the stub driver on a port of the kernel's choosing,
// until the test ends, and returns it once it listens.
func listeningStub(tb testing.TB) (*exec.Cmd, int) {
	tb.Helper()
	cmd := exec.Command(stub, "-port", "0")
	out, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	out.(*os.File).SetReadDeadline(time.Now().Add(time.Minute)) // a stub that says nothing fails
	line, err := bufio.NewReader(out).ReadString('\n')          // "wdstub: listening on 127.0.0.1:N"
	if err != nil {
		tb.Fatal(err)
	}
	_, addr, _ := strings.Cut(strings.TrimSpace(line), "listening on ")
	ap, err := netip.ParseAddrPort(addr)
	if err != nil {
		tb.Fatalf("the stub said %q: %v", line, err)
	}
	return cmd, int(ap.Port())
}

// One netlink socket answers every question; an answer left behind by an
// earlier question is not taken for the next one's; and a kept socket that
// broke is replaced by a fresh one without the caller seeing an error.
func TestSockDiagKeepsOneSocket(t *testing.T) {
	listening := loopbackPort(t)
	free, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	freePort := free.Addr().(*net.TCPAddr).Port
	free.Close()

	var d SockDiag
	defer d.Close()
	if yes, known := d.Listening(listening); !yes || !known {
		t.Fatalf("port %d listens: got yes %v known %v", listening, yes, known)
	}
	fd := d.fd
	for range 100 {
		if yes, known := d.Listening(freePort); yes || !known {
			t.Fatalf("nothing listens on %d: got yes %v known %v", freePort, yes, known)
		}
	}
	if d.fd != fd || !d.open {
		t.Fatalf("the socket was replaced (fd %d, then %d) though nothing failed", fd, d.fd)
	}

	// An earlier question whose answer nobody read: "listening", for the
	// other port. The next question's answer is the one for its port.
	d.mu.Lock()
	d.seq++
	msg := listenerRequest(listening, d.seq)
	err = syscall.Sendto(d.fd, msg[:], 0, &syscall.SockaddrNetlink{Family: syscall.AF_NETLINK})
	d.mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	if yes, known := d.Listening(freePort); yes || !known {
		t.Fatalf("nothing listens on %d, but with an old answer queued: yes %v known %v", freePort, yes, known)
	}

	// The kept socket breaks (swapped behind the SockDiag's back for a file
	// that is no socket): the next question still gets its answer, on a new
	// socket.
	null, err := syscall.Open(os.DevNull, syscall.O_RDONLY|syscall.O_CLOEXEC, 0) // closed by the SockDiag
	if err != nil {
		t.Fatal(err)
	}
	d.mu.Lock()
	syscall.Close(d.fd)
	d.fd = null
	d.mu.Unlock()
	if yes, known := d.Listening(listening); !yes || !known {
		t.Fatalf("after the socket broke: yes %v known %v", yes, known)
	}
}

// A port is offered to a driver only when the driver could bind it: not
// while another program listens there (on it or on every address), and
// again once it stopped.
func TestBindableFindsTakenPorts(t *testing.T) {
	for _, addr := range []string{"127.0.0.1:0", ":0"} {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		port := ln.Addr().(*net.TCPAddr).Port
		if free, err := bindable(port); free || err != nil {
			t.Fatalf("port %d has a listener on %s: bindable %v, %v", port, addr, free, err)
		}
		ln.Close()
		if free, err := bindable(port); !free || err != nil {
			t.Fatalf("port %d is free again: bindable %v, %v", port, free, err)
		}
	}
	l := &Launcher{ports: map[int]bool{}}
	taken := map[int]bool{}
	for range 50 {
		port, err := l.reservePort()
		if err != nil {
			t.Fatal(err)
		}
		if taken[port] || port < portMin || port >= portMax {
			t.Fatalf("reservePort gave %d: reserved twice or out of %d-%d", port, portMin, portMax)
		}
		taken[port] = true
	}
}

// What one "does anything listen yet?" costs a start, asked every
// millisecond until its driver listens: on the kept socket, and on a socket
// opened and closed for the question, as before.
func BenchmarkSockDiagListening(b *testing.B) {
	port := loopbackPort(b)
	b.Run("kept", func(b *testing.B) {
		var d SockDiag
		defer d.Close()
		for b.Loop() {
			if yes, known := d.Listening(port); !yes || !known {
				b.Fatal("not listening")
			}
		}
	})
	b.Run("fresh", func(b *testing.B) {
		for b.Loop() {
			var d SockDiag
			yes, known := d.Listening(port)
			d.Close()
			if !yes || !known {
				b.Fatal("not listening")
			}
		}
	})
}

// loopbackPort is a port something listens on (127.0.0.1) until the test ends.
func loopbackPort(tb testing.TB) int {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { ln.Close() })
	return ln.Addr().(*net.TCPAddr).Port
}

// A driver's port that nothing listens on any more (the driver, or the
// process under a wrapper such as xvfb-run, died after it answered) is the
// driver's exit, not a port another program took; another program's
// listener is.
func TestCheckListenerTellsAnExitFromATakenPort(t *testing.T) {
	l := newLauncher(t, Options{})
	driver, own := listeningStub(t)
	_, other := listeningStub(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gone := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	pid := driver.Process.Pid
	if err := l.checkListener("t", &instance{pid: pid, port: own}); err != nil {
		t.Errorf("the driver's own listener: %v", err)
	}
	if err := l.checkListener("t", &instance{pid: pid, port: gone}); !errors.Is(err, launcher.ErrExited) || errors.Is(err, errPortTaken) {
		t.Errorf("nothing listening: %v, want the driver's exit", err)
	}
	if err := l.checkListener("t", &instance{pid: pid, port: other}); !errors.Is(err, errPortTaken) {
		t.Errorf("another program's listener: %v, want errPortTaken", err)
	}
}
