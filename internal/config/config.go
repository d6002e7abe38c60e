// Package config reads browsers.json in Selenoid's format, validates it, resolves
// a requested browser and version to one entry, and swaps in a new file on reload.
package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"
)

// Browsers is the whole file: browser name → its versions.
type Browsers map[string]*Versions

// Versions lists one browser's versions and the one an empty version request gets.
type Versions struct {
	Default  string              `json:"default"`
	Versions map[string]*Browser `json:"versions"`
}

// Browser is one version's entry. Field names and types follow Selenoid's, so
// existing files load unchanged.
type Browser struct {
	// Image is a Docker image name (a JSON string) or, for a local driver process,
	// a command line (a JSON array of strings).
	Image           Image             `json:"image"`
	Port            string            `json:"port,omitempty"`
	Path            string            `json:"path,omitempty"`
	Tmpfs           map[string]string `json:"tmpfs,omitempty"`
	Volumes         []string          `json:"volumes,omitempty"`
	Env             []string          `json:"env,omitempty"`
	Hosts           []string          `json:"hosts,omitempty"`
	ShmSize         int64             `json:"shmSize,omitempty"`
	Labels          map[string]string `json:"labels,omitempty"`
	Sysctl          map[string]string `json:"sysctl,omitempty"`
	Mem             string            `json:"mem,omitempty"`
	CPU             string            `json:"cpu,omitempty"`
	PublishAllPorts bool              `json:"publishAllPorts,omitempty"`
	// Caps are capabilities merged under the client's before the new-session
	// request reaches the driver (a WebSummoner addition): the place for flags a
	// browser needs on this host, such as Chromium's --headless --no-sandbox.
	Caps map[string]any `json:"caps,omitempty"`
	// ClientEnv names the variables a client's "env" may set besides the default
	// allow-list (LANG, LANGUAGE, LC_*, TZ); "PREFIX_*" names a family. The
	// loader and search-path variables stay refused whatever is listed here.
	ClientEnv []string `json:"clientEnv,omitempty"`
	// AllowClientBinary lets a client choose what runs: a browser binary, a
	// launcher or command-prefix argument, a debugger address, a profile
	// directory. Off: such capabilities are refused (docs/security.md).
	AllowClientBinary bool `json:"allowClientBinary,omitempty"`
	// AllowedNetworks are the Docker networks a client's additionalNetworks
	// may name; a network not listed is refused. Every session that joins one
	// shares it with the others that do (docs/security.md).
	AllowedNetworks []string `json:"allowedNetworks,omitempty"`
	// AllowedApplicationContainers are the containers a client's
	// applicationContainers may name; they join the session's own network
	// while it lives. A container not listed is refused.
	AllowedApplicationContainers []string `json:"allowedApplicationContainers,omitempty"`
	// Display runs a local driver command on a virtual X screen of its own
	// (a WebSummoner addition): under xvfb-run, sized by the session's
	// screenResolution, stopped with the session. For browsers that need a
	// display (WebKit's MiniBrowser); containers bring their own.
	Display bool `json:"display,omitempty"`
	// Warm is how many ready browsers of this entry -warm-pool N keeps (a
	// WebSummoner addition): it overrides N for a default version and puts
	// another version in the pool; 0 keeps none of it. Unset: N for the
	// default version, none for the others.
	Warm *int `json:"warm,omitempty"`
}

// Image is either a Docker image name or a local command line.
type Image struct {
	// Name is set for a Docker image.
	Name string
	// Command is set for a local driver process.
	Command []string
}

// UnmarshalJSON accepts a string or an array of strings.
func (i *Image) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	switch {
	case len(b) > 0 && b[0] == '"':
		return json.Unmarshal(b, &i.Name)
	case len(b) > 0 && b[0] == '[':
		return json.Unmarshal(b, &i.Command)
	}
	return fmt.Errorf("must be a Docker image name (a string) or a command line (an array of strings), got %s", b)
}

// MarshalJSON writes the form it was read in.
func (i Image) MarshalJSON() ([]byte, error) {
	if i.Command != nil {
		return json.Marshal(i.Command)
	}
	return json.Marshal(i.Name)
}

