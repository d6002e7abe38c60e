// Package launcher defines how the hub starts a browser for a session, whatever
// runs it (a local driver process, a Docker container), and the readiness wait
// they share.
package launcher

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/websummoner/websummoner/internal/config"
	"github.com/websummoner/websummoner/internal/logtag"
	"github.com/websummoner/websummoner/internal/webdriver"
)

// Request is what a launcher needs to start one browser.
type Request struct {
	// ID is the hub's request id, for log lines.
	ID string
	// Browser is the browsers.json entry the request resolved to.
	Browser config.Resolved
	// Options are the client's vendor options (env, time zone, screen, labels).
	Options webdriver.Options
}

// Endpoints say where a running session's services are. Driver is always set;
// every other one is nil when the instance does not offer that service, so a
// handler for a side channel needs no knowledge of how the browser runs.
type Endpoints struct {
	// Driver is the WebDriver base URL, browsers.json "path" included; the hub
	// appends "/session…" to it.
	Driver *url.URL
	// DevTools is the browser's DevTools HTTP and WebSocket endpoint (Selenoid's
	// image contract: port 7070).
	DevTools *url.URL
	// VNC is the RFB server of the browser's screen (port 5900), as tcp://host:port.
	VNC *url.URL
	// Files is the file server of the browser's downloads (port 8080).
	Files *url.URL
	// Clipboard is the clipboard service (port 9090).
	Clipboard *url.URL
	// Log follows the driver's (or container's) output while the session runs.
	Log LogSource
	// Proxy is the browser's only way out, for a browser that is told it by
	// a flag rather than by its environment (WebKitGTK's MiniBrowser); nil:
	// the browser goes out directly.
	Proxy *url.URL
}

// Container is what an Instance that runs in a container says of it, for
// /status's containerInfo (Selenoid's shape).
type Container interface {
	// ContainerInfo is the container's full id and its address on its network
	// ("" if it has none).
	ContainerInfo() (id, ip string)
}

// LogSource is a session's live output.
type LogSource interface {
	// Follow writes the output from now on to w until ctx ends or the output
	// does; what was written before is not repeated.
	Follow(ctx context.Context, w io.Writer) error
}

// Instance is one running browser and its driver.
type Instance interface {
	// Endpoints says where the session's driver and side services are.
	Endpoints() Endpoints
	// Exited is closed when the driver or browser ends on its own, not through Stop.
	Exited() <-chan struct{}
	// ExitReason says why it exited, once Exited is closed.
	ExitReason() string
	// Describe names the instance for /status and logs: a container id, a pid.
	Describe() string
	// SessionCreated tells the instance the driver's session id and the
	// capabilities it answered with, once the session exists: what it keeps per
	// session (a log file) takes the id, and a side service the driver reports
	// (a local browser's DevTools address) joins Endpoints.
	SessionCreated(id string, caps json.RawMessage)
	// Stop ends the browser and frees everything it held; it is safe to call once
	// the instance has exited, and more than once (later calls return the first
	// call's error). The error says what could not be freed.
	Stop(ctx context.Context) error
}

// Launcher starts browsers. Start blocks until the driver answers over HTTP or
// fails; on failure nothing it started is left running.
type Launcher interface {
	Start(ctx context.Context, r Request) (Instance, error)
}

// Phases of a browser start, as reported in errors and the start_failures metric.
const (
	PhaseImage      = "image"       // the browser's image is missing or unreadable
	PhaseStart      = "start"       // creating or spawning the browser
	PhaseStartup    = "startup"     // waiting for the driver to answer
	PhaseNewSession = "new-session" // the driver's own new-session call
)

// StartError is a failed start: which phase, and whether the engine or host is to
// blame (counted by the start gate) rather than the client.
type StartError struct {
	Phase string
	// Browser is "name version" for the message.
	Browser string
	// Msg says what happened and what to change.
	Msg string
	Err error
	// Engine marks a failure of the engine or host (the start gate counts these).
	Engine bool
	// Down marks a backend that does not answer at all (the Docker engine is
	// unreachable): the request may be retried later, and is answered 500 with Retry-After.
	Down bool
}

func (e *StartError) Error() string {
	return fmt.Sprintf("%s: %s", e.Browser, e.Msg)
}

func (e *StartError) Unwrap() error { return e.Err }

// Checker is implemented by launchers that can tell, before a request takes a slot
// or queues, that a start would fail at once (engine down, image missing).
type Checker interface {
	Check(ctx context.Context, b config.Resolved) error
}

