package bench

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// A /proc/PID/stat line's CPU times are found after the command's name, even
// a name with spaces and parentheses, and a line that is not one is refused
// with what was wrong.
func TestParseStatCPU(t *testing.T) {
	// Fields 14 and 15 (utime, stime) are 250 and 37 ticks; 16 and 17
	// (the children's) must not count.
	line := "4242 (web (x) summoner) S 1 4242 4242 0 -1 4194560 1000 0 0 0 250 37 900 800 20 0 12 0 123 1000000 200 18446744073709551615\n"
	got, err := parseStatCPU(line)
	if err != nil {
		t.Fatal(err)
	}
	if want := 2.87; math.Abs(got-want) > 1e-9 {
		t.Fatalf("parseStatCPU = %v s, want %v (250+37 ticks at %d a second)", got, want, userHZ)
	}
	for _, bad := range []string{"", "4242 web S 1", "4242 (a) S 1 2 3", "4242 (a) S 1 4242 4242 0 -1 4194560 1000 0 0 0 x 37 0 0"} {
		if _, err := parseStatCPU(bad); err == nil || !strings.Contains(err.Error(), "/proc stat line") {
			t.Errorf("parseStatCPU(%q) = %v, want an error naming the stat line", bad, err)
		}
	}
}

// The tool's own process reads as itself: ownCPU grows when this test burns
// CPU, and a pid that does not exist is an error, not zero.
func TestOwnCPUOfThisProcess(t *testing.T) {
	c0, err := ownCPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	th0, err := threadsRuntime(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	// Spin until the scheduler's exact count says 50 ms have been used: two
	// ticks of /proc/PID/stat's 10 ms at least, whatever the machine's speed.
	for {
		th, err := threadsRuntime(os.Getpid())
		if err != nil {
			t.Fatal(err)
		}
		if runtimeSince(th0, th).run >= uint64(50*time.Millisecond) {
			break
		}
	}
	c1, err := ownCPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if c1-c0 < 0.02 {
		t.Fatalf("/proc/self/stat's CPU grew %.3f s while the threads ran 50 ms", c1-c0)
	}
	if _, err := ownCPU(1 << 30); err == nil {
		t.Fatal("ownCPU of a pid that cannot exist gave no error")
	}
}

func TestParseSchedstat(t *testing.T) {
	v, err := parseSchedstat("123456789 2000 17\n")
	if err != nil || v != (threadStat{run: 123456789, runs: 17}) {
		t.Fatalf("parseSchedstat = %+v, %v; want run 123456789, runs 17", v, err)
	}
	for _, bad := range []string{"", "1 2", "x 2 3", "1 2 x"} {
		if _, err := parseSchedstat(bad); err == nil {
			t.Errorf("parseSchedstat(%q) gave no error", bad)
		}
	}
}

// A thread new since the first reading counts in full, one gone is not
// counted (lost, not negative), and a reused id that went down counts from 0.
func TestRuntimeSince(t *testing.T) {
	before := map[int]threadStat{1: {100, 10}, 2: {50, 5}, 3: {900, 90}}
	after := map[int]threadStat{1: {160, 13}, 3: {40, 4}, 4: {25, 2}}
	if got, want := runtimeSince(before, after), (threadStat{60 + 40 + 25, 3 + 4 + 2}); got != want {
		t.Fatalf("runtimeSince = %+v, want %+v", got, want)
	}
}

// Every target comes first in turn, and each round holds every target once.
func TestRoundOrder(t *testing.T) {
	first := map[int]int{}
	for i := range 6 {
		o := roundOrder(3, i)
		s := slices.Clone(o)
		slices.Sort(s)
		if !slices.Equal(s, []int{0, 1, 2}) {
			t.Fatalf("round %d: order %v is not each of 3 targets once", i, o)
		}
		first[o[0]]++
	}
	if first[0] != 2 || first[1] != 2 || first[2] != 2 {
		t.Fatalf("in 6 rounds the targets came first %v times, want 2 each", first)
	}
}

// lats is n latencies of d each, with one slow outlier, as every command kind.
func rbLats(d time.Duration, n int) rbPath {
	p := rbPath{run: true, byKind: map[string][]time.Duration{}}
	for i := range n {
		v := d
		if i == n-1 {
			v = 10 * d
		}
		p.lat = append(p.lat, v)
		k := rbCommands[i%len(rbCommands)].name
		p.byKind[k] = append(p.byKind[k], v)
	}
	return p
}

// rbPaths are direct, hub and Selenoid paths at the given p50s and own CPU
// seconds (ticks of /proc/PID/stat, and exact), 400 commands each.
func rbPaths(directMs, hubMs, selMs float64, hubCPU, selCPU, hubExact, selExact float64) []rbPath {
	ms := func(v float64) time.Duration { return time.Duration(v * 1e6) }
	direct, hub, sel := rbLats(ms(directMs), 400), rbLats(ms(hubMs), 400), rbLats(ms(selMs), 400)
	direct.name, direct.cpu, direct.schedNs = "chromedriver, direct", -1, -1
	hub.name, hub.cpu, hub.schedNs = "hub", hubCPU, hubExact*1e9
	sel.name, sel.cpu, sel.schedNs = "Selenoid", selCPU, selExact*1e9
	return []rbPath{direct, hub, sel}
}

func verdicts(r *Result) map[string]bool {
	v := map[string]bool{}
	for _, t := range r.Targets {
		v[t.Name] = t.Met
	}
	return v
}

const (
	tDirect   = "hub p50 over chromedriver's own (direct) p50"
	tSelenoid = "hub p50 over Selenoid's p50"
	tCPU      = "hub's own CPU per command over Selenoid's"
)

// The three targets, each met and each missed, from the figures they are
// named for; the p99 is not the one slow outlier in 400.
func TestRealBrowserResultTargets(t *testing.T) {
	r := realBrowserResult(rbPaths(10, 10.4, 10.6, 0.30, 0.50, 0.31, 0.52), 400)
	if v := verdicts(r); len(v) != 3 || !v[tDirect] || !v[tSelenoid] || !v[tCPU] {
		t.Fatalf("hub 1.04× direct, 0.98× Selenoid, CPU 0.6×: targets %+v, want all three met", r.Targets)
	}
	f := r.Figures
	if math.Abs(f["hub_over_direct_p50"]-1.04) > 1e-9 || math.Abs(f["hub_over_selenoid_cpu"]-0.6) > 1e-9 || f["hub_p99_ms"] != 10.4 {
		t.Fatalf("figures %v: want hub/direct 1.04, CPU 0.6, hub p99 10.4 ms", f)
	}
	if got := f["hub_cpu_us_per_cmd"]; math.Abs(got-750) > 1e-6 {
		t.Fatalf("hub CPU per command %v µs, want 0.30 s / 400 = 750", got)
	}
	r = realBrowserResult(rbPaths(10, 11, 10.6, 0.45, 0.50, 0.46, 0.52), 400)
	if v := verdicts(r); v[tDirect] || v[tSelenoid] || v[tCPU] {
		t.Fatalf("hub 1.1× direct, 1.04× Selenoid, CPU 0.9×: targets %+v, want all three missed", r.Targets)
	}
}

// With fewer ticks than minCPUTicks on a side, the CPU target is judged on
// the exact figures, and the note says so: a hub at 0 ticks is not "met".
func TestRealBrowserResultFewTicks(t *testing.T) {
	r := realBrowserResult(rbPaths(10, 10, 10, 0, 0.05, 0.045, 0.05), 400)
	if v := verdicts(r); v[tCPU] {
		t.Fatalf("hub 0 ticks but 0.9× Selenoid's exact CPU: the target was met: %+v", r.Targets)
	}
	if got := r.Figures["hub_over_selenoid_cpu"]; math.Abs(got-0.9) > 1e-9 {
		t.Fatalf("CPU ratio %v, want the exact 0.045/0.05 = 0.9", got)
	}
	if !strings.Contains(strings.Join(r.Notes, "\n"), "schedstat, as /proc/PID/stat had fewer than") {
		t.Fatalf("notes %q do not say which counter judged the target", r.Notes)
	}
}

// Without -selenoid: Selenoid's row reads "not run" throughout, its targets
// are not judged (nor counted missed), and the note says how to run it.
func TestRealBrowserResultWithoutSelenoid(t *testing.T) {
	paths := rbPaths(10, 10.2, 0, 0.3, 0, 0.3, 0)
	paths[2] = rbPath{name: "Selenoid", cpu: -1, schedNs: -1}
	r := realBrowserResult(paths, 400)
	if len(r.Targets) != 1 || r.Targets[0].Name != tDirect || !r.Targets[0].Met {
		t.Fatalf("targets %+v: want the hub-over-direct one alone, met", r.Targets)
	}
	last := r.Rows[len(r.Rows)-1]
	if last[0] != "Selenoid" || slices.ContainsFunc(last[1:], func(c string) bool { return c != "not run" }) {
		t.Fatalf("Selenoid's row %q: want \"not run\" in every column", last)
	}
	if _, ok := r.Figures["selenoid_p50_ms"]; ok {
		t.Fatal("a Selenoid figure without Selenoid")
	}
	if !strings.Contains(strings.Join(r.Notes, "\n"), "-selenoid PATH") {
		t.Fatalf("notes %q do not say how to run Selenoid", r.Notes)
	}
}

// The bare ReverseProxy's row, when it ran, has its own figures and the hub's
// ratios over it, as information: the three targets stay the only ones. When
// it did not run, its row reads "not run" and no ratio over it is made up.
func TestRealBrowserResultFloor(t *testing.T) {
	paths := rbPaths(10, 10.4, 10.6, 0.30, 0.50, 0.31, 0.52)
	floor := rbLats(time.Duration(10.25*1e6), 400)
	floor.name, floor.cpu, floor.schedNs, floor.runs = rbFloor, 0.25, 0.248e9, 4000
	r := realBrowserResult(append(paths, floor), 400)
	if len(r.Targets) != 3 {
		t.Fatalf("targets %+v: the floor added or took away a target", r.Targets)
	}
	f := r.Figures
	if math.Abs(f["hub_over_reverseproxy_p50"]-10.4/10.25) > 1e-9 || math.Abs(f["hub_over_reverseproxy_cpu"]-0.31/0.248) > 1e-9 || f["reverseproxy_p50_ms"] != 10.25 {
		t.Fatalf("figures %v: want hub/floor p50 %.4f, CPU %.4f, floor p50 10.25", f, 10.4/10.25, 0.31/0.248)
	}
	if got := r.Rows[1]; got[0] != rbFloor || got[2] != "10.250" || got[5] != "625 (exact 620)" || got[6] != "10.0" {
		t.Fatalf("second row %q: want the floor's, p50 10.250, CPU 625 (exact 620), 10.0 thread runs a command", got)
	}
	if !strings.Contains(strings.Join(r.Notes, "\n"), "bare httputil.ReverseProxy") {
		t.Fatalf("notes %q do not give the hub over the floor", r.Notes)
	}
	r = realBrowserResult(paths, 400)
	if got := r.Rows[1]; got[0] != rbFloor || slices.ContainsFunc(got[1:], func(c string) bool { return c != "not run" }) {
		t.Fatalf("second row without the floor %q: want \"not run\" in every column", got)
	}
	if _, ok := r.Figures["hub_over_reverseproxy_p50"]; ok {
		t.Fatal("a ratio over a floor that did not run")
	}
}

// The bare ReverseProxy refuses a spec that is not one port and one loopback
// target, saying which variable was wrong.
func TestReverseProxySpec(t *testing.T) {
	for _, bad := range []string{"", "x=127.0.0.1:1", "1=10.0.0.1:80", "1=127.0.0.1:2,3=127.0.0.1:4", "127.0.0.1:80"} {
		if err := ReverseProxy(bad); err == nil || !strings.Contains(err.Error(), ReverseProxyEnv) {
			t.Errorf("ReverseProxy(%q) = %v, want an error naming %s", bad, err, ReverseProxyEnv)
		}
	}
}

// The chart is drawn from the figures, with Selenoid's bars only when it ran,
// and a result without figures is an error, not an empty picture.
func TestRealBrowserChart(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		name     string
		selenoid bool
	}{{"with.svg", true}, {"without.svg", false}} {
		paths := rbPaths(10, 10.2, 10.5, 0.3, 0.5, 0.3, 0.5)
		if !c.selenoid {
			paths[2] = rbPath{name: "Selenoid", cpu: -1, schedNs: -1}
		}
		if err := RealBrowserChart(realBrowserResult(paths, 400), filepath.Join(dir, c.name)); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(filepath.Join(dir, c.name))
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.Contains(string(b), ">Selenoid<"); got != c.selenoid {
			t.Fatalf("%s: Selenoid drawn %v, want %v", c.name, got, c.selenoid)
		}
		if !strings.HasSuffix(string(b), "</svg>\n") {
			t.Fatalf("%s is not a whole SVG", c.name)
		}
	}
	if err := RealBrowserChart(&Result{Figures: map[string]float64{}}, filepath.Join(dir, "none.svg")); err == nil {
		t.Fatal("a chart of no figures gave no error")
	}
}

