package auth

import (
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"golang.org/x/crypto/bcrypt"
)

func hash(t testing.TB, pw string) string {
	h, err := bcrypt.GenerateFromPassword([]byte(pw), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	return string(h)
}

// Write writes an htpasswd file of user → password pairs (for tests elsewhere too).
func write(t testing.TB, users map[string]string) string {
	var b strings.Builder
	b.WriteString("# test users\n\n")
	for u, pw := range users {
		fmt.Fprintf(&b, "%s:%s\n", u, hash(t, pw))
	}
	f := filepath.Join(t.TempDir(), "htpasswd")
	if err := os.WriteFile(f, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

func TestParse(t *testing.T) {
	for doc, want := range map[string]string{
		"alice":            `line 1: want "user:hash"`,
		":" + hash(t, "x"): `line 1: want "user:hash"`,
		"alice:{SHA}W6ph5Mm5Pz8GgiULbPgzG37mj9g=":   `user "alice": the hash is not bcrypt`,
		"alice:$apr1$abc$def":                       `htpasswd -B`,
		"a:" + hash(t, "x") + "\na:" + hash(t, "y"): `user "a" appears twice`,
		"# nothing\n": "no users",
	} {
		if _, err := Parse([]byte(doc)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want %q", doc, err, want)
		}
	}
}

func TestUser(t *testing.T) {
	s, err := New(Options{File: write(t, map[string]string{"alice": "secret", "ops": "root"}), Admins: []string{"ops"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		user, pass string
		ok         bool
	}{{"alice", "secret", true}, {"alice", "secret", true}, {"alice", "wrong", false}, {"bob", "secret", false}, {"ops", "root", true}} {
		r := httptest.NewRequest("GET", "/status", nil)
		r.SetBasicAuth(c.user, c.pass)
		if u, ok := s.User(r); ok != c.ok || ok && u != c.user {
			t.Errorf("%s/%s: %q %v", c.user, c.pass, u, ok)
		}
	}
	if _, ok := s.User(httptest.NewRequest("GET", "/", nil)); ok {
		t.Error("no credentials accepted")
	}
	if !s.Admin("ops") || s.Admin("alice") {
		t.Error("admins")
	}
	// Concurrent checks of a wrong password are bounded, not refused.
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			r := httptest.NewRequest("GET", "/", nil)
			r.SetBasicAuth("alice", "nope")
			if _, ok := s.User(r); ok {
				t.Error("wrong password accepted")
			}
		})
	}
	wg.Wait()
}

// A reload with a bad file keeps the users; a good one replaces them, and a
// password that was cached is checked again.
func TestReload(t *testing.T) {
	f := write(t, map[string]string{"alice": "one"})
	s, err := New(Options{File: f})
	if err != nil {
		t.Fatal(err)
	}
	login := func(pw string) bool {
		r := httptest.NewRequest("GET", "/", nil)
		r.SetBasicAuth("alice", pw)
		_, ok := s.User(r)
		return ok
	}
	if !login("one") {
		t.Fatal("first login")
	}
	os.WriteFile(f, []byte("alice\n"), 0o600)
	if err := s.Reload(); err == nil || !login("one") {
		t.Fatalf("bad reload: %v; old users kept: %v", err, login("one"))
	}
	os.WriteFile(f, []byte("alice:"+hash(t, "two")+"\n"), 0o600)
	if err := s.Reload(); err != nil {
		t.Fatal(err)
	}
	if login("one") || !login("two") {
		t.Fatal("the reload did not take: the old password still works or the new one does not")
	}
}

func TestOptionsErrors(t *testing.T) {
	if _, err := New(Options{Admins: []string{"ops"}}); err == nil || !strings.Contains(err.Error(), "-admin-users needs -htpasswd") {
		t.Fatalf("admins without file: %v", err)
	}
	if _, err := New(Options{File: write(t, map[string]string{"a": "b"}), Admins: []string{"ops"}}); err == nil || !strings.Contains(err.Error(), `"ops", who is not in -htpasswd`) {
		t.Fatalf("unknown admin: %v", err)
	}
	if _, err := New(Options{File: "/nonexistent"}); err == nil || !strings.Contains(err.Error(), "-htpasswd /nonexistent") {
		t.Fatalf("missing file: %v", err)
	}
	s, _ := New(Options{})
	if u, ok := s.User(httptest.NewRequest("GET", "/", nil)); !ok || u != "" || !s.Admin("") || s.Enabled() {
		t.Fatal("authentication off must let everyone in as the anonymous admin")
	}
}