// OptionsChecker is a Launcher that knows, before a request queues, which of
// a client's options it could not start a browser with: the client's
// mistake, answered at once rather than after a wait for a slot.
type OptionsChecker interface {
	// CheckOptions returns a *webdriver.ArgumentError for such options, nil
	// otherwise (what is wrong with the entry is Start's to say).
	CheckOptions(b config.Resolved, o webdriver.Options) error
}

// Readier is implemented by launchers whose backend can be down; /readyz asks it.
type Readier interface {
	Ready() (bool, string)
}

// Default start policy values, used for a zero Options field.
const (
	DefaultStartupTimeout = 30 * time.Second
	DefaultStopTimeout    = 30 * time.Second
	DefaultInstance       = "websummoner"
)

// Options are the start policy every launcher shares. The zero value works:
// each zero field takes its default.
type Options struct {
	// StartupTimeout is -service-startup-timeout: how long a started browser's
	// driver may take to answer; zero means DefaultStartupTimeout.
	StartupTimeout time.Duration
	// StopTimeout is -session-delete-timeout: how long a browser has to stop before
	// it is killed; zero means DefaultStopTimeout.
	StopTimeout time.Duration
	// Instance names this hub; what it starts carries the name, so what an earlier
	// run of the same name left is found and removed. Empty means DefaultInstance.
	Instance string
	// LogDir is -log-output-dir: a session's output is kept there, as its
	// logName or <session-id>.log, when it asked (enableLog) or SaveAllLogs.
	// Empty: no log files.
	LogDir string
	// SaveAllLogs is -save-all-logs: keep every session's log, asked or not.
	SaveAllLogs bool
	// ReadyTransport carries the readiness polls of a driver's /status; each
	// poll's connection is closed after it. Nil: an http.Transport of its own.
	// The hub passes its Transport to drivers, which dials into sandboxes.
	ReadyTransport http.RoundTripper
	// TimeZone is the hub's own time zone (an IANA name): the TZ of a
	// container whose client names none, as under Selenoid, since a
	// container does not inherit the hub's environment. Empty: WithDefaults
	// sets HubTimeZone(); still empty, the hub's zone has no name and
	// containers get no TZ of the hub's.
	TimeZone string
}

// KeepLog says whether a session's output goes to a file.
func (o Options) KeepLog(opts webdriver.Options) bool {
	return o.LogDir != "" && (opts.EnableLog || o.SaveAllLogs)
}

// LogFile is the file a kept log is finally named: the client's logName, or
// <session-id>.log.
func LogFile(opts webdriver.Options, sessionID string) string {
	if opts.LogName != "" {
		return opts.LogName
	}
	return SafeName(sessionID) + ".log"
}

// SafeName is a session id made fit to be part of a file name: the id is the
// driver's, and a driver is not trusted, so a '/' or a leading '.' must not
// make it a path. Letters, digits, '.', '_' and '-' stay; the rest become '_'.
func SafeName(id string) string {
	b := []byte(id)
	for k, c := range b {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-' || c == '.' && k > 0) {
			b[k] = '_'
		}
	}
	if len(b) == 0 {
		return "_"
	}
	return string(b[:min(len(b), 200)])
}