// IsCommand reports whether the entry runs a local driver process.
func (i Image) IsCommand() bool { return len(i.Command) > 0 }

func (i Image) String() string {
	if i.IsCommand() {
		return strings.Join(i.Command, " ")
	}
	return i.Name
}

// Parse decodes and validates a browsers.json document. Errors name the browser,
// version and field. dockerAllowed says whether Docker image entries may be used
// (false under -disable-docker). What ParseWithWarnings would warn of is
// dropped: for callers that show the operator nothing (tests, embedding).
func Parse(data []byte, dockerAllowed bool) (Browsers, error) {
	bs, _, err := ParseWithWarnings(data, dockerAllowed)
	return bs, err
}

// ParseWithWarnings is Parse that also says what loads but will not work as
// the file may mean, one sentence each, for the operator's log: Docker image
// entries under -disable-docker (requests for them get "Requested
// environment is not available"), a "default" that names no version, a
// negative "shmSize". Selenoid loads such files, so the hub starts with them.
// What can never work, or would make the hub unsafe, stays an error.
func ParseWithWarnings(data []byte, dockerAllowed bool) (Browsers, []string, error) {
	var bs Browsers
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&bs); err != nil {
		var se *json.SyntaxError
		if errors.As(err, &se) {
			line := 1 + bytes.Count(data[:min(int(se.Offset), len(data))], []byte("\n"))
			return nil, nil, fmt.Errorf("line %d: %v", line, err)
		}
		return nil, nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, nil, fmt.Errorf("line %d: unexpected content after the top-level object; the file must hold one JSON object", 1+bytes.Count(data[:min(int(dec.InputOffset()), len(data))], []byte("\n")))
	}
	if len(bs) == 0 {
		return nil, nil, errors.New("no browsers configured: the file must map browser names to {\"default\": …, \"versions\": {…}}")
	}
	var warnings []string
	for _, name := range sortedKeys(bs) {
		v := bs[name]
		switch {
		case strings.TrimSpace(name) == "":
			return nil, nil, errors.New("a browser name is empty: clients ask for a browser by its name")
		case v == nil:
			return nil, nil, fmt.Errorf("browser %q: entry is null; give {\"default\": …, \"versions\": {…}}", name)
		case len(v.Versions) == 0:
			return nil, nil, fmt.Errorf("browser %q: \"versions\" is empty", name)
		}
		var unrunnable []string // Docker image versions under -disable-docker
		for _, ver := range sortedKeys(v.Versions) {
			b := v.Versions[ver]
			where := fmt.Sprintf("browser %q version %q", name, ver)
			if strings.TrimSpace(ver) == "" {
				return nil, nil, fmt.Errorf("browser %q: a version name is empty; an empty version request takes \"default\" instead", name)
			}
			if b == nil {
				return nil, nil, fmt.Errorf("%s: entry is null; give at least {\"image\": …}", where)
			}
			if err := checkBrowser(b); err != nil {
				return nil, nil, fmt.Errorf("%s: %v", where, err)
			}
			if b.ShmSize < 0 {
				warnings = append(warnings, fmt.Sprintf("%s: \"shmSize\" %d is negative, so it is unset: the container gets %d MiB of /dev/shm, as under Selenoid; give a size in bytes", where, b.ShmSize, ShmSizeDefault>>20))
			}
			if b.Image.IsCommand() {
				continue
			}
			if !dockerAllowed {
				// Selenoid loads them and answers their requests "not
				// available": a mixed file is common, and must not stop the hub.
				unrunnable = append(unrunnable, ver)
				continue
			}
			// What a container alone reads: a local driver ignores these, as
			// under Selenoid.
			if _, err := ParseMem(b.Mem); err != nil {
				return nil, nil, fmt.Errorf("%s: \"mem\": %v", where, err)
			}
			if _, err := ParseCPU(b.CPU); err != nil {
				return nil, nil, fmt.Errorf("%s: \"cpu\": %v", where, err)
			}
		}
		if len(unrunnable) > 0 {
			warnings = append(warnings, fmt.Sprintf("browser %q: versions %s are Docker images, which this hub does not run (-disable-docker): their requests get \"Requested environment is not available\"; give them a command line array to run a local driver, or start the hub without -disable-docker",
				name, strings.Join(unrunnable, ", ")))
		}
		if v.Default != "" && v.Versions[v.Default] == nil {
			// Selenoid resolves "default" as it resolves a requested version:
			// exactly or as a prefix. Resolved once here, so that the default
			// is one version whatever reads it (the warm pool, Find).
			if r, err := bs.Find(name, v.Default); err == nil {
				v.Default = r.Version
			} else {
				warnings = append(warnings, fmt.Sprintf("browser %q: \"default\" is %q, which matches none of its versions (%s): a request without a version gets \"Requested environment is not available\"; name one of them",
					name, v.Default, strings.Join(sortedKeys(v.Versions), ", ")))
			}
		}
	}
	return bs, warnings, nil
}

