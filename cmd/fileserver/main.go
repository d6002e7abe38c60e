// Command fileserver is the browser image's file server on port 8080, as
// Selenoid's image contract has it: GET / lists the downloads directory (?json:
// a JSON array of names), GET /{file} serves one, DELETE /{file} removes it.
// The hub proxies /download/{id}/ to it.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"html"
	"log"
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
	flag.Parse()
	if err := os.MkdirAll(*dir, 0o755); err != nil {
		log.Fatal(err)
	}
	srv := &http.Server{Addr: *listen, Handler: handler(*dir), ReadHeaderTimeout: 10 * time.Second}
	log.Fatal(srv.ListenAndServe())
}

func handler(dir string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
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
				fmt.Fprintf(w, "<a href=\"%s\">%s</a>\n", url.PathEscape(n), html.EscapeString(n))
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
