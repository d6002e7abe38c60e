package e2e

import (
	"archive/zip"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/websummoner/websummoner/internal/wdstub"
)

// Per-session networking in Docker mode, in real Chromium: a hostsEntries name
// resolves in the browser, the container joins additionalNetworks, and takes
// containerHostname and dnsServers.
func TestDockerSessionNetworking(t *testing.T) {
	requireRealParts(t)
	requireDocker(t)
	extra := "ws-e2e-extra-" + runID // browsers.json's allowedNetworks names it (startDockerHub)
	dockerNetwork(t, extra)
	d := startDockerHub(t, instanceFor(t), "-limit", "1")
	caps := fmt.Sprintf(`{"capabilities":{"alwaysMatch":{"browserName":"chrome","selenoid:options":{
		"hostsEntries":["wsapp.test:127.0.0.1"],"additionalNetworks":[%q],"containerHostname":"browser-one","dnsServers":["127.0.0.53"]}}}}`, extra)
	r := call(t, "POST", d.url+"/wd/hub/session", caps)
	if r.status != 200 {
		t.Fatalf("create: %+v", r)
	}
	id := r.Value.SessionID
	browser := containers(t, d.instance)[0]
	servePageIn(t, browser, 8090)
	if r := call(t, "POST", d.url+"/wd/hub/session/"+id+"/url", `{"url":"http://wsapp.test:8090/"}`); r.status != 200 {
		t.Fatalf("navigate to the hosts entry: %+v", r)
	}
	if title := value(t, d.url+"/wd/hub/session/"+id+"/title"); title != "WebSummoner e2e" {
		t.Fatalf("the browser did not reach wsapp.test: title %q", title)
	}
	var info []struct {
		Config          struct{ Hostname string }
		HostConfig      struct{ DNS []string }
		NetworkSettings struct {
			Networks map[string]any
		}
	}
	data, _ := exec.Command("docker", "inspect", browser).Output()
	if err := json.Unmarshal(data, &info); err != nil || len(info) != 1 {
		t.Fatalf("inspect: %v", err)
	}
	if info[0].Config.Hostname != "browser-one" || info[0].NetworkSettings.Networks[extra] == nil || strings.Join(info[0].HostConfig.DNS, ",") != "127.0.0.53" {
		t.Fatalf("container: %+v", info[0])
	}
	call(t, "DELETE", d.url+"/wd/hub/session/"+id, "")
	d.assertClean(t)
}

func value(t *testing.T, url string) any {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	var v struct{ Value any }
	if err := json.Unmarshal(data, &v); err != nil {
		t.Fatalf("%s: %q", url, data)
	}
	return v.Value
}

// runUpload runs testdata/upload.py against a hub and returns what the page read.
func runUpload(t *testing.T, hubURL, page, content string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), clientTimeout) // a hang fails
	defer cancel()
	out, err := exec.CommandContext(ctx, python, "testdata/upload.py", hubURL+"/wd/hub", page, content).CombinedOutput()
	if err != nil {
		t.Fatalf("upload client: %v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	var r struct{ Read string }
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &r); err != nil {
		t.Fatalf("upload client said %q", out)
	}
	return r.Read
}

// Python Selenium's send_keys of a local file into real Chromium run as a local
// driver process: the page reads the file's content back.
func TestFileUploadLocalDriver(t *testing.T) {
	requireRealParts(t)
	h := startHub(t, "-limit", "1")
	page := pageServer(t)
	const content = "uploaded through WebSummoner: 42"
	if got := runUpload(t, h.url, page.URL, content); got != content {
		t.Fatalf("the page read %q, want %q", got, content)
	}
	h.stop(t)
}

// The same upload into the Chromium container: chromedriver inside it receives
// the file through the hub's /se/file → /file rewrite.
func TestDockerFileUpload(t *testing.T) {
	requireRealParts(t)
	requireDocker(t)
	d := startDockerHub(t, instanceFor(t), "-limit", "1")
	const content = "uploaded into a container: 7"
	client := startWaitingClient(t, "testdata/upload.py", d.url+"/wd/hub", "http://127.0.0.1:8090/", content, "wait")
	servePageIn(t, containers(t, d.instance)[0], 8090)
	var r struct{ Read string }
	if err := json.Unmarshal([]byte(client.finish(t)), &r); err != nil || r.Read != content {
		t.Fatalf("the page in the container read %q (%v), want %q", r.Read, err, content)
	}
	d.assertClean(t)
}

