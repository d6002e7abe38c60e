// Package retention bounds a directory of kept session files (logs, videos) by
// age and total size, removing the oldest first, so that -log-output-dir and
// -video-output-dir do not fill the host's disk.
package retention

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/websummoner/websummoner/internal/logtag"
)

// Defaults of Options' zero fields.
const (
	// DefaultInterval is how often the directory is swept after the first time.
	DefaultInterval = time.Minute
	// DefaultSettle is how long since a file's last write before it may be
	// removed: a file written within it may be a session's, still open.
	DefaultSettle = 10 * time.Second
)

// Options bound one directory.
type Options struct {
	// Kind names what the directory holds ("log", "video"): the metric's label
	// and the flags the log lines name (-<kind>-retention-age).
	Kind string
	// Dir is the directory; its files, not its subdirectories, are bounded.
	Dir string
	// MaxAge removes files last written longer ago than this. Zero: no bound.
	MaxAge time.Duration
	// MaxSize removes the oldest files until the rest take at most this many
	// bytes. Zero: no bound.
	MaxSize int64
	// Interval is how often the directory is swept. Zero: DefaultInterval.
	Interval time.Duration
	// Settle skips files written within this long. Zero: DefaultSettle.
	Settle time.Duration
	// Live, if set, names files in use (a running session's log); they are
	// never removed. Nil: none beyond what Settle and hidden names protect.
	Live func(name string) bool
}

// Validate checks the bounds, naming the flags.
func (o Options) Validate() error {
	switch {
	case o.MaxAge < 0:
		return fmt.Errorf("-%s-retention-age must be 0 (keep everything) or a positive duration such as 168h (got %v)", o.Kind, o.MaxAge)
	case o.MaxSize < 0:
		return fmt.Errorf("-%s-retention-size must be 0 (keep everything) or a positive size such as 10g (got %d bytes)", o.Kind, o.MaxSize)
	case o.Interval < 0, o.Settle < 0:
		return fmt.Errorf("%s retention: the interval and settle time must not be negative", o.Kind)
	}
	return nil
}

// Enabled reports whether either bound is set.
func (o Options) Enabled() bool { return o.Dir != "" && (o.MaxAge > 0 || o.MaxSize > 0) }

// Retention removes what a directory holds beyond its bounds.
type Retention struct {
	opts    Options
	log     *slog.Logger
	removed prometheus.Counter
}

// New returns a Retention for opts.Dir; it touches nothing until Sweep or Run.
func New(opts Options, log *slog.Logger, reg prometheus.Registerer) (*Retention, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	if opts.Interval == 0 {
		opts.Interval = DefaultInterval
	}
	if opts.Settle == 0 {
		opts.Settle = DefaultSettle
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	vec := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "websummoner_retention_removed_total",
		Help: "Kept files (logs, videos) removed by -log-retention-* and -video-retention-*, by kind.",
	}, []string{"kind"})
	if reg != nil {
		// The log and video retentions share the counter, each with its label.
		if err := reg.Register(vec); err != nil {
			are, ok := errors.AsType[prometheus.AlreadyRegisteredError](err)
			if !ok {
				return nil, err
			}
			vec = are.ExistingCollector.(*prometheus.CounterVec)
		}
	}
	return &Retention{opts: opts, log: log, removed: vec.WithLabelValues(opts.Kind)}, nil
}

// Run sweeps at once, then every Interval, until ctx ends.
func (r *Retention) Run(ctx context.Context) {
	if !r.opts.Enabled() {
		return
	}
	t := time.NewTicker(r.opts.Interval)
	defer t.Stop()
	for {
		r.Sweep()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

type file struct {
	name string
	size int64
	mod  time.Time
}

// Sweep removes, oldest first, the files older than MaxAge and then those
// beyond MaxSize, and returns how many it removed. Files written within
// Settle, held open by this process (a video being copied, a running
// session's log), live ones and hidden ones other than a copy's temporary
// are never removed, but count towards the size.
func (r *Retention) Sweep() int {
	if !r.opts.Enabled() {
		return 0
	}
	entries, err := os.ReadDir(r.opts.Dir)
	if err != nil {
		logtag.Event(r.log, slog.LevelWarn, "", "RETENTION_FAILED", r.opts.Dir, err)
		return 0
	}
	now := time.Now()
	var files []file
	var total int64
	for _, e := range entries {
		if !e.Type().IsRegular() {
			continue
		}
		info, err := e.Info()
		if err != nil {
			continue // gone meanwhile
		}
		files = append(files, file{e.Name(), info.Size(), info.ModTime()})
		total += info.Size()
	}
	slices.SortFunc(files, func(a, b file) int { return cmp.Or(a.mod.Compare(b.mod), strings.Compare(a.name, b.name)) })
	removed := 0
	var open map[string]bool // read once a file is to go
	for _, f := range files {
		var why string
		switch {
		case r.opts.MaxAge > 0 && now.Sub(f.mod) > r.opts.MaxAge:
			why = fmt.Sprintf("older than -%s-retention-age %v", r.opts.Kind, r.opts.MaxAge)
		case r.opts.MaxSize > 0 && total > r.opts.MaxSize:
			why = fmt.Sprintf("the %s files take %d bytes, over -%s-retention-size %d", r.opts.Kind, total, r.opts.Kind, r.opts.MaxSize)
		default:
			continue
		}
		if now.Sub(f.mod) < r.opts.Settle || hidden(f.name) || (r.opts.Live != nil && r.opts.Live(f.name)) {
			continue // possibly still written
		}
		if open == nil {
			open = openIn(r.opts.Dir)
		}
		if open[f.name] {
			continue // a running session's log, quiet for a while: the hub still writes it
		}
		if err := os.Remove(filepath.Join(r.opts.Dir, f.name)); err != nil {
			if !errors.Is(err, os.ErrNotExist) {
				logtag.Event(r.log, slog.LevelWarn, "", "RETENTION_FAILED", f.name, err)
			}
			continue
		}
		total -= f.size
		removed++
		r.removed.Inc()
		logtag.Event(r.log, slog.LevelInfo, "", "RETENTION_REMOVED", f.name, why)
	}
	return removed
}

// hidden reports a file the sweep leaves alone whatever its age: a dot file
// that is not a video copy's temporary (".<name>.<hex>.part"). A copy's
// temporary is removed as any file is once settled and not held open: one
// that a hub killed mid-copy left behind counted towards the size for ever,
// and every later video went in its place.
func hidden(name string) bool {
	return strings.HasPrefix(name, ".") && !strings.HasSuffix(name, ".part")
}

// openIn returns the names of the files in dir this process holds open, from
// /proc/self/fd: a driver's log the process launcher writes for as long as
// its session runs, however long since its last line.
func openIn(dir string) map[string]bool {
	open := map[string]bool{}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return open
	}
	if real, err := filepath.EvalSymlinks(abs); err == nil {
		abs = real
	}
	fds, _ := os.ReadDir("/proc/self/fd")
	for _, fd := range fds {
		target, err := os.Readlink(filepath.Join("/proc/self/fd", fd.Name()))
		if err == nil && filepath.Dir(target) == abs {
			open[filepath.Base(target)] = true
		}
	}
	return open
}
