package rawio

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"
)

// The answer arrives after the write and before the wait begins — the
// window a driver answering at once could hit: the wait was armed before the
// write, so it still ends (armed after the write, the poller would have
// dropped the answer's readiness, and this would hang until the deadline).
func TestWriteAwaitReadSeesAnAnswerBeforeTheWait(t *testing.T) {
	w, s := pair(t)
	w.afterWrite = func() {
		b := make([]byte, 7)
		io.ReadFull(s, b)
		s.Write([]byte("answer"))
		time.Sleep(10 * time.Millisecond) // delivered on loopback by now
	}
	w.SetReadDeadline(time.Now().Add(5 * time.Second))
	start := time.Now()
	if n, err := w.WriteAwaitRead([]byte("request")); n != 7 || err != nil {
		t.Fatalf("WriteAwaitRead = %d, %v", n, err)
	}
	if waited := time.Since(start); waited > 2*time.Second {
		t.Fatalf("the wait missed an answer that came before it began: it ended after %v (the deadline)", waited)
	}
	buf := make([]byte, 16)
	if n, err := w.Read(buf); err != nil || string(buf[:n]) != "answer" {
		t.Fatalf("Read = %q, %v; want \"answer\"", buf[:n], err)
	}
}

// An echo peer answers as fast as it can, 2,000 times: no answer is missed
// and each is read whole.
func TestWriteAwaitReadNeverMissesAQuickAnswer(t *testing.T) {
	w, s := pair(t)
	go io.Copy(s, s)
	buf := make([]byte, 64)
	for i := range 2000 {
		msg := []byte{'q', byte(i), byte(i >> 8)}
		if n, err := w.WriteAwaitRead(msg); n != len(msg) || err != nil {
			t.Fatalf("request %d: WriteAwaitRead = %d, %v", i, n, err)
		}
		if _, err := io.ReadFull(w, buf[:len(msg)]); err != nil || !bytes.Equal(buf[:len(msg)], msg) {
			t.Fatalf("answer %d: %q, %v; want %q", i, buf[:len(msg)], err, msg)
		}
	}
}

// The wait returns when the answer comes, not before: a late answer is there
// for the Read right after.
func TestWriteAwaitReadWaitsForTheAnswer(t *testing.T) {
	w, s := pair(t)
	got := make(chan []byte, 1)
	go func() {
		b := make([]byte, 7)
		io.ReadFull(s, b)
		got <- b
		time.Sleep(30 * time.Millisecond) // the answer takes a while, as a driver's does
		s.Write([]byte("answer"))
	}()
	start := time.Now()
	if n, err := w.WriteAwaitRead([]byte("request")); n != 7 || err != nil {
		t.Fatalf("WriteAwaitRead = %d, %v", n, err)
	}
	if waited := time.Since(start); waited < 25*time.Millisecond {
		t.Fatalf("returned after %v, before the answer was sent", waited)
	}
	if b := <-got; string(b) != "request" {
		t.Fatalf("the peer read %q", b)
	}
	buf := make([]byte, 16)
	if n, err := w.Read(buf); err != nil || string(buf[:n]) != "answer" {
		t.Fatalf("Read = %q, %v; want \"answer\"", buf[:n], err)
	}
}

