package e2e

import (
	"encoding/json"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"io"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Live view and video, on real parts: the project's Chromium image headed on its
// virtual screen, x11vnc, a Go RFB client through the hub's /vnc/{id}, the
// project's ffmpeg recorder image, and Debian's ffprobe reading what it wrote.

// chromeSession creates a Chromium session with the given vendor options (a
// JSON object's members) and returns its id.
func chromeSession(t *testing.T, hubURL, options string) string {
	t.Helper()
	return chromeVersionSession(t, hubURL, "", options)
}

// chromeVersionSession is chromeSession for a browsers.json version ("" = the
// default).
func chromeVersionSession(t *testing.T, hubURL, version, options string) string {
	t.Helper()
	r := call(t, "POST", hubURL+"/wd/hub/session", `{"capabilities":{"alwaysMatch":{"browserName":"chrome","browserVersion":"`+version+`","selenoid:options":{`+options+`}}}}`)
	if r.status != 200 || r.Value.SessionID == "" {
		t.Fatalf("new session with %s: %d %s %s", options, r.status, r.Value.Error, r.Value.Message)
	}
	return r.Value.SessionID
}

// paint opens a page that is one solid colour.
func paint(t *testing.T, hubURL, id string, rgb [3]int) {
	t.Helper()
	page := fmt.Sprintf("data:text/html,<body style='margin:0;background:rgb(%d,%d,%d)'></body>", rgb[0], rgb[1], rgb[2])
	if r := call(t, "POST", hubURL+"/wd/hub/session/"+id+"/url", `{"url":"`+page+`"}`); r.status != 200 {
		t.Fatalf("navigate: %d %s", r.status, r.Value.Message)
	}
}

func execute(t *testing.T, hubURL, id, script string) any {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"script": script, "args": []any{}})
	var v struct{ Value any }
	if err := json.Unmarshal(rawCall(t, "POST", hubURL+"/wd/hub/session/"+id+"/execute/sync", string(body)), &v); err != nil {
		t.Fatal(err)
	}
	return v.Value
}

func near(got, want [3]int) bool {
	for i := range got {
		if math.Abs(float64(got[i]-want[i])) > 24 {
			return false
		}
	}
	return true
}

func statusSessionOf(t *testing.T, h *hub, id string) map[string]any {
	t.Helper()
	st := h.getJSON(t, "/status")
	for _, b := range st["browsers"].(map[string]any) {
		for _, v := range b.(map[string]any) {
			for _, q := range v.(map[string]any) {
				for _, s := range q.(map[string]any)["sessions"].([]any) {
					if s := s.(map[string]any); s["id"] == id {
						return s
					}
				}
			}
		}
	}
	t.Fatalf("session %s not in /status", id)
	return nil
}