// checkBrowser refuses what can never work in one version's entry, whatever
// runs it.
func checkBrowser(b *Browser) error {
	switch {
	case b.Image.IsCommand():
		if b.Image.Command[0] == "" {
			return errors.New("\"image\" command line starts with an empty program name")
		}
	case b.Image.Name == "":
		return errors.New("\"image\" is missing: give a Docker image name or a command line array")
	}
	// Selenoid joins a path without "/" to the request's, and sends a
	// request line no driver accepts ("POST wd/hub/session").
	if b.Path != "" && !strings.HasPrefix(b.Path, "/") {
		return fmt.Errorf("\"path\" %q must start with /", b.Path)
	}
	if b.Port != "" {
		var p int
		if _, err := fmt.Sscanf(b.Port, "%d", &p); err != nil || p < 1 || p > 65535 || fmt.Sprint(p) != b.Port {
			return fmt.Errorf("\"port\" %q must be a number from 1 to 65535", b.Port)
		}
	}
	if b.Display && !b.Image.IsCommand() {
		return errors.New("\"display\" gives a local driver command a virtual screen; a container's image brings its own (remove it)")
	}
	if b.Warm != nil && (*b.Warm < 0 || *b.Warm > 1000) {
		return fmt.Errorf("\"warm\" must be a count of ready browsers from 0 to 1000 (got %d)", *b.Warm)
	}
	for _, e := range b.Env {
		// "NAME" alone is Docker's way to unset the image's variable, and
		// Selenoid passes it on; an empty name Docker refuses at every start.
		if name, _, _ := strings.Cut(e, "="); strings.TrimSpace(name) == "" {
			return fmt.Errorf("\"env\" entry %q has no variable name: give NAME=value, or NAME to unset the image's", e)
		}
	}
	return nil
}

// Resolved is the entry a request resolved to.
type Resolved struct {
	// Name and Version are the configured names the request matched.
	Name, Version string
	*Browser
}

// String is "name version", how logs, errors and labels name the browser.
func (r Resolved) String() string { return r.Name + " " + r.Version }

// Find resolves a browser name and version. An empty version takes the browser's
// default, as does "stable" (Selenium Grid's any version) unless a version is
// so named; otherwise the version matches a configured one exactly or as a
// prefix ("128" matches "128.0"; of several, the highest sorts first). The
// error lists what is configured.
func (bs Browsers) Find(name, version string) (Resolved, error) {
	v := bs[name]
	if v == nil {
		return Resolved{}, &NotFoundError{fmt.Sprintf("browser %q is not configured; configured: %s", name, bs.Describe())}
	}
	if version == "stable" && v.Versions[version] == nil {
		// Selenium Grid's word for whatever version it has (Selenium
		// Manager asks for it): the default, unless a version is so named.
		version = ""
	}
	asked := version
	if version == "" {
		version = v.Default
		if version == "" {
			return Resolved{}, &NotFoundError{fmt.Sprintf("browser %q: no version requested and no \"default\" configured; configured versions: %s", name, strings.Join(sortedKeys(v.Versions), ", "))}
		}
	}
	if b := v.Versions[version]; b != nil {
		return Resolved{Name: name, Version: version, Browser: b}, nil
	}
	keys := sortedKeys(v.Versions)
	for i := len(keys) - 1; i >= 0; i-- {
		if strings.HasPrefix(keys[i], version) {
			return Resolved{Name: name, Version: keys[i], Browser: v.Versions[keys[i]]}, nil
		}
	}
	if asked == "" {
		return Resolved{}, &NotFoundError{fmt.Sprintf("browser %q: no version requested, and its \"default\" %q matches none of its versions; ask for one of %s with browserVersion, or fix \"default\" in browsers.json", name, version, strings.Join(keys, ", "))}
	}
	return Resolved{}, &NotFoundError{fmt.Sprintf("browser %q version %q is not configured; configured versions: %s", name, version, strings.Join(keys, ", "))}
}

