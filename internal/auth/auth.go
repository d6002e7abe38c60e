// Package auth authenticates the hub's clients as Selenium users know it: HTTP
// basic auth against an htpasswd file of bcrypt hashes (the kind ggr uses,
// and what a RemoteWebDriver URL's user:pass@ sends), reloaded on SIGHUP, with
// a set of operator users who see every session.
package auth

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"net/http"
	"os"
	"runtime"
	"strings"
	"sync"

	"golang.org/x/crypto/bcrypt"
)

// Options configure authentication. The zero value turns it off.
type Options struct {
	// File is -htpasswd: "user:bcrypt-hash" lines (htpasswd -B). Empty: no
	// authentication, every client is anonymous and may do everything.
	File string
	// Admins are -admin-users: users who see and may drive every session.
	Admins []string
}

// Store holds the users of the htpasswd file.
type Store struct {
	opts   Options
	admins map[string]bool
	verify chan struct{} // bounds concurrent bcrypt verifications
	// compare is bcrypt.CompareHashAndPassword; tests count its calls.
	compare func(hash, password []byte) error

	mu    sync.RWMutex
	users map[string][]byte   // user → bcrypt hash
	known map[string][32]byte // user → sha256 of a password bcrypt accepted
	// dummy is a bcrypt hash of a random password at the file's highest cost:
	// an unknown user's password is checked against it, so that an unknown
	// user costs as long as a known user's wrong password and names cannot be
	// told apart by timing.
	dummy []byte
}

// New reads the file (when set). The error names the file and the line.
func New(opts Options) (*Store, error) {
	s := &Store{opts: opts, admins: map[string]bool{}, verify: make(chan struct{}, runtime.NumCPU()), compare: bcrypt.CompareHashAndPassword}
	for _, a := range opts.Admins {
		if a = strings.TrimSpace(a); a != "" {
			s.admins[a] = true
		}
	}
	if opts.File == "" {
		if len(s.admins) > 0 {
			return nil, errors.New("-admin-users needs -htpasswd: without authentication every client is anonymous")
		}
		return s, nil
	}
	if err := s.Reload(); err != nil {
		return nil, err
	}
	return s, nil
}

// Enabled reports whether clients must authenticate.
func (s *Store) Enabled() bool { return s.opts.File != "" }

// Reload reads the file again; on error the users stay as they were.
func (s *Store) Reload() error {
	if s.opts.File == "" {
		return nil
	}
	data, err := os.ReadFile(s.opts.File)
	if err != nil {
		return fmt.Errorf("-htpasswd %s: %w", s.opts.File, err)
	}
	users, err := Parse(data)
	if err != nil {
		return fmt.Errorf("-htpasswd %s: %w", s.opts.File, err)
	}
	for a := range s.admins {
		if users[a] == nil {
			return fmt.Errorf("-admin-users names %q, who is not in -htpasswd %s", a, s.opts.File)
		}
	}
	dummy, err := dummyHash(users)
	if err != nil {
		return fmt.Errorf("-htpasswd %s: %w", s.opts.File, err)
	}
	s.mu.Lock()
	s.users, s.known, s.dummy = users, map[string][32]byte{}, dummy
	s.mu.Unlock()
	return nil
}

// dummyHash is a bcrypt hash of a random password at the highest cost among
// users' hashes, for checking unknown users' passwords against.
func dummyHash(users map[string][]byte) ([]byte, error) {
	cost := bcrypt.MinCost
	for _, h := range users {
		if c, err := bcrypt.Cost(h); err == nil && c > cost {
			cost = c
		}
	}
	pw := make([]byte, 32)
	_, _ = rand.Read(pw) // crypto/rand.Read never fails
	h, err := bcrypt.GenerateFromPassword(pw, cost)
	if err != nil {
		return nil, fmt.Errorf("making the hash unknown users are checked against: %w", err)
	}
	return h, nil
}

// Parse reads htpasswd lines "user:hash"; blank lines and # comments are
// skipped. Only bcrypt hashes ($2a$, $2b$, $2y$) are accepted: the others
// htpasswd can write (MD5, SHA1, crypt) are too weak to keep.
func Parse(data []byte) (map[string][]byte, error) {
	users := map[string][]byte{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		user, hash, ok := strings.Cut(line, ":")
		switch {
		case !ok || user == "":
			return nil, fmt.Errorf("line %d: want \"user:hash\"", n)
		case users[user] != nil:
			return nil, fmt.Errorf("line %d: user %q appears twice", n, user)
		}
		if _, err := bcrypt.Cost([]byte(hash)); err != nil {
			return nil, fmt.Errorf("line %d: user %q: the hash is not bcrypt (%v); write it with htpasswd -B", n, user, err)
		}
		users[user] = []byte(hash)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(users) == 0 {
		return nil, errors.New("no users: add lines written by htpasswd -B")
	}
	return users, nil
}

// User says who sent r: the user name and true for valid credentials; false
// when they are missing or wrong. With authentication off every request is
// the anonymous user "".
func (s *Store) User(r *http.Request) (string, bool) {
	if !s.Enabled() {
		return "", true
	}
	user, pass, ok := r.BasicAuth()
	if !ok {
		return "", false
	}
	sum := sha256.Sum256([]byte(pass))
	s.mu.RLock()
	hash, known, dummy := s.users[user], s.known[user], s.dummy
	s.mu.RUnlock()
	// Every WebDriver command carries the credentials: bcrypt once, then a
	// digest comparison.
	if hash != nil && subtle.ConstantTimeCompare(known[:], sum[:]) == 1 {
		return user, true
	}
	// An unknown user is checked against the dummy hash, through the same
	// bounded path: as slow as a known user's wrong password, and no more CPU.
	check := hash
	if check == nil {
		check = dummy
	}
	s.verify <- struct{}{}
	err := s.compare(check, []byte(pass))
	<-s.verify
	if hash == nil || err != nil {
		return "", false
	}
	s.mu.Lock()
	if string(s.users[user]) == string(hash) { // not replaced by a reload meanwhile
		s.known[user] = sum
	}
	s.mu.Unlock()
	return user, true
}

// Admin reports whether user sees and may drive every session. With
// authentication off, everyone does.
func (s *Store) Admin(user string) bool { return !s.Enabled() || s.admins[user] }
