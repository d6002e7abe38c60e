package e2e

import (
	"bytes"
	"context"
	"image/png"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// The status page in a real headless Chromium (chromedp, the machine's
// Chromium): a session appears, a request queues, the hub turns congested
// during a jam, and everything clears when the jam does. The page's
// screenshot at the jam must be a PNG; with WEBSUMMONER_SCREENSHOT=1 the test
// writes it into docs/status-page.png (the README shows it), and otherwise
// leaves the checkout as it found it.
func TestStatusPage(t *testing.T) {
	requireRealParts(t)
	requireDocker(t)
	d := startDockerHub(t, instanceFor(t), "-limit", "4", "-queue-timeout", "4s", "-service-startup-timeout", "2m")

	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(), append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath("/usr/bin/chromium"), chromedp.NoSandbox, chromedp.DisableGPU, chromedp.WindowSize(1280, 820),
		chromedp.Flag("disable-dev-shm-usage", true))...)
	defer cancelAlloc()
	ctx, cancel := chromedp.NewContext(alloc, chromedp.WithErrorf(func(string, ...any) {}))
	defer cancel()
	ctx, cancelT := context.WithTimeout(ctx, 5*time.Minute)
	defer cancelT()
	until := func(what, js string) {
		t.Helper()
		var ok bool
		if err := chromedp.Run(ctx, chromedp.Poll(js, &ok, chromedp.WithPollingTimeout(2*time.Minute))); err != nil {
			var body string
			chromedp.Run(ctx, chromedp.Text("body", &body))
			t.Fatalf("the page never showed %s: %v\n%s", what, err, body)
		}
	}
	sessionsText := `document.querySelector("#sessions tbody").innerText`
	if err := chromedp.Run(ctx, chromedp.Navigate(d.url+"/ui/")); err != nil {
		t.Fatal(err)
	}
	until("an empty grid", sessionsText+`.includes("no session") && document.getElementById("engine").textContent === "engine up"`)

	var ids []string
	for _, name := range []string{"checkout-tests", "search-tests"} {
		r := call(t, "POST", d.url+"/wd/hub/session", `{"capabilities":{"alwaysMatch":{"browserName":"stub","selenoid:options":{"name":"`+name+`"}}}}`)
		if r.status != 200 {
			t.Fatalf("create: %+v", r)
		}
		ids = append(ids, r.Value.SessionID)
	}
	until("the sessions", sessionsText+`.includes("checkout-tests") && `+sessionsText+`.includes("search-tests")`)

	// The jam: two starts that never answer take the last slots, and a client
	// keeps asking for more (each request waits its budget and is refused).
	jamCtx, endJam := context.WithCancel(context.Background())
	var jam sync.WaitGroup
	post := func(browser string) {
		req, _ := http.NewRequestWithContext(jamCtx, "POST", d.url+"/wd/hub/session", strings.NewReader(`{"capabilities":{"alwaysMatch":{"browserName":"`+browser+`"}}}`))
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
	}
	for range 2 {
		jam.Add(1)
		go func() { defer jam.Done(); post("slow") }()
	}
	until("two starts under way", `document.getElementById("pending").textContent === "2"`)
	jam.Add(1)
	go func() {
		defer jam.Done()
		for jamCtx.Err() == nil {
			post("stub")
		}
	}()
	until("a queued request", `document.getElementById("waiting").textContent === "1"`)
	until("congestion with a request waiting", `!document.getElementById("congested").hidden && document.getElementById("waiting").textContent === "1"`)
	var shot []byte
	if err := chromedp.Run(ctx, chromedp.CaptureScreenshot(&shot)); err != nil {
		t.Fatal(err)
	}
	if len(shot) < 1000 {
		t.Fatalf("screenshot of %d bytes", len(shot))
	}
	if _, err := png.Decode(bytes.NewReader(shot)); err != nil {
		t.Fatalf("the screenshot is not a PNG: %v", err)
	}
	if os.Getenv("WEBSUMMONER_SCREENSHOT") != "" {
		if err := os.WriteFile("../docs/status-page.png", shot, 0o644); err != nil {
			t.Fatal(err)
		}
	}

	endJam()
	jam.Wait()
	for _, id := range ids {
		call(t, "DELETE", d.url+"/wd/hub/session/"+id, "")
	}
	until("the grid clear again", sessionsText+`.includes("no session") && document.getElementById("congested").hidden && document.getElementById("waiting").textContent === "0"`)
	d.assertClean(t)
}