// screenResolution sizes the Xvfb screen and the window; enableVNC serves the
// screen at /vnc/{id}, and the pixels a Go RFB client reads there are the page's.
func TestDockerScreenAndVNC(t *testing.T) {
	requireDocker(t)
	d := startDockerHub(t, instanceFor(t), "-limit", "2")
	id := chromeSession(t, d.url, `"enableVNC":true,"screenResolution":"1280x1024x24"`)
	if got := fmt.Sprint(execute(t, d.url, id, "return [screen.width, screen.height, outerWidth > 1200]")); got != "[1280 1024 true]" {
		t.Fatalf("screen.width, screen.height, outerWidth > 1200 = %s, want [1280 1024 true]: the screen and a window filling it", got)
	}
	if s := statusSessionOf(t, d.hub, id); s["vnc"] != true || s["screen"] != "1280x1024x24" {
		t.Fatalf("/status entry: vnc %v screen %v", s["vnc"], s["screen"])
	}
	wsURL := "ws" + strings.TrimPrefix(d.url, "http") + "/vnc/" + id
	if _, err := dialRFB(wsURL, "wrong"); err == nil {
		t.Fatal("a wrong VNC password was accepted")
	}
	vnc, err := dialRFB(wsURL, "selenoid")
	if err != nil {
		t.Fatal("RFB through the hub:", err)
	}
	defer vnc.Close()
	if vnc.width != 1280 || vnc.height != 1024 {
		t.Fatalf("the VNC framebuffer is %dx%d, want the session's 1280x1024", vnc.width, vnc.height)
	}
	for _, colour := range [][3]int{{255, 0, 0}, {0, 160, 255}} {
		paint(t, d.url, id, colour)
		var got [3]int
		// x11vnc finds changes by polling the screen: the page shows within
		// moments, and a busy machine's moments are long.
		for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
			px, err := vnc.frame()
			if err != nil {
				t.Fatal("framebuffer update:", err)
			}
			p := px[800*vnc.width+200] // below the toolbar, away from the pointer at the centre
			if got = [3]int{int(p >> 16 & 255), int(p >> 8 & 255), int(p & 255)}; near(got, colour) {
				break
			}
		}
		if !near(got, colour) {
			if px, err := vnc.frame(); err == nil {
				img := image.NewRGBA(image.Rect(0, 0, vnc.width, vnc.height))
				for i, p := range px {
					img.Set(i%vnc.width, i/vnc.width, color.RGBA{uint8(p >> 16), uint8(p >> 8), uint8(p), 255})
				}
				shot := filepath.Join(t.TempDir(), "vnc.png")
				if f, err := os.Create(shot); err == nil {
					png.Encode(f, img)
					f.Close()
					t.Logf("the screen over VNC: %s", shot)
				}
			}
			t.Fatalf("the screen's centre is rgb%v over VNC, the page is rgb%v", got, colour)
		}
	}

	// No VNC without enableVNC; the default screen is 1920x1080.
	plain := chromeSession(t, d.url, ``)
	if got := fmt.Sprint(execute(t, d.url, plain, "return [screen.width, screen.height]")); got != "[1920 1080]" {
		t.Fatalf("default screen %s, want [1920 1080]", got)
	}
	if r := call(t, "GET", d.url+"/vnc/"+plain, ""); r.status != 500 || !strings.Contains(r.Value.Message, "enableVNC") {
		t.Fatalf("/vnc/ of a session without enableVNC: %d %q", r.status, r.Value.Message)
	}
	if s := statusSessionOf(t, d.hub, plain); s["vnc"] != false {
		t.Fatalf("/status says vnc %v for a session without enableVNC", s["vnc"])
	}
	call(t, "DELETE", d.url+"/wd/hub/session/"+plain, "")

	// The socket closes when the session ends.
	call(t, "DELETE", d.url+"/wd/hub/session/"+id, "")
	_ = vnc.ws.SetReadDeadline(time.Now().Add(time.Minute))
	if _, err := io.Copy(io.Discard, vnc.ws); err != nil && strings.Contains(err.Error(), "timeout") {
		t.Fatal("the VNC socket stayed open after the session ended")
	}
	d.assertClean(t)
}

type probe struct {
	Streams []struct {
		CodecName  string `json:"codec_name"`
		Width      int    `json:"width"`
		Height     int    `json:"height"`
		RFrameRate string `json:"r_frame_rate"`
	} `json:"streams"`
	Format struct {
		Duration string `json:"duration"`
	} `json:"format"`
}

// ffprobe reads a video's streams and duration; it fails the test on a file
// that does not play.
func ffprobe(t *testing.T, file string) (probe, float64) {
	t.Helper()
	out, err := exec.Command("ffprobe", "-v", "error", "-print_format", "json", "-show_format", "-show_streams", file).Output()
	if err != nil {
		t.Fatalf("ffprobe %s: %v", file, err)
	}
	var p probe
	if err := json.Unmarshal(out, &p); err != nil || len(p.Streams) != 1 {
		t.Fatalf("ffprobe %s: %v %s", file, err, out)
	}
	dur, err := strconv.ParseFloat(p.Format.Duration, 64)
	if err != nil {
		t.Fatalf("ffprobe %s: duration %q", file, p.Format.Duration)
	}
	return p, dur
}