// NotFoundError is a browser or version a request asked for that is not
// configured; its message lists what is.
type NotFoundError struct{ Msg string }

func (e *NotFoundError) Error() string { return e.Msg }

// Describe lists every browser with its versions: "chrome (127.0, 128.0); firefox (1)".
func (bs Browsers) Describe() string {
	var parts []string
	for _, n := range sortedKeys(bs) {
		parts = append(parts, fmt.Sprintf("%s (%s)", n, strings.Join(sortedKeys(bs[n].Versions), ", ")))
	}
	return strings.Join(parts, "; ")
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return versionLess(keys[i], keys[j]) })
	return keys
}

// versionLess orders "9.0" before "10.0": numeric runs compare as numbers.
func versionLess(a, b string) bool {
	for a != "" && b != "" {
		na, ra := leadingNumber(a)
		nb, rb := leadingNumber(b)
		if na >= 0 && nb >= 0 {
			if na != nb {
				return na < nb
			}
			a, b = ra, rb
			continue
		}
		if a[0] != b[0] {
			return a[0] < b[0]
		}
		a, b = a[1:], b[1:]
	}
	return len(a) < len(b)
}

func leadingNumber(s string) (int, string) {
	i := 0
	for i < len(s) && i < 9 && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	if i == 0 {
		return -1, s
	}
	n := 0
	for _, c := range s[:i] {
		n = n*10 + int(c-'0')
	}
	return n, s[i:]
}

// Store holds the live configuration and swaps it on Reload. A bad file leaves the
// old configuration in place.
type Store struct {
	path          string
	dockerAllowed bool

	mu       sync.RWMutex
	browsers Browsers
	warnings []string
	loadedAt time.Time
}

// Load reads path once; the error is the start-up error to show the operator.
func Load(path string, dockerAllowed bool) (*Store, error) {
	s := &Store{path: path, dockerAllowed: dockerAllowed}
	if err := s.Reload(); err != nil {
		return nil, err
	}
	return s, nil
}

// NewStore wraps an already parsed configuration (tests, embedding).
func NewStore(bs Browsers) *Store { return &Store{browsers: bs, loadedAt: time.Now()} }

// Reload reads the file again; on error the previous configuration stays.
func (s *Store) Reload() error {
	data, err := os.ReadFile(s.path)
	if err != nil {
		return fmt.Errorf("-conf %s: %w", s.path, err)
	}
	bs, warnings, err := ParseWithWarnings(data, s.dockerAllowed)
	if err != nil {
		return fmt.Errorf("-conf %s: %w", s.path, err)
	}
	for i, w := range warnings {
		warnings[i] = fmt.Sprintf("-conf %s: %s", s.path, w)
	}
	s.mu.Lock()
	s.browsers, s.warnings, s.loadedAt = bs, warnings, time.Now()
	s.mu.Unlock()
	return nil
}

// Warnings are what the live configuration's file loads with but will not
// work as it may mean (ParseWithWarnings), each naming the file: for the
// operator's log after Load and each successful Reload.
func (s *Store) Warnings() []string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return slices.Clone(s.warnings)
}

// Browsers returns the live configuration. It must not be modified.
func (s *Store) Browsers() Browsers {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.browsers
}

// LoadedAt is when the live configuration was read.
func (s *Store) LoadedAt() time.Time {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.loadedAt
}

// VersionsOf returns the configured versions of a browser, sorted.
func (bs Browsers) VersionsOf(name string) []string {
	if v := bs[name]; v != nil {
		return sortedKeys(v.Versions)
	}
	return nil
}

// Names returns the configured browser names, sorted.
func (bs Browsers) Names() []string { return sortedKeys(bs) }
