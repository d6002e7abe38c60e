package bench

import (
	"io"
	"os"
	"path/filepath"
	"testing"
)

// TestWaitersFlatRunsTwoHubsAtOnce: the flatness target's two queues are live
// together — each hub with an -instance of its own, since a hub refuses to
// start beside another of the same instance — their hand-offs alternate, and
// each result is its own hub's, the big one's carrying the target.
func TestWaitersFlatRunsTwoHubsAtOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the hub and the stub driver")
	}
	ctx := t.Context()
	dir := t.TempDir()
	t.Chdir("../..") // Build builds ./cmd/... from the module's root
	hub, stub, err := Build(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	// The hubs' own temporary directory, to see what they leave in it.
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	e := &Env{Hub: hub, Stub: stub, Short: true, Dir: dir, Log: io.Discard}
	small, big, err := e.WaitersFlat(ctx, 1, 3, 12, 3)
	if err != nil {
		t.Fatal(err)
	}
	if left, _ := os.ReadDir(filepath.Join(tmp, "websummoner-downloads")); len(left) != 0 {
		var names []string
		for _, d := range left {
			names = append(names, d.Name())
		}
		t.Errorf("the stopped hubs left %q in $TMPDIR/websummoner-downloads", names)
	}
	for _, c := range []struct {
		r       *Result
		waiters float64
	}{{small, 3}, {big, 12}} {
		f := c.r.Figures
		if f["waiters"] != c.waiters || f["queued_seen"] != c.waiters || f["handoffs"] != 3 {
			t.Errorf("a hub of %v waiters: waiters %v, queued %v, hand-offs %v; want %v, %v, 3",
				c.waiters, f["waiters"], f["queued_seen"], f["handoffs"], c.waiters, c.waiters)
		}
		if f["handoff_p99_ms"] <= 0 {
			t.Errorf("a hub of %v waiters: hand-off p99 %v ms", c.waiters, f["handoff_p99_ms"])
		}
	}
	if len(small.Targets) != 0 {
		t.Errorf("the small hub's result has targets: %+v", small.Targets)
	}
	if len(big.Targets) != 1 || big.Targets[0].Name != "hand-off p99 at 12 waiters over at 3" ||
		big.Targets[0].Value != big.Figures["handoff_p99_ms"]/small.Figures["handoff_p99_ms"] {
		t.Errorf("the big hub's targets: %+v; want the hand-off p99 over the small hub's", big.Targets)
	}
}