// coloursShown reads a video's frames, a few a second, at (x, y) and returns
// the colours seen, each change once.
func coloursShown(t *testing.T, file string, x, y int) [][3]int {
	t.Helper()
	out, err := exec.Command("ffmpeg", "-v", "error", "-i", file, "-vf", fmt.Sprintf("fps=5,crop=2:2:%d:%d", x, y),
		"-f", "rawvideo", "-pix_fmt", "rgb24", "-").Output()
	if err != nil || len(out) < 12 {
		t.Fatalf("frames of %s: %v (%d bytes)", file, err, len(out))
	}
	var seen [][3]int
	for i := 0; i+12 <= len(out); i += 12 { // a 2x2 crop: 4 pixels of 3 bytes
		c := [3]int{int(out[i]), int(out[i+1]), int(out[i+2])}
		if len(seen) == 0 || !near(seen[len(seen)-1], c) {
			seen = append(seen, c)
		}
	}
	return seen
}

// showsInOrder says whether the colours want appear among seen in that order.
func showsInOrder(seen, want [][3]int) bool {
	i := 0
	for _, c := range seen {
		if i < len(want) && near(c, want[i]) {
			i++
		}
	}
	return i == len(want)
}

// A recorded session: three colours for two seconds each, quit; the video is
// listed once complete, served with Range, decodes, lasts no longer than the
// session and its start, at the frame rate asked for, and shows the three
// colours in the order they were on screen. DELETE removes it. Where in the
// video each colour falls is not checked: on a busy machine the recorder's
// timing is the machine's.
func TestDockerVideo(t *testing.T) {
	requireDocker(t)
	d := startDockerHub(t, instanceFor(t), "-limit", "2")
	asked := time.Now()
	id := chromeSession(t, d.url, `"enableVideo":true,"videoFrameRate":10,"screenResolution":"1280x720x24"`)
	t0 := time.Now() // the session exists from its new-session answer to its DELETE's
	if s := statusSessionOf(t, d.hub, id); s["caps"].(map[string]any)["enableVideo"] != true {
		t.Fatalf("/status caps: %v", s["caps"])
	}
	if n := len(containers(t, d.instance)); n != 2 {
		t.Fatalf("%d containers for a recorded session, want the browser's and the recorder's", n)
	}
	colours := [][3]int{{255, 0, 0}, {0, 255, 0}, {0, 0, 255}}
	for _, c := range colours {
		paint(t, d.url, id, c)
		time.Sleep(2 * time.Second) // the scenario: each colour on screen for 2 s
	}
	call(t, "DELETE", d.url+"/wd/hub/session/"+id, "")
	end := time.Now()
	d.await(t, "[VIDEO_SAVED]")
	name := id + ".mp4"

	var names []string
	json.Unmarshal(rawCall(t, "GET", d.url+"/video/?json", ""), &names)
	if len(names) != 1 || names[0] != name {
		t.Fatalf("/video/?json lists %v, want [%s]", names, name)
	}
	req, _ := http.NewRequest("GET", d.url+"/video/"+name, nil)
	req.Header.Set("Range", "bytes=0-99")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	part, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 206 || len(part) != 100 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "video/") {
		t.Fatalf("Range request: %d, %d bytes, %q", resp.StatusCode, len(part), resp.Header.Get("Content-Type"))
	}
	file := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(file, []byte(rawCall(t, "GET", d.url+"/video/"+name, "")), 0o644); err != nil {
		t.Fatal(err)
	}
	p, dur := ffprobe(t, file)
	// The recorder starts with the browser's container, as Selenoid's does, so
	// the video also shows the browser starting: it lasts from about the
	// request to the end, at least from the answer to the end.
	session, asking := end.Sub(t0).Seconds(), t0.Sub(asked).Seconds()
	t.Logf("video: %.2fs, %s, %dx%d %s; session %.2fs after %.2fs of start-up", dur, p.Streams[0].RFrameRate, p.Streams[0].Width, p.Streams[0].Height, p.Streams[0].CodecName, session, asking)
	// The recorder runs from before the answer until after the DELETE: a
	// video longer than that by far is not this session's. The bound is loose
	// because the recorder's start and stop are a busy machine's too.
	if dur <= 0 || dur > session+asking+30 {
		t.Errorf("video lasts %.2fs; the session %.2fs, after %.2fs of start-up", dur, session, asking)
	}
	if p.Streams[0].RFrameRate != "10/1" || p.Streams[0].Width != 1280 || p.Streams[0].Height != 720 || p.Streams[0].CodecName != "h264" {
		t.Errorf("video stream %+v, want h264 1280x720 at 10/1", p.Streams[0])
	}
	if seen := coloursShown(t, file, 640, 360); !showsInOrder(seen, colours) {
		t.Errorf("the video shows %v at its centre, want %v in that order", seen, colours)
	}
	if r := call(t, "DELETE", d.url+"/video/"+name, ""); r.status != 200 {
		t.Fatalf("DELETE /video/%s: %d", name, r.status)
	}
	names = nil
	json.Unmarshal(rawCall(t, "GET", d.url+"/video/?json", ""), &names)
	if len(names) != 0 {
		t.Fatalf("after DELETE: %v", names)
	}
	for _, bad := range []string{"..%2Fx", "%2E%2E", ".hidden"} {
		if r := call(t, "GET", d.url+"/video/"+bad, ""); r.status != 400 && r.status != 404 {
			t.Errorf("/video/%s: %d", bad, r.status)
		}
	}
	d.assertClean(t)
}

