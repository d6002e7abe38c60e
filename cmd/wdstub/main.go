// Command wdstub is a stub WebDriver server: chromedriver's command line
// (--port=N) and the few endpoints the hub's tests and load tool need, with
// switches to misbehave on purpose.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/websummoner/websummoner/internal/hostile"
	"github.com/websummoner/websummoner/internal/wdstub"
)

func main() {
	port := flag.Int("port", 4444, "port to listen on (127.0.0.1, or all interfaces with -all)")
	all := flag.Bool("all", false, "listen on all interfaces (inside a container)")
	listenDelay := flag.Duration("listen-delay", 0, "wait this long before listening (a slow start)")
	exitOnce := flag.String("exit-once", "", "if this file exists, remove it and exit 1 at once, as a driver that lost its port")
	ignoreInt := flag.Bool("ignore-sigint", false, "ignore SIGINT, so only SIGKILL stops it")
	spawn := flag.Bool("spawn-orphan", false, "start a helper in its own session (as Chromium's crash handler does)")
	watcher := flag.Bool("spawn-watcher", false, "start a helper in its own session that exits by itself when this driver does (as Chromium's crash handler does when its browser quits)")
	watch := flag.Bool("watch-stdin", false, "exit at the end of standard input (the helper -spawn-watcher starts)")
	newDelay := flag.Duration("new-session-delay", 0, "delay of POST /session")
	deleteDelay := flag.Duration("delete-delay", 0, "delay of DELETE /session/{id} (a real driver quits its browser there)")
	failNew := flag.Bool("fail-new-session", false, "answer POST /session with 500")
	capacityURL := flag.String("capacity-url", "", "ask this URL (the load tool's fake host) how long this start takes and whether it fails")
	page := flag.Bool("serve-page", false, "serve a fixed test page at / instead of WebDriver (the end-to-end tests' page)")
	faults := flag.String("fault", "", "misbehave: phase=fault,… (phases status, new-session, command, delete; faults broken-body, redirect, hang, exit, huge, garbage)")
	logRequests := flag.Bool("log-requests", false, "print a line per request to stdout (for log-following tests)")
	faultRate := flag.Float64("fault-rate", 0, "chance a request of a faulty phase gets its fault (0 = always)")
	// In a container the command line is fixed by the image; WDSTUB_<FLAG> in the
	// environment (from browsers.json "env") sets a flag instead.
	flag.VisitAll(func(f *flag.Flag) {
		if v, ok := os.LookupEnv("WDSTUB_" + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))); ok {
			_ = f.Value.Set(v)
		}
	})
	flag.Parse()
	if *exitOnce != "" {
		if err := os.Remove(*exitOnce); err == nil {
			fmt.Fprintf(os.Stderr, "wdstub: bind 127.0.0.1:%d: address already in use\n", *port)
			os.Exit(1)
		}
	}
	if *capacityURL != "" {
		// A fake host with a capacity: it says how long this start takes (longer
		// beyond its capacity) and whether it fails.
		resp, err := http.Get(*capacityURL + "/begin")
		if err != nil {
			fmt.Fprintln(os.Stderr, "wdstub: fake host:", err)
			os.Exit(1)
		}
		var verdict struct {
			DelayMS int  `json:"delayMs"`
			Fail    bool `json:"fail"`
		}
		_ = json.NewDecoder(resp.Body).Decode(&verdict)
		resp.Body.Close()
		time.Sleep(time.Duration(verdict.DelayMS) * time.Millisecond)
		if r, err := http.Post(*capacityURL+"/end", "text/plain", nil); err == nil {
			r.Body.Close()
		}
		if verdict.Fail {
			fmt.Fprintln(os.Stderr, "wdstub: the fake host is over capacity: start failed")
			os.Exit(1)
		}
	}
	if *watch {
		_, _ = io.Copy(io.Discard, os.Stdin)
		os.Exit(0)
	}
	if *ignoreInt {
		signal.Ignore(syscall.SIGINT)
	}
	if *watcher {
		cmd := exec.Command(os.Args[0], "-watch-stdin")
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
		w, err := cmd.StdinPipe()
		if err == nil {
			err = cmd.Start()
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "wdstub: spawn:", err)
			os.Exit(1)
		}
		defer runtime.KeepAlive(w) // held open until this process exits: a collected pipe is closed
		fmt.Printf("wdstub: watcher helper pid %d\n", cmd.Process.Pid)
	}
	if *spawn {
		cmd := exec.Command(os.Args[0], "-port", "0", "-listen-delay", "1h")
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
		if err := cmd.Start(); err != nil {
			fmt.Fprintln(os.Stderr, "wdstub: spawn:", err)
			os.Exit(1)
		}
		fmt.Printf("wdstub: orphan helper pid %d\n", cmd.Process.Pid)
	}
	time.Sleep(*listenDelay)
	host := "127.0.0.1"
	if *all {
		host = ""
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(host, fmt.Sprint(*port)))
	if err != nil {
		fmt.Fprintln(os.Stderr, "wdstub:", err)
		os.Exit(1)
	}
	fmt.Printf("wdstub: listening on %s\n", ln.Addr())
	at, err := hostile.Parse(*faults)
	if err != nil {
		fmt.Fprintln(os.Stderr, "wdstub: -fault:", err)
		os.Exit(2)
	}
	var h http.Handler = wdstub.New(wdstub.Options{NewSessionDelay: *newDelay, FailNewSession: *failNew, DeleteDelay: *deleteDelay})
	h = hostile.Wrap(h, hostile.Options{At: at, Probability: *faultRate, ExitProcess: true})
	if *logRequests {
		next := h
		h = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			fmt.Printf("wdstub: %s %s\n", r.Method, r.URL.Path)
			next.ServeHTTP(w, r)
		})
	}
	if *page {
		h = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/"+wdstub.TestDownloadName { // a file the browser saves
				w.Header().Set("Content-Type", "application/octet-stream")
				w.Header().Set("Content-Disposition", `attachment; filename="`+wdstub.TestDownloadName+`"`)
				fmt.Fprint(w, wdstub.TestDownload)
				return
			}
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			fmt.Fprint(w, wdstub.TestPage)
		})
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	if err := srv.Serve(ln); err != nil {
		fmt.Fprintln(os.Stderr, "wdstub:", err)
		os.Exit(1)
	}
}
