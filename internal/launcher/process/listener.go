package process

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"sync"
	"syscall"
	"unsafe"

	"github.com/websummoner/websummoner/internal/launcher"
	"github.com/websummoner/websummoner/internal/logtag"
)

// A driver's readiness poll only says that something answers on its port. A
// port checked free can be taken before the driver listens on it — by another
// hub on the machine starting its own driver there — and that program then
// answers the poll while our driver is still starting (it fails to listen and
// exits a moment later). The session would be bound to the other program's
// driver. So once the poll succeeds, the launcher asks the kernel which socket
// listens on the port (sock_diag: one netlink round trip, whatever else the
// machine runs) and checks that the driver or one of its descendants holds it.

// errPortTaken says another program listens on the driver's port.
var errPortTaken = errors.New("another program listens on the driver's port")

// Netlink's sock_diag, from linux/sock_diag.h and linux/inet_diag.h.
const (
	netlinkSockDiag   = 4  // NETLINK_SOCK_DIAG
	sockDiagByFamily  = 20 // SOCK_DIAG_BY_FAMILY
	nlmsgError        = 2  // NLMSG_ERROR
	nlmsgHdrLen       = 16
	inetDiagReqLen    = 56 // struct inet_diag_req_v2
	inetDiagMsgLen    = 72 // struct inet_diag_msg
	inetDiagInodeAt   = 68 // idiag_inode in struct inet_diag_msg
	tcpListenStateBit = 1 << 10
)

// SockDiag asks the kernel which socket listens on a loopback port, over one
// netlink socket kept open: opening and closing one per question was half of
// its cost (four system calls instead of two), and a local start asks every
// millisecond until its driver listens. The questions are serialised; each
// takes a few µs. The zero value is ready to use; Close releases the socket
// (a later question opens another).
type SockDiag struct {
	mu   sync.Mutex
	fd   int
	open bool
	seq  uint32
}

// listener is the inode of the socket listening on 127.0.0.1:port (or on
// every address at that port); ok is false when none does. An error says the
// kernel could not be asked (no sock_diag in this kernel or sandbox).
func (d *SockDiag) listener(port int) (inode uint64, ok bool, err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for attempt := 0; ; attempt++ {
		reused := d.open
		if !d.open {
			fd, err := syscall.Socket(syscall.AF_NETLINK, syscall.SOCK_DGRAM|syscall.SOCK_CLOEXEC, netlinkSockDiag)
			if err != nil {
				return 0, false, err
			}
			d.fd, d.open = fd, true
		}
		inode, ok, err = d.ask(port)
		if err == nil {
			return inode, ok, nil
		}
		// A kept socket in a state no answer explains (an answer lost to a
		// full buffer): a fresh one, once.
		d.closeLocked()
		if !reused || attempt > 0 {
			return 0, false, err
		}
	}
}

// ask sends one exact lookup and reads its answer. Neither call waits
// (MSG_DONTWAIT): the kernel answers a sock_diag request while it is being
// sent, so the answer is queued when sendto returns, and a call that cannot
// wait never blocks the thread.
func (d *SockDiag) ask(port int) (inode uint64, ok bool, err error) {
	d.seq++
	msg := listenerRequest(port, d.seq)
	to := syscall.RawSockaddrNetlink{Family: syscall.AF_NETLINK}
	for {
		_, _, e := syscall.RawSyscall6(syscall.SYS_SENDTO, uintptr(d.fd), uintptr(unsafe.Pointer(&msg[0])), uintptr(len(msg)),
			syscall.MSG_DONTWAIT, uintptr(unsafe.Pointer(&to)), syscall.SizeofSockaddrNetlink)
		if e == 0 {
			break
		}
		if e != syscall.EINTR {
			return 0, false, os.NewSyscallError("sock_diag sendto", e)
		}
	}
	var buf [512]byte
	for {
		r, _, e := syscall.RawSyscall6(syscall.SYS_RECVFROM, uintptr(d.fd), uintptr(unsafe.Pointer(&buf[0])), uintptr(len(buf)),
			syscall.MSG_DONTWAIT, 0, 0)
		if e == syscall.EINTR {
			continue
		}
		if e != 0 {
			return 0, false, os.NewSyscallError("sock_diag recvfrom", e)
		}
		n := int(r)
		if n < nlmsgHdrLen+4 {
			return 0, false, errors.New("sock_diag: short answer")
		}
		if binary.NativeEndian.Uint32(buf[8:]) != d.seq {
			continue // an earlier question's answer, left behind
		}
		switch binary.NativeEndian.Uint16(buf[4:]) {
		case nlmsgError:
			errno := syscall.Errno(-int32(binary.NativeEndian.Uint32(buf[nlmsgHdrLen:])))
			if errno == syscall.ENOENT {
				return 0, false, nil
			}
			return 0, false, errno
		case sockDiagByFamily:
			if n < nlmsgHdrLen+inetDiagMsgLen {
				return 0, false, errors.New("sock_diag: short answer")
			}
			return uint64(binary.NativeEndian.Uint32(buf[nlmsgHdrLen+inetDiagInodeAt:])), true, nil
		}
		return 0, false, errors.New("sock_diag: unexpected answer")
	}
}

