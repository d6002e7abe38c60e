// Command fileserver is the browser image's file server on port 8080, as
// Selenoid's image contract has it: GET / lists the downloads directory (?json:
// a JSON array of names), GET /{file} serves one, DELETE /{file} removes it.
// The hub proxies /download/{id}/ to it.
//
// With -forward it also carries TCP connections from a port to another
// address (the image's DevTools port 7070 to Chromium's 9222 on the
// container's loopback). With -allow, both accept connections from the
// listed addresses and the container's own loopback only: the hub's, so that
// a page in another session's browser on a shared network reaches neither.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"html"
	"io"
	"log"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

func main() {
	dir := flag.String("dir", "/home/selenium/Downloads", "the directory served")
	listen := flag.String("listen", ":8080", "address to serve on")
	allowList := flag.String("allow", "", "comma-separated addresses allowed to connect besides loopback; empty: any")
	forward := flag.String("forward", "", "LISTEN=TARGET: also carry TCP connections from LISTEN to TARGET (e.g. :7070=127.0.0.1:9222)")
	flag.Parse()
	allow, err := parseAllow(*allowList)
	if err != nil {
		log.Fatal(err)
	}
	if err := os.MkdirAll(*dir, 0o755); err != nil {
		log.Fatal(err)
	}
	if *forward != "" {
		from, to, ok := strings.Cut(*forward, "=")
		if !ok {
			log.Fatalf("-forward %q is not LISTEN=TARGET", *forward)
		}
		ln, err := net.Listen("tcp", from)
		if err != nil {
			log.Fatal(err)
		}
		go relay(allowed{ln, allow}, to)
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		log.Fatal(err)
	}
	srv := &http.Server{Handler: handler(*dir), ReadHeaderTimeout: 10 * time.Second}
	log.Fatal(srv.Serve(allowed{ln, allow}))
}

// parseAllow reads -allow; nil means anyone may connect.
func parseAllow(list string) ([]net.IP, error) {
	var out []net.IP
	for _, a := range strings.Split(list, ",") {
		if a = strings.TrimSpace(a); a == "" {
			continue
		}
		ip := net.ParseIP(a)
		if ip == nil {
			return nil, fmt.Errorf("-allow: %q is not an IP address", a)
		}
		out = append(out, ip)
	}
	return out, nil
}

// allowed is a listener that closes, at once, connections from anyone but
// loopback and the allowed addresses (none listed: anyone).
type allowed struct {
	net.Listener
	ips []net.IP
}

func (a allowed) Accept() (net.Conn, error) {
	for {
		c, err := a.Listener.Accept()
		if err != nil || a.permits(c.RemoteAddr()) {
			return c, err
		}
		c.Close()
	}
}

func (a allowed) permits(addr net.Addr) bool {
	if len(a.ips) == 0 {
		return true
	}
	tcp, ok := addr.(*net.TCPAddr)
	if !ok {
		return false
	}
	if tcp.IP.IsLoopback() {
		return true
	}
	for _, ip := range a.ips {
		if ip.Equal(tcp.IP) {
			return true
		}
	}
	return false
}

// relay carries every connection accepted on ln to target.
func relay(ln net.Listener, target string) {
	for {
		c, err := ln.Accept()
		if err != nil {
			log.Fatal(err)
		}
		go func() {
			defer c.Close()
			t, err := net.DialTimeout("tcp", target, 10*time.Second)
			if err != nil {
				return
			}
			defer t.Close()
			done := make(chan struct{}, 2)
			go func() { _, _ = io.Copy(t, c); done <- struct{}{} }()
			go func() { _, _ = io.Copy(c, t); done <- struct{}{} }()
			<-done
		}()
	}
}

func handler(dir string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if rest, ok := strings.CutPrefix(r.URL.EscapedPath(), "/.uploads/"); ok && r.Method == http.MethodPost {
			storeUpload(w, r, dir, rest)
			return
		}
		name, err := url.PathUnescape(strings.TrimPrefix(r.URL.EscapedPath(), "/"))
		if err != nil || strings.ContainsAny(name, `/\`) || name == "." || name == ".." {
			http.Error(w, "not a file name", http.StatusBadRequest)
			return
		}
		if name == "" {
			entries, _ := os.ReadDir(dir)
			names := []string{}
			for _, e := range entries {
				// Chromium's partial (.crdownload) and temporary (dot) files are not downloads yet.
				if e.Type().IsRegular() && !strings.HasSuffix(e.Name(), ".crdownload") && !strings.HasPrefix(e.Name(), ".") {
					names = append(names, e.Name())
				}
			}
			sort.Strings(names)
			if _, ok := r.URL.Query()["json"]; ok {
				w.Header().Set("Content-Type", "application/json")
				_ = json.NewEncoder(w).Encode(names)
				return
			}
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			fmt.Fprint(w, "<!doctype html><pre>\n")
			for _, n := range names {
				fmt.Fprintf(w, "<a href=\"./%s\">%s</a>\n", html.EscapeString(url.PathEscape(n)), html.EscapeString(n))
			}
			fmt.Fprint(w, "</pre>\n")
			return
		}
		path := filepath.Join(dir, name)
		switch r.Method {
		case http.MethodGet, http.MethodHead:
			http.ServeFile(w, r, path)
		case http.MethodDelete:
			if err := os.Remove(path); err != nil {
				http.Error(w, err.Error(), http.StatusNotFound)
				return
			}
			w.WriteHeader(http.StatusOK)
		default:
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		}
	})
}

// maxUpload bounds one stored upload; the hub bounds it first
// (-max-upload-size).
const maxUpload = 1 << 30

// storeUpload is POST /.uploads/{dir}/{name}: the hub stores a client's file
// upload for a driver that has no /file of its own (WebKitWebDriver), as
// {dir}/{name} under .uploads of the downloads directory — hidden from the
// listing, which shows regular files only — and is answered the file's path.
func storeUpload(w http.ResponseWriter, r *http.Request, dir, rest string) {
	sub, esc, ok := strings.Cut(rest, "/")
	name, err := url.PathUnescape(esc)
	if !ok || err != nil || sub == "" || strings.Trim(sub, "0123456789abcdef") != "" ||
		name == "" || strings.ContainsAny(name, `/\`) || strings.HasPrefix(name, ".") {
		http.Error(w, "not /.uploads/{hex}/{plain file name}", http.StatusBadRequest)
		return
	}
	d := filepath.Join(dir, ".uploads", sub)
	if err := os.MkdirAll(d, 0o755); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	path := filepath.Join(d, name)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		http.Error(w, err.Error(), http.StatusConflict)
		return
	}
	_, err = io.Copy(f, http.MaxBytesReader(w, r.Body, maxUpload))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(path)
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	fmt.Fprint(w, path)
}
