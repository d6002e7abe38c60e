package process

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/websummoner/websummoner/internal/egress"
	"github.com/websummoner/websummoner/internal/netns"
)

// Sandbox runs each driver, and the browser it starts, in a sandbox of its
// own (bubblewrap): its own network namespace, whose loopback only the
// sandbox and the hub (through Dial) reach; its own process, IPC and UTS
// namespaces; a file system of the host's /usr and the few /etc files a
// browser needs, read-only, with a private /tmp (a bounded tmpfs, HOME and
// TMPDIR inside it) and the session's download directory as the only
// writable host path; and an unprivileged user (nobody, when the hub runs
// as root). The hub's files, another session's files and its driver are out
// of reach, and nothing of the session outlives it.
//
// The browser's way out is the hub's proxy on the sandbox's loopback
// (internal/egress, 127.0.0.1:3128), which the driver's environment names
// (egress.Env): it reaches the host's loopback and routed networks, never
// another sandbox or a Docker bridge (egress.Guard).
type Sandbox struct {
	// Dial reaches the drivers: the hub dials through the same Dialer.
	Dial *netns.Dialer
	// Bwrap is the bubblewrap binary.
	Bwrap string
	// Cred is the user drivers run as; nil: the hub's own (not root).
	Cred *syscall.Credential
	// TmpSize bounds each sandbox's /tmp (the browser's profile, uploads).
	TmpSize int64
	// Egress decides where the sandboxes' proxies connect; nil: the zero
	// egress.Guard, the host's resolver and networks.
	Egress *egress.Guard
}

// sandboxPort is where every sandboxed driver listens: each has a loopback of
// its own, so no port is shared, reserved or taken by another program.
const sandboxPort = 9515

// DefaultSandboxTmp is a sandbox's /tmp size unless set.
const DefaultSandboxTmp = 1 << 30

// NewSandbox finds bubblewrap and checks, by running it once, that this
// machine lets it make the sandbox (user and network namespaces). The error
// says what is missing.
func NewSandbox(dial *netns.Dialer) (*Sandbox, error) {
	path, err := exec.LookPath("bwrap")
	if err != nil {
		return nil, errors.New("bubblewrap (bwrap) is not installed: apt-get install bubblewrap")
	}
	s := &Sandbox{Dial: dial, Bwrap: path, TmpSize: DefaultSandboxTmp}
	if os.Geteuid() == 0 {
		s.Cred = &syscall.Credential{Uid: 65534, Gid: 65534, NoSetGroups: false, Groups: []uint32{}}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, append(s.args("", "/bin/true"), "/bin/true")...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: s.Cred}
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("bubblewrap cannot make a sandbox here (%v: %s): the kernel must allow user and network namespaces (sysctl kernel.unprivileged_userns_clone=1, user.max_user_namespaces > 0)", err, strings.TrimSpace(string(out)))
	}
	return s, nil
}

// etcFiles are the host's /etc entries a browser reads: fonts, certificates,
// the dynamic loader's cache, the time zone, Debian's alternatives and
// Chromium's own settings, "localhost" (chromedriver dials its browser by
// that name) and the user names. The rest of /etc (the hub's configuration,
// passwords, keys) is not there.
var etcFiles = []string{"fonts", "ssl", "ca-certificates", "alternatives", "chromium", "chromium.d", "ld.so.cache",
	"localtime", "mime.types", "nsswitch.conf", "host.conf", "gai.conf", "machine-id", "hosts", "passwd", "group"}

// args is bubblewrap's command line for a driver binary at exe whose
// downloads go to dir ("" for none), up to the driver's own argv.
func (s *Sandbox) args(dir, exe string) []string {
	a := []string{"--unshare-all", "--die-with-parent", "--cap-drop", "ALL",
		"--ro-bind", "/usr", "/usr"}
	for _, d := range []string{"/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"} {
		if target, err := os.Readlink(d); err == nil {
			a = append(a, "--symlink", target, d) // merged /usr
		} else if _, err := os.Stat(d); err == nil {
			a = append(a, "--ro-bind", d, d)
		}
	}
	for _, e := range etcFiles {
		a = append(a, "--ro-bind-try", "/etc/"+e, "/etc/"+e)
	}
	a = append(a, "--proc", "/proc", "--dev", "/dev",
		"--size", strconv.FormatInt(s.TmpSize, 10), "--tmpfs", "/tmp",
		"--setenv", "HOME", "/tmp", "--setenv", "TMPDIR", "/tmp", "--chdir", "/tmp")
	if exe != "" && !strings.HasPrefix(exe, "/usr/") {
		// A driver outside /usr (/opt/…): its directory, where such a
		// driver keeps its browser and resources, read-only.
		d := filepath.Dir(exe)
		a = append(a, "--ro-bind", d, d)
	}
	if dir != "" {
		a = append(a, "--bind", dir, dir)
	}
	return append(a, "--")
}

// sandboxEnv is a sandboxed driver's environment: the session's, over a
// plain PATH and locale — not the hub's, which may hold secrets.
// The proxy's variables come after the session's: the sandbox has no other
// way out, so a proxy named in browsers.json could not be reached anyway.
func sandboxEnv(session []string, marker string) []string {
	env := []string{"PATH=/usr/local/bin:/usr/bin:/bin", "LANG=C.UTF-8"}
	env = append(append(env, session...), egress.Env()...)
	return append(env, "HOME=/tmp", "TMPDIR=/tmp", MarkerEnv+"="+marker)
}

// prepare gives the sandbox's user the session's download directory, and a
// way through its parents (traversable, not listable: bubblewrap opens the
// path as that user).
func (s *Sandbox) prepare(dir string) error {
	if s.Cred == nil || dir == "" {
		return nil
	}
	for p := filepath.Dir(dir); p != "/" && p != "." && p != os.TempDir(); p = filepath.Dir(p) {
		if fi, err := os.Stat(p); err == nil && fi.Mode().Perm()&0o011 != 0o011 {
			if err := os.Chmod(p, fi.Mode().Perm()|0o011); err != nil {
				return err
			}
		}
	}
	return os.Chown(dir, int(s.Cred.Uid), int(s.Cred.Gid))
}

// enter finds the sandbox of the bubblewrap process pid and makes it
// reachable at the address it returns.
func (s *Sandbox) enter(ctx context.Context, pid int) (netip.Addr, error) {
	child, err := netns.Child(ctx, pid)
	if err != nil {
		return netip.Addr{}, err
	}
	return s.Dial.Add(child)
}

// openEgress serves the sandbox at a its proxy, on its own loopback; the
// proxy keeps the namespace until closed.
func (s *Sandbox) openEgress(ctx context.Context, a netip.Addr) (*egress.Proxy, error) {
	ln, err := s.Dial.Listen(ctx, a, "127.0.0.1:"+strconv.Itoa(egress.Port))
	if err != nil {
		return nil, err
	}
	g := s.Egress
	if g == nil {
		g = &egress.Guard{}
	}
	return egress.Serve(ln, g), nil
}

// listening says whether the sandbox's driver accepts connections yet, by
// connecting on its loopback.
func (s *Sandbox) listening(ctx context.Context, host string) (yes, known bool) {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	c, err := s.Dial.DialContext(ctx, "tcp", host)
	if err != nil {
		return false, true
	}
	c.Close()
	return true, true
}

// sessionTemp is the per-session TMPDIR of an unsandboxed driver: the
// browser's profile and uploads go there, and it goes with the session.
func sessionTemp(root string) (string, error) {
	if err := os.MkdirAll(root, 0o700); err != nil {
		return "", err
	}
	return os.MkdirTemp(root, "tmp-")
}