// Downloads from a real Chromium run as a local driver: the browser saves into
// the session's own directory; the client lists and fetches through the hub
// (Selenoid's /download/ and Grid's se/files); names with a path are refused.
func TestDownloadsLocalDriver(t *testing.T) {
	requireRealParts(t)
	h := startHub(t, "-limit", "2")
	payload := strings.Repeat("websummoner download ", 500)
	files := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("Content-Disposition", `attachment; filename="report.txt"`)
		io.WriteString(w, payload)
	}))
	defer files.Close()
	r := call(t, "POST", h.url+"/wd/hub/session", `{"capabilities":{"alwaysMatch":{"browserName":"chrome"}}}`)
	id := r.Value.SessionID
	// Selenium's clients ask for /se/files only when the answer says so.
	if r.caps["se:downloadsEnabled"] != true {
		t.Fatalf("se:downloadsEnabled = %v in the new-session answer, want true", r.caps["se:downloadsEnabled"])
	}
	other := call(t, "POST", h.url+"/wd/hub/session", `{"capabilities":{"alwaysMatch":{"browserName":"chrome"}}}`).Value.SessionID
	call(t, "POST", h.url+"/wd/hub/session/"+id+"/url", `{"url":"`+files.URL+`/report.txt"}`)
	var names []string
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		names = nil
		json.Unmarshal(rawCall(t, "GET", h.url+"/download/"+id+"/?json", ""), &names)
		if len(names) == 1 {
			break
		}
	}
	if len(names) != 1 || names[0] != "report.txt" {
		t.Fatalf("downloads listed: %v", names)
	}
	if got := string(rawCall(t, "GET", h.url+"/download/"+id+"/report.txt", "")); got != payload {
		t.Fatalf("fetched %d bytes, want the %d downloaded", len(got), len(payload))
	}
	if got := string(rawCall(t, "GET", h.url+"/wd/hub/session/"+id+"/aerokube/download/report.txt", "")); got != payload {
		t.Fatal("Selenoid's alias serves other bytes")
	}
	var empty []string
	json.Unmarshal(rawCall(t, "GET", h.url+"/download/"+other+"/?json", ""), &empty)
	if len(empty) != 0 {
		t.Fatalf("another session sees %v", empty)
	}
	for _, bad := range []string{"..%2Freport.txt", "%2E%2E", "a%2Fb"} {
		if r := call(t, "GET", h.url+"/download/"+other+"/"+bad, ""); r.status != 400 && r.status != 404 {
			t.Errorf("%s: %d", bad, r.status)
		}
	}
	if r := call(t, "DELETE", h.url+"/download/"+id+"/report.txt", ""); r.status != 200 {
		t.Fatalf("delete: %+v", r)
	}
	json.Unmarshal(rawCall(t, "GET", h.url+"/download/"+id+"/?json", ""), &names)
	if len(names) != 0 {
		t.Fatalf("after DELETE /download/…/report.txt: %v", names)
	}
	call(t, "POST", h.url+"/wd/hub/session/"+id+"/url", `{"url":"`+files.URL+`/report.txt"}`)
	waitFor(time.Minute, func() bool {
		names = nil
		json.Unmarshal(rawCall(t, "GET", h.url+"/download/"+id+"/?json", ""), &names)
		return len(names) == 1
	})
	gridDownloads(t, h.url+"/wd/hub/session/"+id, "report.txt", payload)
	call(t, "DELETE", h.url+"/wd/hub/session/"+id, "")
	call(t, "DELETE", h.url+"/wd/hub/session/"+other, "")
	h.stop(t)
}

// A download in the Chromium container: the browser saves into the image's
// download directory, the image's file server (port 8080) serves it, the hub
// proxies /download/{id}/.
func TestDockerDownloads(t *testing.T) {
	requireRealParts(t)
	requireDocker(t)
	d := startDockerHub(t, instanceFor(t), "-limit", "1")
	r := call(t, "POST", d.url+"/wd/hub/session", `{"capabilities":{"alwaysMatch":{"browserName":"chrome"}}}`)
	if r.status != 200 {
		t.Fatalf("create: %+v", r)
	}
	id := r.Value.SessionID
	browser := containers(t, d.instance)[0]
	servePageIn(t, browser, 8081)
	time.Sleep(500 * time.Millisecond) // the page server listens
	call(t, "POST", d.url+"/wd/hub/session/"+id+"/url", `{"url":"http://127.0.0.1:8081/`+wdstub.TestDownloadName+`"}`)
	var names []string
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline) && len(names) == 0; time.Sleep(200 * time.Millisecond) {
		json.Unmarshal(rawCall(t, "GET", d.url+"/download/"+id+"/?json", ""), &names)
	}
	if len(names) != 1 || names[0] != wdstub.TestDownloadName {
		t.Fatalf("downloads in the container: %v", names)
	}
	if got := string(rawCall(t, "GET", d.url+"/download/"+id+"/"+wdstub.TestDownloadName, "")); got != wdstub.TestDownload {
		t.Fatalf("fetched %q", got)
	}
	// Grid's managed downloads, from the image's file server: what
	// Selenium 4's get_downloadable_files(), download_file() and
	// delete_downloadable_files() send, once the answer says they may.
	if r.caps["se:downloadsEnabled"] != true {
		t.Errorf("se:downloadsEnabled = %v in a container session's answer, want true", r.caps["se:downloadsEnabled"])
	}
	gridDownloads(t, d.url+"/wd/hub/session/"+id, wdstub.TestDownloadName, wdstub.TestDownload)
	call(t, "DELETE", d.url+"/wd/hub/session/"+id, "")
	d.assertClean(t)
}