// The markdown table has every scenario's header and rows, pipes escaped, a
// long table left to the raw output, and targets with their verdicts.
func TestWriteMarkdown(t *testing.T) {
	r := realBrowserResult(rbPaths(10, 11, 10.5, 0.3, 0.5, 0.3, 0.5), 400)
	long := &Result{Scenario: "jam", Header: []string{"a|b"}}
	for range maxMarkdownRows + 1 {
		long.Rows = append(long.Rows, []string{"x"})
	}
	piped := &Result{Scenario: "piped", Header: []string{"a|b"}, Rows: [][]string{{"c"}}}
	path := filepath.Join(t.TempDir(), "results.md")
	if err := WriteMarkdown(path, []*Result{r, long, piped}, "2 CPUs (test)"); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	md := string(b)
	for _, want := range []string{"Machine: 2 CPUs (test).", "### realbrowser", "| path | commands | p50 ms |", "| --- |", "| hub | 400 | 11.000 |",
		"| hub p50 over chromedriver's own (direct) p50 | 1.100 × | ≤ 1.050 × | **missed** |", "### jam", "(13 rows: see the tool's output.)"} {
		if !strings.Contains(md, want) {
			t.Errorf("the markdown has no %q:\n%s", want, md)
		}
	}
	if !strings.Contains(md, `| a\|b |`) {
		t.Errorf("a pipe in a cell was not escaped:\n%s", md)
	}
}

