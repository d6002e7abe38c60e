package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestVideoCost measures what the screen and recording cost at -limit 2 on this
// machine: session start time (new-session request to answer) and the
// machine's CPU time per session, headless, headed, and headed with
// enableVideo, in the same run. It runs from make
// bench (WEBSUMMONER_VIDEO_COST=N sessions per mode) and make bench-short (a few).
// The numbers are reported, not asserted: they are the machine's. What is
// asserted holds on any machine: every session of every mode was created and
// ended, each recorded session left its video, which decodes as h264 and
// lasts some time, and no container (browser or recorder) is left.
func TestVideoCost(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("WEBSUMMONER_VIDEO_COST"))
	if n <= 0 {
		t.Skip("set WEBSUMMONER_VIDEO_COST=N (make bench) to measure recording's cost")
	}
	requireDocker(t)
	d := startDockerHub(t, instanceFor(t), "-limit", "2")
	warm := chromeSession(t, d.url, ``) // the image's files into the page cache
	call(t, "DELETE", d.url+"/wd/hub/session/"+warm, "")
	var report strings.Builder
	fmt.Fprintf(&report, "the project's Chromium image, -limit 2, %d sessions per mode, 2 clients, each: create, 3 pages over 3 s, quit\n", n)
	for _, mode := range []struct{ name, version, opts string }{
		{"headless", "headless", ``}, {"headed", "", ``}, {"headed + video", "", `"enableVideo":true`},
	} {
		starts := make([]time.Duration, 0, n)
		var ids []string
		var mu sync.Mutex
		cpu0, wall0 := cpuSeconds(t), time.Now()
		var wg sync.WaitGroup
		next := make(chan int, n)
		for i := range n {
			next <- i
		}
		close(next)
		for range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range next {
					t0 := time.Now()
					id := chromeVersionSession(t, d.url, mode.version, mode.opts)
					took := time.Since(t0)
					for _, c := range [][3]int{{255, 0, 0}, {0, 255, 0}, {0, 0, 255}} {
						paint(t, d.url, id, c)
						time.Sleep(time.Second) // the scenario: each page on screen for a second
					}
					if r := call(t, "DELETE", d.url+"/wd/hub/session/"+id, ""); r.status != 200 {
						t.Errorf("%s: DELETE %s answered %d %s", mode.name, id, r.status, r.Value.Message)
					}
					mu.Lock()
					starts = append(starts, took)
					ids = append(ids, id)
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		cpu, wall := cpuSeconds(t)-cpu0, time.Since(wall0)
		if len(starts) != n {
			t.Fatalf("%s: %d of %d sessions went through", mode.name, len(starts), n)
		}
		if mode.opts != "" {
			checkVideos(t, d, ids)
		}
		slices.Sort(starts)
		fmt.Fprintf(&report, "%-15s start p50 %4.0f ms  p90 %4.0f ms   CPU %.2f s per session (machine, %d cores busy %.0f%%)   wall %.1f s\n",
			mode.name, ms(starts[len(starts)/2]), ms(starts[len(starts)*9/10]), cpu/float64(n), cores(t), 100*cpu/wall.Seconds()/float64(cores(t)), wall.Seconds())
	}
	t.Log("\n" + report.String())
	if out := os.Getenv("WEBSUMMONER_VIDEO_COST_OUT"); out != "" {
		os.WriteFile(out, []byte(report.String()), 0o644)
	}
	d.assertClean(t)
}

// checkVideos waits for the recorded sessions' videos and checks each: the
// session's file, decodable (an MP4 is whole only once its recorder has
// finished it), h264, lasting some time. Their length is not compared with
// the session's: on a busy machine it is the recorder's. The recorders'
// removal, after the save, is assertClean's to check.
func checkVideos(t *testing.T, d *dockerHub, ids []string) {
	t.Helper()
	for range ids {
		d.await(t, "[VIDEO_SAVED]") // saved after the DELETE's answer
	}
	for _, id := range ids {
		file := filepath.Join(d.videos, id+".mp4")
		p, dur := ffprobe(t, file)
		if p.Streams[0].CodecName != "h264" || dur <= 0 {
			t.Errorf("%s: %s, %.2fs, want h264 lasting some time", file, p.Streams[0].CodecName, dur)
		}
	}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// cpuSeconds is the machine's busy CPU time so far (/proc/stat: all but idle
// and iowait), which counts the hub, the engine and every container.
func cpuSeconds(t *testing.T) float64 {
	t.Helper()
	data, err := os.ReadFile("/proc/stat")
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(strings.SplitN(string(data), "\n", 2)[0])[1:]
	var busy float64
	for i, v := range f {
		x, _ := strconv.ParseFloat(v, 64)
		if i != 3 && i != 4 && i < 8 { // user nice system idle iowait irq softirq steal
			busy += x
		}
	}
	return busy / 100 // USER_HZ
}

func cores(t *testing.T) int {
	data, _ := os.ReadFile("/proc/stat")
	return strings.Count(string(data), "\ncpu")
}
