package auth

import (
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/crypto/bcrypt"
)

// An unknown user's password is checked with bcrypt, as a known user's wrong
// one is, against a hash of the file's highest cost and through the same
// bounded path, so that user names cannot be told apart by timing.
func TestUnknownUserCostsABcryptCheck(t *testing.T) {
	low, _ := bcrypt.GenerateFromPassword([]byte("secret"), bcrypt.MinCost)
	high, _ := bcrypt.GenerateFromPassword([]byte("root"), bcrypt.MinCost+1)
	f := filepath.Join(t.TempDir(), "htpasswd")
	if err := os.WriteFile(f, []byte("alice:"+string(low)+"\nops:"+string(high)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := New(Options{File: f})
	if err != nil {
		t.Fatal(err)
	}
	type call struct {
		cost    int
		bounded bool
	}
	var calls []call
	s.compare = func(hash, pw []byte) error {
		c, _ := bcrypt.Cost(hash)
		calls = append(calls, call{c, len(s.verify) == 1})
		return bcrypt.CompareHashAndPassword(hash, pw)
	}
	login := func(user, pw string) bool {
		r := httptest.NewRequest("GET", "/", nil)
		r.SetBasicAuth(user, pw)
		_, ok := s.User(r)
		return ok
	}
	if login("alice", "wrong") || len(calls) != 1 {
		t.Fatalf("a known user's wrong password: %d bcrypt checks, want 1", len(calls))
	}
	calls = nil
	for _, pw := range []string{"secret", "root", "", "wrong"} {
		if login("mallory", pw) {
			t.Fatalf("unknown user mallory let in with %q", pw)
		}
	}
	if len(calls) != 4 {
		t.Fatalf("4 unknown-user logins ran %d bcrypt checks, want 4: an unknown user answers faster than a known one's wrong password", len(calls))
	}
	for _, c := range calls {
		if c.cost != bcrypt.MinCost+1 || !c.bounded {
			t.Fatalf("an unknown user was checked at cost %d (want the file's highest, %d), within the concurrency bound: %v", c.cost, bcrypt.MinCost+1, c.bounded)
		}
	}
}
