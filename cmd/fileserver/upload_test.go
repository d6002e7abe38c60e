package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The hub stores a WebKit session's upload through the file server: under
// .uploads, by a hex directory and a plain name only, never replacing a file,
// and never listed among the downloads.
func TestStoreUpload(t *testing.T) {
	dir := t.TempDir()
	srv := httptest.NewServer(handler(dir))
	defer srv.Close()
	post := func(path, body string) (int, string) {
		resp, err := http.Post(srv.URL+path, "application/octet-stream", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	status, path := post("/.uploads/0a1b/report.txt", "hello")
	if want := filepath.Join(dir, ".uploads", "0a1b", "report.txt"); status != 200 || path != want {
		t.Fatalf("upload: %d %q, want %q", status, path, want)
	}
	if data, _ := os.ReadFile(path); string(data) != "hello" {
		t.Fatalf("stored %q", data)
	}
	if status, _ := post("/.uploads/0a1b/report.txt", "again"); status != http.StatusConflict {
		t.Fatalf("a second upload to the same name: %d, want 409", status)
	}
	for _, bad := range []string{"/.uploads/zz/x", "/.uploads/0a/..%2F..%2Fx", "/.uploads/0a/.hidden", "/.uploads/0a", "/.uploads/../x"} {
		if status, _ := post(bad, "x"); status != http.StatusBadRequest {
			t.Errorf("POST %s: %d, want 400", bad, status)
		}
	}
	resp, err := http.Get(srv.URL + "/?json")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if strings.TrimSpace(string(b)) != "[]" {
		t.Fatalf("the listing shows uploads: %s", b)
	}
}