// What the wait meets is the next Read's to report: a passed deadline, the
// peer's close, this end's close. The write itself succeeded each time.
func TestWriteAwaitReadLeavesTheOutcomeToRead(t *testing.T) {
	t.Run("deadline", func(t *testing.T) {
		w, s := pair(t)
		go io.Copy(io.Discard, s)
		w.SetReadDeadline(time.Now().Add(40 * time.Millisecond))
		if n, err := w.WriteAwaitRead([]byte("x")); n != 1 || err != nil {
			t.Fatalf("WriteAwaitRead = %d, %v; want 1, nil", n, err)
		}
		_, err := w.Read(make([]byte, 1))
		var op *net.OpError
		if !errors.Is(err, os.ErrDeadlineExceeded) || !errors.As(err, &op) || op.Op != "read" {
			t.Fatalf("Read after the wait: %v; want a read timeout", err)
		}
	})
	t.Run("peer closes", func(t *testing.T) {
		w, s := pair(t)
		go func() {
			io.ReadFull(s, make([]byte, 1))
			s.Close()
		}()
		if n, err := w.WriteAwaitRead([]byte("x")); n != 1 || err != nil {
			t.Fatalf("WriteAwaitRead = %d, %v", n, err)
		}
		if _, err := w.Read(make([]byte, 1)); err != io.EOF {
			t.Fatalf("Read after the peer closed: %v; want io.EOF", err)
		}
	})
	t.Run("closed here", func(t *testing.T) {
		w, s := pair(t)
		go io.Copy(io.Discard, s)
		go func() {
			time.Sleep(20 * time.Millisecond)
			w.Close()
		}()
		if n, err := w.WriteAwaitRead([]byte("x")); n != 1 || err != nil {
			t.Fatalf("WriteAwaitRead = %d, %v", n, err)
		}
		if _, err := w.Read(make([]byte, 1)); !errors.Is(err, net.ErrClosed) {
			t.Fatalf("Read after Close: %v; want net.ErrClosed", err)
		}
		if _, err := w.WriteAwaitRead([]byte("y")); !errors.Is(err, net.ErrClosed) {
			t.Fatalf("WriteAwaitRead on a closed connection: %v; want net.ErrClosed", err)
		}
	})
	t.Run("read deadline already passed", func(t *testing.T) {
		w, s := pair(t)
		w.SetReadDeadline(time.Now().Add(-time.Second)) // the poller refuses the read: the write goes anyway
		if n, err := w.WriteAwaitRead([]byte("still sent")); n != 10 || err != nil {
			t.Fatalf("WriteAwaitRead = %d, %v", n, err)
		}
		b := make([]byte, 10)
		if _, err := io.ReadFull(s, b); err != nil || string(b) != "still sent" {
			t.Fatalf("the peer read %q, %v", b, err)
		}
	})
}

// More than the socket holds: the part that did not fit goes the ordinary way
// (waiting for the reader), every byte in order, and the answer after it is
// read as usual.
func TestWriteAwaitReadThroughAFullSocket(t *testing.T) {
	w, s := pair(t)
	want := pattern(16 << 20)
	go func() {
		b := make([]byte, len(want))
		if _, err := io.ReadFull(s, b); err != nil || !bytes.Equal(b, want) {
			s.Write([]byte("bad"))
			return
		}
		s.Write([]byte("ok!"))
	}()
	if n, err := w.WriteAwaitRead(want); n != len(want) || err != nil {
		t.Fatalf("WriteAwaitRead = %d, %v; want %d, nil", n, err, len(want))
	}
	buf := make([]byte, 3)
	if _, err := io.ReadFull(w, buf); err != nil || string(buf) != "ok!" {
		t.Fatalf("answer %q, %v; want \"ok!\" (the peer got every byte in order)", buf, err)
	}
}

// A reset peer is the write's error, as with Write.
func TestWriteAwaitReadToAResetPeer(t *testing.T) {
	w, s := pair(t)
	s.(*net.TCPConn).SetLinger(0)
	s.Close()
	time.Sleep(20 * time.Millisecond) // the reset arrives
	var err error
	for range 3 { // the first write may still be taken before the reset is seen
		if _, err = w.WriteAwaitRead([]byte("x")); err != nil {
			break
		}
	}
	var op *net.OpError
	if err == nil || !errors.As(err, &op) || op.Op != "write" {
		t.Fatalf("WriteAwaitRead to a reset peer: %v; want a *net.OpError of a write", err)
	}
}

// A request and its wait allocate nothing.
func TestWriteAwaitReadAllocatesNothing(t *testing.T) {
	w, s := pair(t)
	go io.Copy(s, s)
	msg := []byte("GET /session/x/title HTTP/1.1\r\n\r\n")
	p := make([]byte, len(msg))
	if a := testing.AllocsPerRun(200, func() {
		w.WriteAwaitRead(msg)
		io.ReadFull(w, p)
	}); a != 0 {
		t.Fatalf("%v allocations per WriteAwaitRead, want 0", a)
	}
}
