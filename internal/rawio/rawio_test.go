package rawio

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"syscall"
	"testing"
	"time"
)

// pair returns a wrapped client connection and the server's end of it, on
// loopback. The tests wrap even in race-detector builds (wrap, not Wrap), so
// the raw path is what runs under the detector.
func pair(t *testing.T) (*Conn, net.Conn) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := l.Accept()
		if err != nil {
			close(accepted)
			return
		}
		accepted <- c
	}()
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	s, ok := <-accepted
	if !ok {
		t.Fatal("accept failed")
	}
	w, ok := wrap(c).(*Conn)
	if !ok {
		t.Fatalf("wrap(%T) is not a *Conn", c)
	}
	t.Cleanup(func() { w.Close(); s.Close() })
	return w, s
}

// pattern is n bytes that repeat only every 5 × 256 bytes, so that a lost,
// repeated or reordered piece shows.
func pattern(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i * 7 / 5)
	}
	return b
}

// More than the socket's buffers hold, so that the write must wait in the
// poller for the reader, more than once: every byte arrives, in order.
func TestWriteAllThroughAFullSocket(t *testing.T) {
	w, s := pair(t)
	want := pattern(16 << 20)
	got := make(chan []byte, 1)
	go func() {
		b, _ := io.ReadAll(s)
		got <- b
	}()
	n, err := w.Write(want)
	if err != nil || n != len(want) {
		t.Fatalf("Write = %d, %v; want %d, nil", n, err, len(want))
	}
	w.CloseWrite() // promoted from *net.TCPConn
	if b := <-got; !bytes.Equal(b, want) {
		t.Fatalf("the reader got %d bytes, not the %d written (or not in order)", len(b), len(want))
	}
}

// A peer that never reads: the write deadline ends the Write, with the error
// net.TCPConn gives.
func TestWriteDeadline(t *testing.T) {
	w, _ := pair(t)
	w.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
	n, err := w.Write(make([]byte, 64<<20))
	if !errors.Is(err, os.ErrDeadlineExceeded) || n >= 64<<20 {
		t.Fatalf("Write past the deadline = %d, %v; want a partial write and os.ErrDeadlineExceeded", n, err)
	}
	var op *net.OpError
	if !errors.As(err, &op) || op.Op != "write" || op.Net != "tcp" || op.Addr == nil {
		t.Fatalf("error %#v: want a *net.OpError of a tcp write with its addresses", err)
	}
}

func TestWriteAfterClose(t *testing.T) {
	w, _ := pair(t)
	w.Close()
	if _, err := w.Write([]byte("x")); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Write after Close: %v, want net.ErrClosed", err)
	}
}

// A peer that reset the connection: the write fails with the system's error
// (and the process is not killed by SIGPIPE).
func TestWriteToAResetPeer(t *testing.T) {
	w, s := pair(t)
	s.(*net.TCPConn).SetLinger(0)
	s.Close() // RST
	var err error
	for range 100 { // the first write may be taken before the RST is seen
		if _, err = w.Write(make([]byte, 4096)); err != nil {
			break
		}
	}
	if !errors.Is(err, syscall.ECONNRESET) && !errors.Is(err, syscall.EPIPE) {
		t.Fatalf("writes to a reset peer ended with %v, want ECONNRESET or EPIPE", err)
	}
}