// gridDownloads checks Grid 4's managed downloads of a session (its URL)
// whose one download is name, holding want: listed, fetched as a zip of the
// file, a missing name refused, and all removed.
func gridDownloads(t *testing.T, session, name, want string) {
	t.Helper()
	var list struct{ Value struct{ Names []string } }
	if err := json.Unmarshal(rawCall(t, "GET", session+"/se/files", ""), &list); err != nil || len(list.Value.Names) != 1 || list.Value.Names[0] != name {
		t.Fatalf("se/files lists %+v (%v), want [%s]", list.Value.Names, err, name)
	}
	var file struct {
		Value struct{ Filename, Contents string }
	}
	json.Unmarshal(rawCall(t, "POST", session+"/se/files", `{"name":"`+name+`"}`), &file)
	raw, _ := base64.StdEncoding.DecodeString(file.Value.Contents)
	zr, err := zip.NewReader(bytes.NewReader(raw), int64(len(raw)))
	if err != nil || file.Value.Filename != name || len(zr.File) != 1 || zr.File[0].Name != name {
		t.Fatalf("se/files %s: %q, not a zip of the one file (%v)", name, file.Value.Filename, err)
	}
	rc, _ := zr.File[0].Open()
	got, _ := io.ReadAll(rc)
	if string(got) != want {
		t.Fatalf("se/files %s holds %d bytes, want the %d downloaded", name, len(got), len(want))
	}
	if r := call(t, "POST", session+"/se/files", `{"name":"nope.txt"}`); r.status != 400 || r.Value.Error != "invalid argument" {
		t.Errorf("se/files of a missing file: %d %+v, want 400 invalid argument", r.status, r.Value)
	}
	if r := call(t, "DELETE", session+"/se/files", ""); r.status != 200 {
		t.Fatalf("DELETE se/files: %+v", r)
	}
	list.Value.Names = nil
	json.Unmarshal(rawCall(t, "GET", session+"/se/files", ""), &list)
	if len(list.Value.Names) != 0 {
		t.Fatalf("se/files after DELETE lists %v", list.Value.Names)
	}
}

// Session logs with real Chromium: a session that asks (enableLog, logName)
// has its driver's output kept in -log-output-dir and listed and served at
// /logs/; one that does not, has none.
func TestSessionLogsLocalDriver(t *testing.T) {
	requireRealParts(t)
	dir := t.TempDir()
	h := startHub(t, "-limit", "1", "-log-output-dir", dir)
	r := call(t, "POST", h.url+"/wd/hub/session", `{"capabilities":{"alwaysMatch":{"browserName":"chrome","selenoid:options":{"enableLog":true,"logName":"mine.log"}}}}`)
	if r.status != 200 {
		t.Fatalf("create: %+v", r)
	}
	call(t, "DELETE", h.url+"/wd/hub/session/"+r.Value.SessionID, "")
	r = call(t, "POST", h.url+"/wd/hub/session", `{"capabilities":{"alwaysMatch":{"browserName":"chrome"}}}`)
	call(t, "DELETE", h.url+"/wd/hub/session/"+r.Value.SessionID, "")
	var names []string
	json.Unmarshal(rawCall(t, "GET", h.url+"/logs/?json", ""), &names)
	if len(names) != 1 || names[0] != "mine.log" {
		t.Fatalf("kept logs: %v", names)
	}
	if log := string(rawCall(t, "GET", h.url+"/logs/mine.log", "")); !strings.Contains(log, "ChromeDriver") {
		t.Fatalf("mine.log holds %q", log)
	}
	h.stop(t)
}

// Real Chromium: closing its last window ends chromedriver's session, and the
// hub's with it (Grid's behaviour): the slot is free at once and a later
// command is told why the session ended.
func TestLastWindowClosedEndsTheSession(t *testing.T) {
	requireRealParts(t)
	h := startHub(t, "-limit", "1")
	r := call(t, "POST", h.url+"/wd/hub/session", `{"capabilities":{"alwaysMatch":{"browserName":"chrome"}}}`)
	id := r.Value.SessionID
	if r.status != 200 || id == "" {
		t.Fatalf("create: %+v", r)
	}
	if got := string(rawCall(t, "DELETE", h.url+"/wd/hub/session/"+id+"/window", "")); got != `{"value":[]}` {
		t.Fatalf("closing the only window: %q, want chromedriver's empty list", got)
	}
	if r := call(t, "GET", h.url+"/wd/hub/session/"+id+"/title", ""); r.status != 404 || !strings.Contains(r.Value.Message, "last window was closed") {
		t.Fatalf("a command after the last window closed: %d %q", r.status, r.Value.Message)
	}
	if st := h.settled(t); st["used"] != 0.0 {
		t.Fatalf("after the last window closed /status says %v", st)
	}
	// driver.close() then driver.quit(), as teardown code does.
	if r := call(t, "DELETE", h.url+"/wd/hub/session/"+id, ""); r.status != 200 {
		t.Fatalf("quit after the last window closed: %+v", r)
	}
	if n := h.metric(t, `websummoner_sessions_ended_total{reason="last_window"}`); n != 1 {
		t.Fatalf("ended_total{reason=last_window} = %v, want 1", n)
	}
}
