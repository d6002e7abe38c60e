// Command wsbench is WebSummoner's load tool: it builds the hub and the stub
// driver, runs the scenarios of docs/benchmarks.md on loopback, and prints for
// each a table and one JSON line. -short runs every scenario for seconds.
// -selenoid names a Selenoid binary, built from its source by hand, for the
// realbrowser scenario's side-by-side row; the tool never builds one.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/websummoner/websummoner/internal/bench"
)

func main() {
	if spec := os.Getenv(bench.RelayEnv); spec != "" {
		// The proxy scenario's relay: this binary, re-run as a separate process.
		fmt.Fprintln(os.Stderr, "wsbench relay:", bench.Relay(spec))
		os.Exit(1)
	}
	if spec := os.Getenv(bench.ReverseProxyEnv); spec != "" {
		// The realbrowser scenario's bare httputil.ReverseProxy, likewise.
		fmt.Fprintln(os.Stderr, "wsbench reverse proxy:", bench.ReverseProxy(spec))
		os.Exit(1)
	}
	if port := os.Getenv(bench.EchoEnv); port != "" {
		// The wakeup scenario's echo process, likewise.
		fmt.Fprintln(os.Stderr, "wsbench echo:", bench.Echo(port))
		os.Exit(1)
	}
	short := flag.Bool("short", false, "run every scenario for seconds (a smoke test)")
	only := flag.String("scenario", "all", "realbrowser, proxy, churn, waiters, jam, stampede, soak, wakeup, pool, fairshare, kube, or all (comma-separated)")
	selenoid := flag.String("selenoid", "", "the realbrowser scenario also runs this Selenoid binary (built from its source by hand) in its local-driver mode with the same chromedriver; empty: Selenoid's columns read \"not run\"")
	rbCommands := flag.Int("realbrowser-commands", 0, "commands each realbrowser target runs, a multiple of 4 (0: 480, or 40 with -short)")
	soakFor := flag.Duration("soak", 60*time.Minute, "how long the soak scenario runs (full mode; 2m with -short)")
	out := flag.String("out", "", "write the JSON results and SVG charts to this directory")
	churnFor := flag.Duration("churn", time.Minute, "how long each churn run lasts (full mode): the floor and the hub (in alternating turns of 1 s at 4 clients, 4.8 s at 32), and at 4 clients the hub beside 2,000 sleeping processes")
	churnCommands := flag.Int("churn-commands", 5, "commands each churn session runs between its create and its DELETE (0 to measure the creation path without the proxied commands' load)")
	waiters := flag.Int("waiters", 10000, "waiting requests in the waiters scenario (full mode; a second hub with 1,000 waiters — a quarter of these if that is fewer — is filled beside it and their hand-offs alternate, for the flatness target; 15000 is the moonshot row)")
	sessions := flag.String("sessions", "1,4,32", "the proxy scenario's session counts (comma-separated; the targets are set at 1, 4 and 32)")
	flag.Parse()
	var concs []int
	for f := range strings.SplitSeq(*sessions, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 || n > 64 {
			fmt.Fprintf(os.Stderr, "wsbench: -sessions %q: want counts from 1 to 64, comma-separated\n", *sessions)
			os.Exit(2)
		}
		concs = append(concs, n)
	}
	if *rbCommands < 0 || *rbCommands%4 != 0 || *rbCommands > 100000 {
		fmt.Fprintf(os.Stderr, "wsbench: -realbrowser-commands %d: want a multiple of 4 from 4 to 100000 (0 for the default)\n", *rbCommands)
		os.Exit(2)
	}
	if *churnCommands < 0 || *churnCommands > 1000 {
		fmt.Fprintf(os.Stderr, "wsbench: -churn-commands %d: want 0 to 1000\n", *churnCommands)
		os.Exit(2)
	}
	// A timeout's SIGTERM winds the run down as ^C does: hubs stopped, the
	// build directory removed.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	rb := bench.RealBrowserOptions{Selenoid: *selenoid, Commands: *rbCommands}
	if err := run(ctx, *short, *only, *out, *churnFor, *churnCommands, *waiters, *soakFor, concs, rb); err != nil {
		fmt.Fprintln(os.Stderr, "wsbench:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, short bool, only, out string, churnFor time.Duration, churnCommands, waiters int, soakFor time.Duration, concs []int, rb bench.RealBrowserOptions) error {
	dir, err := os.MkdirTemp("", "wsbench")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	hub, stub, err := bench.Build(ctx, dir)
	if err != nil {
		return err
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	env := &bench.Env{Hub: hub, Stub: stub, Self: self, Short: short, Dir: dir, Log: os.Stderr}
	want := func(s string) bool { return only == "all" || strings.Contains(","+only+",", ","+s+",") }
	if out != "" {
		if err := os.MkdirAll(out, 0o755); err != nil {
			return err
		}
	}
	var results []*bench.Result
	keep := func(r *bench.Result, err error) error {
		if err == nil && ctx.Err() != nil {
			// Cut short (^C, a timeout's SIGTERM): the figures of a run that
			// stopped early are not a result, and a target "met" by an empty
			// measurement would say otherwise.
			return ctx.Err()
		}
		if r != nil {
			r.Print(os.Stdout)
			results = append(results, r)
		}
		return err
	}
	// The real browser first: it is the row a user reads first.
	if want("realbrowser") {
		r, err := env.RealBrowser(ctx, rb)
		switch {
		case errors.Is(err, bench.ErrNoBrowser) && only == "all":
			fmt.Printf("\n== realbrowser\nskipped: %v\n", err)
		default:
			if err := keep(r, err); err != nil {
				return err
			}
			if out != "" && r != nil {
				if err := bench.RealBrowserChart(r, filepath.Join(out, "realbrowser.svg")); err != nil {
					return err
				}
			}
		}
	}
	if want("proxy") {
		r, err := env.Proxy(ctx, concs)
		if err := keep(r, err); err != nil {
			return err
		}
		if out != "" {
			if err := bench.LatencyChart(r, concs, filepath.Join(out, "latency.svg")); err != nil {
				return err
			}
		}
	}
	if want("wakeup") {
		if err := keep(env.Wakeup(ctx)); err != nil {
			return err
		}
	}
	if want("churn") {
		d := churnFor
		if short {
			d = 3 * time.Second
		}
		for _, c := range []int{4, 32} {
			if err := keep(env.Churn(ctx, c, churnCommands, d)); err != nil {
				return err
			}
		}
	}
	if want("waiters") {
		// 1,000 hand-offs, so that the p99 is not the second-slowest of a
		// few: one process start stalled by the machine once moved a p99 of
		// 200 hand-offs by half.
		m, handoffs := waiters, 1000
		if short {
			m, handoffs = 200, 20
		}
		// The hand-off must not grow with the queue: a hub with 1,000
		// waiters (50 in short mode) is filled beside this one, and their
		// hand-offs alternate (WaitersFlat), so the machine's drift weighs on
		// both alike.
		small := min(1000, m/4)
		if small < 1 {
			if err := keep(env.Waiters(ctx, 1, m, handoffs)); err != nil {
				return err
			}
		} else {
			sr, r, err := env.WaitersFlat(ctx, 1, small, m, handoffs)
			if err := keep(sr, err); err != nil {
				return err
			}
			if err := keep(r, nil); err != nil {
				return err
			}
		}
	}
	if want("jam") {
		qt, every, d := 20*time.Second, time.Second, 50*time.Second
		if short {
			qt, every, d = 2*time.Second, 250*time.Millisecond, 6*time.Second
		}
		r, points, err := env.Jam(ctx, qt, every, d)
		if err := keep(r, err); err != nil {
			return err
		}
		if out != "" {
			if err := bench.JamChart(r, points, filepath.Join(out, "jam.svg")); err != nil {
				return err
			}
		}
	}
	if want("soak") {
		d := soakFor
		if short {
			d = 2 * time.Minute
		}
		if err := keep(env.Soak(ctx, d)); err != nil {
			return err
		}
	}
	if want("stampede") {
		n, outage, hold, capTime := 200, 5*time.Second, 2*time.Second, 3*time.Minute
		if short {
			n, outage, hold, capTime = 30, 2*time.Second, 300*time.Millisecond, 20*time.Second
		}
		var fixed, adaptive *bench.Result
		for _, gate := range []string{"20", "adaptive"} {
			r, err := env.Stampede(ctx, gate, n, 3, outage, hold, capTime)
			if err := keep(r, err); err != nil {
				return err
			}
			if gate == "20" {
				fixed = r
			} else {
				adaptive = r
			}
		}
		ff, af := fixed.Figures["failed_starts_after_recovery"], adaptive.Figures["failed_starts_after_recovery"]
		fmt.Printf("stampede: pinned gate %v failed starts after recovery, adaptive %v (%.1f× fewer); drain %.1fs vs %.1fs\n",
			ff, af, ff/max(af, 1), fixed.Figures["drain_s"], adaptive.Figures["drain_s"])
	}
	if want("pool") {
		// The warm pool: a real browser's hit, near hit and cold start, on a
		// local driver and in containers, then adaptive sizing under Poisson
		// arrivals of stub drivers. Without a browser (or Docker and its
		// image) only that part is skipped.
		r, err := env.PoolHits(ctx)
		switch {
		case errors.Is(err, bench.ErrNoBrowser):
			fmt.Printf("\n== pool-realbrowser\nskipped: %v\n", err)
		default:
			if err := keep(r, err); err != nil {
				return err
			}
		}
		// The same rounds on Chromium containers (the Docker launcher):
		// without Docker or the image, skipped.
		r, err = env.PoolContainers(ctx)
		switch {
		case errors.Is(err, bench.ErrNoChromiumImage):
			fmt.Printf("\n== pool-container\nskipped: %v\n", err)
		default:
			if err := keep(r, err); err != nil {
				return err
			}
		}
		if err := keep(env.PoolAdaptive(ctx)); err != nil {
			return err
		}
	}
	if want("kube") {
		// The Kubernetes launcher on the test cluster (make k8s-up): a pod's
		// create beside a container's, and a burst of pods at once. Without
		// a cluster, or Docker and the images, skipped.
		r, err := env.Kube(ctx)
		switch {
		case errors.Is(err, bench.ErrNoCluster), errors.Is(err, bench.ErrNoChromiumImage):
			fmt.Printf("\n== kube\nskipped: %v\n", err)
		default:
			if err := keep(r, err); err != nil {
				return err
			}
		}
	}
	if want("fairshare") {
		// Tenants (-quotas): a latecomer behind a flood, weights 1:2, and the
		// queue's cost at 10,000 waiters with one tenant and with ten.
		if err := keep(env.FairShare(ctx)); err != nil {
			return err
		}
	}
	if out != "" {
		if ratios := floorRatios(results); len(ratios) > 0 {
			if err := bench.FloorChart(ratios, filepath.Join(out, "floor.svg")); err != nil {
				return err
			}
		}
		machine := bench.Machine()
		if err := bench.WriteMarkdown(filepath.Join(out, "results.md"), results, machine); err != nil {
			return err
		}
		if err := bench.WriteSummary(filepath.Join(out, "summary.md"), results, machine); err != nil {
			return err
		}
		f, err := os.Create(filepath.Join(out, "results.jsonl"))
		if err != nil {
			return err
		}
		defer f.Close()
		for _, r := range results {
			fmt.Fprintln(f, jsonLine(r))
		}
	}
	missed, failed := 0, 0
	for _, r := range results {
		failed += r.CorrectnessMissed()
		for _, t := range r.Targets {
			if !t.Met && !t.Correctness {
				missed++
			}
		}
	}
	fmt.Printf("\nwsbench: %d scenarios run, %d timing targets missed (reported), %d correctness targets failed\n", len(results), missed, failed)
	if failed > 0 {
		return fmt.Errorf("%d correctness targets failed (marked FAILED above): the hub answered wrongly or left something behind", failed)
	}
	return nil
}

// floorRatios are the hub's figures over their same-run floors, for the
// chart: the real browser's, the stub proxy's, the churn's and the warm
// pool's (a ready browser's create over a cold start's). A ratio that
// is reported, not a target, has Target 0.
func floorRatios(results []*bench.Result) []bench.Ratio {
	var out []bench.Ratio
	for _, r := range results {
		f := r.Figures
		switch r.Scenario {
		case "realbrowser":
			out = append(out, bench.Ratio{Label: "real browser: p50 over chromedriver's own", Value: f["hub_over_direct_p50"], Target: 1.05})
			if v, ok := f["hub_over_selenoid_p50"]; ok {
				out = append(out,
					bench.Ratio{Label: "real browser: p50 over Selenoid's", Value: v, Target: 1.0},
					bench.Ratio{Label: "real browser: own CPU/command over Selenoid's", Value: f["hub_over_selenoid_cpu"], Target: 0.75})
			}
		case "proxy":
			for _, c := range []int{1, 4, 32} {
				if v, ok := f[fmt.Sprintf("c%d_ratio_p50", c)]; ok {
					out = append(out, bench.Ratio{Label: fmt.Sprintf("stub driver: command p50, %d sessions", c), Value: v})
				}
			}
		case "pool-container":
			out = append(out,
				bench.Ratio{Label: "warm pool (containers): hit create p50 over a cold start's", Value: f["hit_over_cold_p50"], Target: 0.1},
				bench.Ratio{Label: "warm pool (containers): near hit create p50 over a cold start's", Value: f["near_over_cold_p50"], Target: 0.6})
		case "pool-realbrowser":
			out = append(out,
				bench.Ratio{Label: "warm pool (local driver): hit create p50 over a cold start's", Value: f["hit_over_cold_p50"], Target: 0.1},
				// Reported: a local near hit skips no container start.
				bench.Ratio{Label: "warm pool (local driver): near hit create p50 over a cold start's", Value: f["near_over_cold_p50"]})
		case "pool-adaptive":
			out = append(out, bench.Ratio{Label: "warm pool adaptive: sessions/s at full load over off's", Value: f["full_adaptive_over_off"], Target: 0.95, Higher: true})
		case "churn-4", "churn-32":
			c := int(f["concurrency"])
			out = append(out,
				bench.Ratio{Label: fmt.Sprintf("sessions/s, %d clients", c), Value: f["sessions_per_s"] / f["floor_sessions_per_s"], Target: 0.85, Higher: true},
				bench.Ratio{Label: fmt.Sprintf("create p50, %d clients", c), Value: f["create_p50_ms"] / f["floor_create_p50_ms"]})
			if c == 4 {
				out = append(out, bench.Ratio{Label: "DELETE p50 over the driver's, 4 clients", Value: f["delete_p50_ms"] / f["driver_delete_p50_ms"], Target: 1.2})
			}
		}
	}
	return out
}
