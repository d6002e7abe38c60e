// Package launcher defines how the hub starts a browser for a session, whatever
// runs it (a local driver process, a Docker container), and the readiness wait
// they share.
package launcher

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/websummoner/websummoner/internal/config"
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

// Instance is one running browser and its driver.
type Instance interface {
	// URL is the driver's base URL, browsers.json "path" included; the hub appends
	// "/session…" to it.
	URL() *url.URL
	// Exited is closed when the driver or browser ends on its own, not through Stop.
	Exited() <-chan struct{}
	// ExitReason says why it exited, once Exited is closed.
	ExitReason() string
	// Describe names the instance for /status and logs: a container id, a pid.
	Describe() string
	// Stop ends the browser and frees everything it held; it is safe to call once
	// the instance has exited, and more than once.
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

// Readier is implemented by launchers whose backend can be down; /readyz asks it.
type Readier interface {
	Ready() (bool, string)
}

// ErrExited is returned by WaitReady when the instance exits before answering.
var ErrExited = errors.New("driver exited before it answered")

// WaitReady polls base+"/status" until the driver answers with any HTTP response,
// the instance exits (ErrExited), or ctx ends. The first poll is at once and the
// backoff starts at 1ms, doubling up to 50ms: a driver that listens in 5ms is
// found in about 5ms, not after a fixed sleep.
func WaitReady(ctx context.Context, client *http.Client, base *url.URL, exited <-chan struct{}) error {
	status := base.JoinPath("status").String()
	delay := time.Millisecond
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, status, nil)
		if err != nil {
			return err
		}
		resp, err := client.Do(req)
		if err == nil {
			resp.Body.Close()
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
		case <-t.C:
		}
		delay = min(2*delay, 50*time.Millisecond)
	}
}