// listenerRequest is the exact-lookup request for the TCP listener on
// 127.0.0.1:port (or on every address at that port), numbered seq.
func listenerRequest(port int, seq uint32) [nlmsgHdrLen + inetDiagReqLen]byte {
	var msg [nlmsgHdrLen + inetDiagReqLen]byte
	binary.NativeEndian.PutUint32(msg[0:], uint32(len(msg)))
	binary.NativeEndian.PutUint16(msg[4:], sockDiagByFamily)
	binary.NativeEndian.PutUint16(msg[6:], syscall.NLM_F_REQUEST) // one socket, not a dump
	binary.NativeEndian.PutUint32(msg[8:], seq)
	req := msg[nlmsgHdrLen:]
	req[0], req[1] = syscall.AF_INET, syscall.IPPROTO_TCP
	binary.NativeEndian.PutUint32(req[4:], tcpListenStateBit)
	binary.BigEndian.PutUint16(req[8:], uint16(port))   // idiag_sport
	copy(req[12:16], []byte{127, 0, 0, 1})              // idiag_src
	binary.NativeEndian.PutUint64(req[48:], ^uint64(0)) // INET_DIAG_NOCOOKIE
	return msg
}

// Listening says whether anything listens on 127.0.0.1:port (or on every
// address at that port), asked of the kernel: cheaper than a refused connect
// (two system calls, no packets), and short enough that Go's scheduler does
// not hand the hub's one CPU slot to another thread meanwhile. known is false
// when the kernel cannot be asked. For launcher.WaitListening.
func (d *SockDiag) Listening(port int) (yes, known bool) {
	_, ok, err := d.listener(port)
	return ok, err == nil
}

// Close closes the netlink socket, if one is open.
func (d *SockDiag) Close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.closeLocked()
}

func (d *SockDiag) closeLocked() error {
	if !d.open {
		return nil
	}
	d.open = false
	return syscall.Close(d.fd)
}

// holdsSocket reports whether pid or one of its descendants (a driver started
// through a wrapper) has the socket with this inode open.
func holdsSocket(pid int, inode uint64) bool {
	want := []byte("socket:[" + strconv.FormatUint(inode, 10) + "]")
	queue := []int{pid}
	for seen := 0; len(queue) > 0 && seen < 64; seen++ {
		p := strconv.Itoa(queue[0])
		queue = queue[1:]
		if fdsHold("/proc/"+p+"/fd", want) {
			return true
		}
		// A program may fork from any of its threads (Go's do), so the
		// children of every thread.
		tasks, _ := os.ReadDir("/proc/" + p + "/task")
		for _, t := range tasks {
			queue = threadChildren(p, t.Name(), queue)
		}
	}
	return false
}

// fdsHold reports whether a process's fd directory has a descriptor whose
// link reads want. The links are read relative to the directory
// (readlinkat), not by full path: each /proc path walk was most of the cost.
// They are read from the highest number down: the kernel gives out the lowest
// free number, so a driver that has just started holds its listener among its
// highest, under the poll's accepted connection and its poller's descriptors
// (a Go stub's is the third or fourth from the top, the sixth from the
// bottom), and each read costs a few µs (the kernel formats the name).
func fdsHold(dir string, want []byte) bool {
	dfd, err := syscall.Open(dir, syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return false
	}
	defer syscall.Close(dfd)
	var names []string
	var ents [4096]byte
	for {
		n, err := syscall.Getdents(dfd, ents[:])
		if err != nil || n <= 0 {
			break
		}
		_, _, names = syscall.ParseDirent(ents[:n], -1, names)
	}
	var buf [64]byte
	for i := len(names) - 1; i >= 0; i-- {
		p, err := syscall.BytePtrFromString(names[i])
		if err != nil {
			continue
		}
		n, _, errno := syscall.Syscall6(syscall.SYS_READLINKAT, uintptr(dfd), uintptr(unsafe.Pointer(p)), uintptr(unsafe.Pointer(&buf[0])), uintptr(len(buf)), 0, 0)
		if errno == 0 && bytes.Equal(buf[:n], want) {
			return true
		}
	}
	return false
}

// checkListener says whether the driver's port is its driver's: errPortTaken
// when another program listens there; launcher.ErrExited when nothing does
// any more (the driver, or the process under its wrapper such as xvfb-run,
// died after it answered). When the kernel cannot be asked, it trusts the
// poll and says so once in the log.
func (l *Launcher) checkListener(id string, inst *instance) error {
	inode, ok, err := l.diag.listener(inst.port)
	if err != nil {
		l.diagNote.Do(func() {
			logtag.Event(l.log, slog.LevelWarn, id, "PORT_UNCHECKED", "cannot ask the kernel which process listens on a driver's port: "+err.Error(),
				"a driver whose port another program took could be mistaken for that program")
		})
		return nil
	}
	if !ok {
		return fmt.Errorf("%w: nothing listens on its port any more", launcher.ErrExited)
	}
	if !holdsSocket(inst.pid, inode) {
		return errPortTaken
	}
	return nil
}