// The summary is the realbrowser table and every target, and it is the same
// when written again from the results' JSON lines, which have no table rows.
func TestWriteSummaryFromJSON(t *testing.T) {
	rb := realBrowserResult(rbPaths(10, 10.2, 10.5, 0.3, 0.5, 0.3, 0.5), 400)
	churn := &Result{Scenario: "churn-4", Targets: []Target{{Name: "sessions/s", Value: 0.8, Limit: 0.85, Unit: "×", Min: true, Met: false}}}
	dir := t.TempDir()
	direct := filepath.Join(dir, "direct.md")
	if err := WriteSummary(direct, []*Result{rb, churn}, "2 CPUs (test)"); err != nil {
		t.Fatal(err)
	}
	var again []*Result
	for _, r := range []*Result{rb, churn} {
		b, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		var back Result
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatal(err)
		}
		again = append(again, &back)
	}
	fromJSON := filepath.Join(dir, "json.md")
	if err := WriteSummary(fromJSON, again, "2 CPUs (test)"); err != nil {
		t.Fatal(err)
	}
	a, _ := os.ReadFile(direct)
	b, _ := os.ReadFile(fromJSON)
	if string(a) != string(b) {
		t.Fatalf("from the JSON lines:\n%s\nwant, as from the run:\n%s", b, a)
	}
	for _, want := range []string{"| hub | 400 | 10.200 | 10.200 | 1.020 | 750 (exact 750) |", "| Selenoid | 400 | 10.500 |",
		"| realbrowser | hub p50 over Selenoid's p50 | 0.971 × | ≤ 1.000 × | met |", "| churn-4 | sessions/s | 0.800 × | ≥ 0.850 × | **missed** |"} {
		if !strings.Contains(string(a), want) {
			t.Errorf("the summary has no %q:\n%s", want, a)
		}
	}
}