// WriteKeptLog writes a session's kept log (LogFile, in LogDir) through
// write, never over another session's file: where the name is taken the log
// gets one with the session id in it (CreateKept), and LOG_RENAMED says so.
// The caller has checked KeepLog and opened what write copies, so a log
// that cannot be read leaves no empty file.
func (o Options) WriteKeptLog(opts webdriver.Options, sessionID string, log *slog.Logger, requestID string, write func(io.Writer) error) error {
	want := LogFile(opts, sessionID)
	f, saved, err := CreateKept(o.LogDir, want, sessionID)
	if err != nil {
		return fmt.Errorf("keeping the log: %w (check -log-output-dir)", err)
	}
	if saved != want {
		logtag.Event(log, slog.LevelWarn, requestID, "LOG_RENAMED", fmt.Sprintf("%s exists in -log-output-dir; this session's log is %s", want, saved))
	}
	err = write(f)
	if err != nil {
		// A log that failed before its first byte (a full disk) is no log:
		// an empty file would be listed and served as one. A part of one
		// stays, for what it tells.
		if st, serr := f.Stat(); serr == nil && st.Size() == 0 {
			_ = os.Remove(filepath.Join(o.LogDir, saved))
		}
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// LogVideo logs how a session's video ended: VIDEO_FAILED with why, or
// VIDEO_SAVED with its file's name (none: no session, nothing kept).
func LogVideo(log *slog.Logger, requestID, name string, err error) {
	switch {
	case err != nil:
		logtag.Event(log, slog.LevelWarn, requestID, "VIDEO_FAILED", err)
	case name != "":
		logtag.Event(log, slog.LevelInfo, requestID, "VIDEO_SAVED", name)
	}
}

// maxKeptExt is the longest extension keptNames keeps whole; a longer one
// is part of the name, which may be cut.
const maxKeptExt = 16

// keptNames are the names tried, in order, for a kept file asked to be name:
// name itself, then name with "-<session id>" before its extension, then that
// with a random suffix, for a name someone took on purpose.
func keptNames(name, sessionID string) []string {
	ext := filepath.Ext(name)
	if len(ext) > maxKeptExt { // "v1.<a test's long title>": no extension, all stem
		ext = ""
	}
	stem := strings.TrimSuffix(name, ext)
	alt := "-" + SafeName(sessionID)
	if n := max(0, 240-len(alt)-len(ext)); n < len(stem) { // a file name is at most 255 bytes
		for n > 0 && !utf8.RuneStart(stem[n]) { // whole characters: names take accents
			n--
		}
		stem = stem[:n]
	}
	names := []string{name, stem + alt + ext}
	for range 4 {
		tok := make([]byte, 4)
		_, _ = rand.Read(tok)
		names = append(names, stem+alt+"-"+hex.EncodeToString(tok)+ext)
	}
	return names
}

// CreateKept creates a kept log or video in dir as name, never replacing a file
// there (another session's, or anything else): where name exists, the file is
// created under a name with the session id in it. It returns the file and the
// name it has; the caller logs when that is not name.
func CreateKept(dir, name, sessionID string) (*os.File, string, error) {
	var err error
	for _, n := range keptNames(name, sessionID) {
		var f *os.File
		f, err = os.OpenFile(filepath.Join(dir, n), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		if err == nil {
			return f, n, nil
		}
		if !errors.Is(err, fs.ErrExist) {
			break
		}
	}
	return nil, "", fmt.Errorf("creating %s in %s: %w", name, dir, err)
}

// RenameKept gives the file at tmp its kept name in dir, as CreateKept names
// it, never replacing a file there: a hard link fails where the name exists,
// as a rename would not. It returns the name the file has; on an error, tmp
// is left as it was.
func RenameKept(tmp, dir, name, sessionID string) (string, error) {
	var err error
	for _, n := range keptNames(name, sessionID) {
		if err = os.Link(tmp, filepath.Join(dir, n)); err == nil {
			return n, os.Remove(tmp)
		}
		if !errors.Is(err, fs.ErrExist) {
			break
		}
	}
	return "", fmt.Errorf("naming %s %s in %s: %w", tmp, name, dir, err)
}

// WithDefaults returns o with every zero field set to its default.
func (o Options) WithDefaults() Options {
	if o.StartupTimeout <= 0 {
		o.StartupTimeout = DefaultStartupTimeout
	}
	if o.StopTimeout <= 0 {
		o.StopTimeout = DefaultStopTimeout
	}
	if o.Instance == "" {
		o.Instance = DefaultInstance
	}
	if o.TimeZone == "" {
		o.TimeZone = HubTimeZone()
	}
	return o
}

// HubTimeZone names the zone this process runs in, for a container to run
// in the same one: TZ's zone when set, else the zone /etc/localtime links
// to. "" when it has no name (a copied /etc/localtime).
func HubTimeZone() string {
	return zoneName(time.Local.String(), func() (string, error) { return os.Readlink("/etc/localtime") })
}

// zoneName names the zone of local, time.Local's name: the TZ variable's
// value, "UTC" when the process fell back to it, or "Local" when the zone
// came from /etc/localtime, whose symlink target localtime reads.
func zoneName(local string, localtime func() (string, error)) string {
	if local == "Local" {
		target, err := localtime()
		if err != nil {
			return ""
		}
		local = target
	}
	if strings.HasPrefix(local, "/") || strings.Contains(local, "zoneinfo/") {
		// A file's path (TZ=/usr/share/zoneinfo/Europe/Paris, or the link's
		// target): the name is what follows zoneinfo/, which an image's
		// zoneinfo also has; a file elsewhere the image need not have.
		i := strings.LastIndex(local, "zoneinfo/")
		if i < 0 {
			return ""
		}
		local = local[i+len("zoneinfo/"):]
	}
	if _, err := time.LoadLocation(local); err != nil || local == "" || local == "Local" {
		return ""
	}
	return local
}

// MaxInstance is the longest -instance.
const MaxInstance = 80

// Validate says which flag holds a value no launcher can work with.
func (o Options) Validate() error {
	switch {
	case o.StartupTimeout < 0:
		return fmt.Errorf("-service-startup-timeout must be a positive duration such as 30s (got %v)", o.StartupTimeout)
	case o.StopTimeout < 0:
		return fmt.Errorf("-session-delete-timeout must be a positive duration such as 30s (got %v)", o.StopTimeout)
	case strings.ContainsAny(o.Instance, "/= \t\n"):
		return fmt.Errorf("-instance must be a name without '/', '=' or spaces (got %q)", o.Instance)
	case len(o.Instance) > MaxInstance:
		// It names the instance's lock, a Unix socket, whose names have
		// 107 bytes; a longer one failed as "another hub is running".
		return fmt.Errorf("-instance must be at most %d bytes (got %d)", MaxInstance, len(o.Instance))
	}
	return nil
}

// Env is a session's environment, in one order for every launcher, later
// entries winning: the client's "env", then what the hub derives from the
// client's options (TZ, SCREEN_RESOLUTION, ENABLE_VNC; ENABLE_VIDEO for a
// container), then the operator's browsers.json "env". The operator has the
// last word over what runs on the host. Each name appears once, at the place
// of its first mention. A local driver process runs on the hub's host, in
// its time zone; a container gets ContainerEnv.
func Env(r Request) []string { return env(r, "") }

// ContainerEnv is Env for a browser in a container, with Selenoid's time
// zone: a container does not inherit the hub's environment, so TZ is
// hubZone (Options.TimeZone) unless the client's "timeZone" names a zone
// time.LoadLocation knows, and a client's or the operator's "env" TZ wins
// over hubZone as over any default. An unknown "timeZone" is dropped for
// hubZone and logged on log, as Selenoid drops it (BAD_TIMEZONE): a
// container told an unknown zone would run in UTC, whatever the hub's.
func ContainerEnv(r Request, hubZone string, log *slog.Logger) []string {
	if !KnownZone(r.Options.TimeZone) {
		logtag.Event(log, slog.LevelWarn, r.ID, "BAD_TIMEZONE", r.Options.TimeZone,
			fmt.Sprintf("not a time zone the hub knows; the browser gets the hub's (%q), as under Selenoid", hubZone))
		r.Options.TimeZone = ""
	}
	return env(r, hubZone)
}

// KnownZone reports whether tz is empty or a zone time.LoadLocation knows.
// "Local" is not a zone a container can be told.
func KnownZone(tz string) bool {
	if tz == "" {
		return true
	}
	_, err := time.LoadLocation(tz)
	return err == nil && tz != "Local"
}

// env is Env with hubZone, if not "", as the TZ every other layer may
// override.
func env(r Request, hubZone string) []string {
	var base []string
	if hubZone != "" {
		base = append(base, "TZ="+hubZone)
	}
	var derived []string
	if r.Options.TimeZone != "" {
		derived = append(derived, "TZ="+r.Options.TimeZone)
	}
	if r.Options.ScreenResolution != "" {
		// Always WxHxDEPTH: aerokube's images hand it to Xvfb's -screen,
		// which takes no screen without its depth (the X server never comes up).
		derived = append(derived, "SCREEN_RESOLUTION="+r.Options.Screen())
	}
	if r.Options.EnableVNC {
		derived = append(derived, "ENABLE_VNC=true")
	}
	if r.Browser.Browser != nil && !r.Browser.Image.IsCommand() {
		// Selenoid's image contract: a container always says whether it is
		// recorded (its entrypoint may start a recorder of its own).
		derived = append(derived, fmt.Sprintf("ENABLE_VIDEO=%v", r.Options.EnableVideo))
	}
	var out []string
	at := map[string]int{}
	for i, layer := range [][]string{base, r.Options.Env, derived, r.Browser.Env} {
		for _, kv := range layer {
			name, _, _ := strings.Cut(kv, "=")
			if i == 1 && !clientEnvAllowed(r.Browser, name) {
				continue // refused before queueing (CheckClient); dropped here too
			}
			if i, ok := at[name]; ok {
				out[i] = kv
				continue
			}
			at[name] = len(out)
			out = append(out, kv)
		}
	}
	return out
}

// ReadyClient is the HTTP client a launcher polls a driver's /status with:
// over ReadyTransport, or else with no connection kept (each poll may hit a
// driver that is not listening yet). Redirects are not followed: any answer
// means the driver listens. It sets no Timeout: WaitListening bounds each
// poll by its context (pollTimeout), and a Client.Timeout cost a goroutine and a
// timer per poll (net/http's setRequestCancel), run on the hub's one busy
// thread beside the start they belong to.
func (o Options) ReadyClient() *http.Client {
	rt := o.ReadyTransport
	if rt == nil {
		rt = &http.Transport{DisableKeepAlives: true}
	}
	return &http.Client{Transport: rt,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

// pollTimeout bounds one readiness poll, so one stuck poll cannot eat the
// start-up budget.
const pollTimeout = 2 * time.Second

// errRefused is a poll a refused connect answered.
var errRefused = errors.New("connection refused")

// ErrExited is returned by WaitReady when the instance exits before answering.
var ErrExited = errors.New("driver exited before it answered")

// WaitReady polls base+"/status" until the driver answers with any HTTP response,
// the instance exits (ErrExited), or ctx ends. The first poll is at once and the
// backoff starts at 1ms, doubling up to 50ms: a driver that listens in 5ms is
// found in about 5ms, not after a fixed sleep. On loopback a refused connect
// stands in for a poll while the driver does not listen yet, every
// millisecond for the first 100 ms; once something accepts without answering
// (Docker's port proxy), every round is a poll.
func WaitReady(ctx context.Context, client *http.Client, base *url.URL, exited <-chan struct{}) error {
	return WaitListening(ctx, client, base, exited, nil, nil)
}

// WaitListening is WaitReady for a driver that runs on this machine, where
// whether anything listens on its port can be asked of the kernel
// (listening; known is false when it cannot say) instead of tried with a
// connect. Not for a published container port: with Docker's userland proxy
// off nothing listens there until the container's driver does.
//
// said, if not nil, receives when the driver writes to its output, and a
// receive is a look at once: drivers say so when they listen (wdstub's
// "listening on", chromedriver's "started successfully"), and a wait that
// only looked every millisecond found a listening driver half a millisecond
// late on average, more on an idle machine where a sleeping Go process's
// timers fire late. At most one such look comes between two of the backoff's,
// which goes on unchanged behind them: a driver that writes without pause
// (or an HTTP poll per look, behind a proxy) costs at most twice the looks.
func WaitListening(ctx context.Context, client *http.Client, base *url.URL, exited <-chan struct{}, listening func() (yes, known bool), said <-chan struct{}) error {
	notYet := func() bool {
		if listening != nil {
			if yes, known := listening(); known {
				return !yes
			}
		}
		return refused(base.Host)
	}
	status := base.JoinPath("status").String()
	delay := time.Millisecond
	precheck := true
	hear := said // nil between a look the driver's words asked for and the next round
	t0 := time.Now()
	for {
		var (
			resp *http.Response
			err  = errRefused // not listening yet: no HTTP poll needed to know
		)
		if !precheck || !notYet() {
			pctx, cancel := context.WithTimeout(ctx, pollTimeout)
			req, rerr := http.NewRequestWithContext(pctx, http.MethodGet, status, nil)
			if rerr != nil {
				cancel()
				return rerr
			}
			// No connection of a poll is kept: what answered may not be the
			// driver (another program on its port, Docker's port proxy), and
			// the Transport is the one the hub's commands share.
			req.Close = true
			// A connection accepted and a poll failed: something listens for
			// the driver (Docker's port proxy does, before the container's
			// driver does); only the poll tells from here on.
			if resp, err = client.Do(req); err != nil && !errors.Is(err, syscall.ECONNREFUSED) {
				precheck = false
			}
			if err == nil {
				resp.Body.Close()
			}
			cancel()
		}
		if err == nil {
			select {
			case <-exited:
				// Whatever answered, it was not our driver.
				return ErrExited
			default:
				return nil
			}
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-exited:
			t.Stop()
			return ErrExited
		case <-hear:
			t.Stop()
			hear = nil
			continue
		case <-t.C:
		}
		hear = said
		if errors.Is(err, errRefused) && time.Since(t0) < refusedFor {
			continue // a refused connect is cheap: look again in a millisecond
		}
		delay = min(2*delay, 50*time.Millisecond)
	}
}

// Said is a driver output's writer for WaitListening's said: each Write
// signals it, never blocking (one signal waits; more add nothing), and
// keeps nothing.
type Said chan struct{}

// NewSaid returns a Said ready to signal.
func NewSaid() Said { return make(Said, 1) }

// Write signals s.
func (s Said) Write(p []byte) (int, error) {
	select {
	case s <- struct{}{}:
	default:
	}
	return len(p), nil
}

// refusedFor is how long WaitReady looks every millisecond while connects are
// refused: a driver process usually listens within it, and the backoff's
// doubling would add up to as much again to each start.
const refusedFor = 100 * time.Millisecond