// Writes from several goroutines, as a hijacked WebSocket has, never
// interleave: each Write's bytes arrive together.
func TestConcurrentWritesDoNotInterleave(t *testing.T) {
	w, s := pair(t)
	const block, each, writers = 64 << 10, 50, 4
	var wg sync.WaitGroup
	for g := range writers {
		wg.Go(func() {
			b := bytes.Repeat([]byte{byte('a' + g)}, block)
			for range each {
				if _, err := w.Write(b); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	go func() { wg.Wait(); w.CloseWrite() }()
	buf := make([]byte, block)
	blocks := 0
	for {
		if _, err := io.ReadFull(s, buf); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		if bytes.Count(buf, buf[:1]) != block {
			t.Fatalf("block %d mixes two writers' bytes", blocks)
		}
		blocks++
	}
	if blocks != writers*each {
		t.Fatalf("%d blocks arrived, want %d", blocks, writers*each)
	}
}

// A Write allocates nothing: it is on every command's path.
func TestWriteAllocatesNothing(t *testing.T) {
	w, s := pair(t)
	go io.Copy(io.Discard, s)
	p := []byte("HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
	if a := testing.AllocsPerRun(100, func() { w.Write(p) }); a != 0 {
		t.Fatalf("%v allocations per Write, want 0", a)
	}
}

// What Wrap keeps: a TCP connection stays a syscall.Conn (the hang-up watch
// and the wire need its descriptor); anything else is returned as it is.
func TestWrap(t *testing.T) {
	w, _ := pair(t)
	var c net.Conn = w
	if _, ok := c.(syscall.Conn); !ok {
		t.Fatal("a wrapped connection is no longer a syscall.Conn")
	}
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	if wrap(a) != a {
		t.Fatal("a connection that is not TCP was wrapped")
	}
	if got := Wrap(w.TCPConn); raceEnabled != (got == net.Conn(w.TCPConn)) {
		t.Fatalf("Wrap in a build with the race detector %v returned %T", raceEnabled, got)
	}
}

// Reads: what was sent arrives whole and in order through small and large
// buffers (the large ones take Go's ordinary path), then io.EOF.
func TestReadAllThenEOF(t *testing.T) {
	w, s := pair(t)
	want := pattern(4 << 20)
	go func() {
		s.Write(want)
		s.Close()
	}()
	var got []byte
	for i := 0; ; i++ {
		buf := make([]byte, []int{1, 4096, 1 << 20}[i%3])
		n, err := w.Read(buf)
		got = append(got, buf[:n]...)
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			t.Fatal("Read returned 0 bytes and no error")
		}
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("read %d bytes, not the %d sent (or not in order)", len(got), len(want))
	}
	if n, err := w.Read(make([]byte, 8)); n != 0 || err != io.EOF {
		t.Fatalf("Read after the end = %d, %v; want 0, io.EOF", n, err)
	}
}

// A Read waits in the poller for bytes (the deadline and Close cases always
// do; the first, most often); its deadline and Close end the wait
// with the errors net.TCPConn gives (what Go's HTTP server looks for).
func TestReadWaitsDeadlineAndClose(t *testing.T) {
	w, s := pair(t)
	reading := make(chan struct{})
	go func() {
		<-reading // most often after the Read found nothing and waits
		s.Write([]byte("late"))
	}()
	buf := make([]byte, 16)
	close(reading)
	if n, err := w.Read(buf); err != nil || string(buf[:n]) != "late" {
		t.Fatalf("Read = %q, %v; want \"late\"", buf[:n], err)
	}
	w.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	_, err := w.Read(buf)
	var op *net.OpError
	if !errors.Is(err, os.ErrDeadlineExceeded) || !errors.As(err, &op) || op.Op != "read" || !op.Timeout() {
		t.Fatalf("Read past its deadline: %#v; want a *net.OpError of a read that timed out", err)
	}
	w.SetReadDeadline(time.Time{})
	done := make(chan error, 1)
	go func() {
		_, err := w.Read(buf)
		done <- err
	}()
	w.Close()
	if err := <-done; !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Read when closed: %v, want net.ErrClosed", err)
	}
	if n, err := w.Read(nil); n != 0 || err != nil {
		t.Fatalf("an empty Read = %d, %v; want 0, nil", n, err)
	}
}

// A Read allocates nothing either.
func TestReadAllocatesNothing(t *testing.T) {
	w, s := pair(t)
	p := make([]byte, 64)
	msg := []byte("GET /session/x/title HTTP/1.1\r\n\r\n")
	if a := testing.AllocsPerRun(100, func() {
		s.Write(msg)
		io.ReadFull(w, p[:len(msg)])
	}); a != 0 {
		t.Fatalf("%v allocations per Read, want 0", a)
	}
}

// One goroutine reading while others write, as on a hijacked WebSocket: an
// echo through the peer comes back whole.
func TestReadWhileWriting(t *testing.T) {
	w, s := pair(t)
	go io.Copy(s, s) // the peer echoes
	const total = 8 << 20
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			b := bytes.Repeat([]byte{'x'}, total/2/64)
			for range 64 {
				if _, err := w.Write(b); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	n, err := io.CopyN(io.Discard, w, total)
	wg.Wait()
	if err != nil || n != total {
		t.Fatalf("read back %d of %d bytes: %v", n, total, err)
	}
}