func recorders(t *testing.T, instance string) []string {
	t.Helper()
	out, err := exec.Command("docker", "ps", "-aq", "--filter", "label=websummoner.instance="+instance, "--filter", "label=websummoner.role=recorder").Output()
	if err != nil {
		t.Fatal(err)
	}
	return strings.Fields(string(out))
}

// Every way a recorded session ends leaves a playable video: its idle timeout,
// -max-session-lifetime, the browser killed under it, and the hub stopped
// with SIGTERM (DELETE is TestDockerVideo's). The idle timeout and the
// lifetime are long enough that the test's own calls, each due before them
// (a paint after the start, the kill and the SIGTERM a few seconds in), are
// never late on a busy machine.
func TestDockerVideoSurvivesKillAndShutdown(t *testing.T) {
	requireDocker(t)
	d := startDockerHub(t, instanceFor(t), "-limit", "2", "-graceful-period", "1s", "-max-session-lifetime", "30s")
	idle := chromeSession(t, d.url, `"enableVideo":true,"videoName":"idle.mp4","sessionTimeout":"15s"`)
	paint(t, d.url, idle, [3]int{0, 255, 0})
	aged := chromeSession(t, d.url, `"enableVideo":true,"videoName":"lifetime.mp4"`)
	paint(t, d.url, aged, [3]int{0, 255, 0})
	for range 2 {
		d.await(t, "[VIDEO_SAVED]")
	}
	// Each video decodes and shows what its session showed; how long it lasts
	// is the busy machine's.
	recorded := func(name string, c [3]int) {
		t.Helper()
		file := filepath.Join(d.videos, name)
		if _, dur := ffprobe(t, file); dur <= 0 {
			t.Errorf("%s lasts %.2fs", name, dur)
		}
		if seen := coloursShown(t, file, 960, 540); !showsInOrder(seen, [][3]int{c}) {
			t.Errorf("%s shows %v at its centre, never the page's rgb%v", name, seen, c)
		}
	}
	for _, name := range []string{"idle.mp4", "lifetime.mp4"} {
		recorded(name, [3]int{0, 255, 0})
	}
	killed := chromeSession(t, d.url, `"enableVideo":true,"videoName":"killed.mp4"`)
	paint(t, d.url, killed, [3]int{255, 0, 0})
	time.Sleep(2 * time.Second) // something to record
	rec := recorders(t, d.instance)
	var browser string
	for _, c := range containers(t, d.instance) {
		if len(rec) == 1 && c != rec[0] {
			browser = c
		}
	}
	if browser == "" {
		t.Fatalf("containers %v, recorders %v", containers(t, d.instance), rec)
	}
	if out, err := exec.Command("docker", "kill", browser).CombinedOutput(); err != nil {
		t.Fatalf("docker kill: %v %s", err, out)
	}
	d.await(t, "[VIDEO_SAVED]")
	recorded("killed.mp4", [3]int{255, 0, 0})

	drained := chromeSession(t, d.url, `"enableVideo":true,"videoName":"drained.mp4"`)
	paint(t, d.url, drained, [3]int{0, 0, 255})
	time.Sleep(2 * time.Second)
	d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-d.done:
		if err != nil {
			t.Fatalf("exit: %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("hub did not exit after SIGTERM")
	}
	// The page was blue from its first paint until SIGTERM ended the session.
	recorded("drained.mp4", [3]int{0, 0, 255})
	entries, _ := os.ReadDir(d.videos)
	if len(entries) != 4 {
		t.Errorf("video directory holds %d entries, want the four videos and no temporary file", len(entries))
	}
	d.assertClean(t)
}

// A hub SIGKILLed with a recording session leaves a browser and a recorder; the
// next start of the same instance removes both.
func TestDockerRecorderSweptAfterHubKill(t *testing.T) {
	requireDocker(t)
	d := startDockerHub(t, instanceFor(t))
	chromeSession(t, d.url, `"enableVideo":true`)
	if n := len(containers(t, d.instance)); n != 2 {
		t.Fatalf("%d containers, want browser and recorder", n)
	}
	d.cmd.Process.Signal(syscall.SIGKILL)
	<-d.done
	if len(recorders(t, d.instance)) != 1 {
		t.Fatal("the recorder did not outlive the killed hub (nothing to sweep)")
	}
	again := runHub(t, hubBinary, d.args, strings.TrimPrefix(d.url, "http://"))
	if !strings.Contains(again.logs.String(), "[CONTAINERS_REMOVED] [2]") { // swept before [INIT]
		t.Fatalf("the restart did not sweep the browser and the recorder:\n%s", again.logs.String())
	}
	(&dockerHub{hub: again, instance: d.instance}).assertClean(t)
}

// screenResolution applies to a local headless Chromium too: its window and the
// screen the page sees. enableVideo is refused there, saying why.
func TestScreenResolutionLocalDriver(t *testing.T) {
	requireRealParts(t)
	h := startHub(t, "-limit", "1")
	id := chromeSession(t, h.url, `"screenResolution":"1280x1024x24"`)
	if got := fmt.Sprint(execute(t, h.url, id, "return [screen.width, screen.height, innerWidth]")); got != "[1280 1024 1280]" {
		t.Fatalf("screen.width, screen.height, innerWidth = %s, want [1280 1024 1280]", got)
	}
	call(t, "DELETE", h.url+"/wd/hub/session/"+id, "")
	r := call(t, "POST", h.url+"/wd/hub/session", `{"capabilities":{"alwaysMatch":{"browserName":"chrome","selenoid:options":{"enableVideo":true}}}}`)
	if r.status != 400 || !strings.Contains(r.Value.Message, "no screen to record") {
		t.Fatalf("enableVideo on a local driver: %d %q", r.status, r.Value.Message)
	}
	h.stop(t)
}
