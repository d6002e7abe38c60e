package launcher

import (
	"net/netip"
	"syscall"
	"time"
)

// refused reports whether a connect to host (ip:port) is refused. On loopback
// the kernel answers a connect at once: a handful of system calls tell a
// driver not yet listening, where an HTTP poll sets up and tears down a Go
// connection (a tenth of the hub's CPU under session churn, most of it
// refused polls). Anything else — accepted, in progress, not a loopback
// address — is false, and the HTTP poll decides.
func refused(host string) bool {
	ap, err := netip.ParseAddrPort(host)
	if err != nil || !ap.Addr().IsLoopback() {
		return false
	}
	var sa syscall.Sockaddr
	family := syscall.AF_INET
	if a := ap.Addr().Unmap(); a.Is4() {
		sa = &syscall.SockaddrInet4{Port: int(ap.Port()), Addr: a.As4()}
	} else {
		family = syscall.AF_INET6
		sa = &syscall.SockaddrInet6{Port: int(ap.Port()), Addr: a.As16()}
	}
	// Blocking, so that connect waits for the loopback's answer (a
	// non-blocking one returns before the reset is seen), and bounded by
	// SO_SNDTIMEO, which Linux applies to connect, in case a full backlog
	// drops the SYN.
	for range 3 { // a signal (Go's preemption) may interrupt the connect
		switch err := connect(family, sa); err {
		case syscall.EINTR:
			continue
		default:
			return err == syscall.ECONNREFUSED
		}
	}
	return false
}

func connect(family int, sa syscall.Sockaddr) error {
	fd, err := syscall.Socket(family, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer syscall.Close(fd)
	tv := syscall.NsecToTimeval(int64(100 * time.Millisecond))
	if err := syscall.SetsockoptTimeval(fd, syscall.SOL_SOCKET, syscall.SO_SNDTIMEO, &tv); err != nil {
		return err
	}
	return syscall.Connect(fd, sa)
}
