package webdriver

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"net"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// Vendor option keys the hub reads and strips before the body reaches a driver.
const (
	OptionsKey         = "websummoner:options"
	SelenoidOptionsKey = "selenoid:options"
)

// NewSession is a parsed new-session request body, W3C or JSONWire.
type NewSession struct {
	// W3C is true when the body has "capabilities"; a body with only
	// "desiredCapabilities" is JSONWire and gets a JSONWire-shaped answer.
	W3C         bool
	AlwaysMatch map[string]any
	FirstMatch  []map[string]any
	Desired     map[string]any
}

// ArgumentError is a client mistake in a request body (W3C "invalid argument").
type ArgumentError struct{ Msg string }

func (e *ArgumentError) Error() string { return e.Msg }

func argErr(format string, a ...any) error { return &ArgumentError{Msg: fmt.Sprintf(format, a...)} }

// MaxFirstMatch bounds the "firstMatch" entries of one request. Clients send
// one or a few; each entry is a browser start the hub may try, so thousands are
// an attack, not a request.
const MaxFirstMatch = 64

// MaxValues bounds the JSON values of a new-session body. Decoded, a value
// costs up to ~100 bytes beyond its text, so a body of many tiny ones ({},
// 0, "") takes tens of times its size in memory; real capabilities have
// hundreds of values, and a browser extension is one string.
const MaxValues = 100_000

// ValueCost is what the hub counts for each JSON value of a body beyond its
// bytes, for what its capabilities hold while they wait: about what a value
// costs decoded.
const ValueCost = 64

// ParseCost bounds what ParseNewSession and a candidate's Caps allocate for
// body, of values values (CountValues): the body copied on the way (the top
// level's and firstMatch's raw messages), its strings decoded (a non-ASCII
// one twice), and each value decoded.
func ParseCost(body []byte, values int) int64 {
	return 4*int64(len(body)) + 2*ValueCost*int64(values)
}

// CountValues is an upper bound on the JSON values in body (each is
// introduced by '[', '{', ',' or ':', or is the first), counted without
// decoding it.
func CountValues(body []byte) int {
	n, in, esc := 1, false, false
	for _, c := range body {
		switch {
		case esc:
			esc = false
		case in:
			if c == '\\' {
				esc = true
			} else if c == '"' {
				in = false
			}
		case c == '"':
			in = true
		case c == ',' || c == ':' || c == '[' || c == '{':
			n++
		}
	}
	return n
}

// ParseNewSession decodes a new-session body. Errors are *ArgumentError. Its
// cost is one decoding of the body, of at most MaxValues values: candidates
// are merged lazily.
func ParseNewSession(body []byte) (*NewSession, error) {
	if !utf8.Valid(body) {
		// JSON is UTF-8 (RFC 8259); decoded, each invalid byte would become
		// a three-byte replacement character, at several times the body's
		// size in memory.
		return nil, argErr("new session request body is not valid UTF-8")
	}
	if n := CountValues(body); n > MaxValues {
		return nil, argErr("new session request body has about %d JSON values; at most %d are accepted (capabilities need far fewer: an extension is one string)", n, MaxValues)
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(body, &top); err != nil {
		return nil, argErr("new session request body is not a JSON object: %v", err)
	}
	n := &NewSession{}
	if raw, ok := top["capabilities"]; ok && string(raw) != "null" {
		n.W3C = true
		var c struct {
			AlwaysMatch map[string]any    `json:"alwaysMatch"`
			FirstMatch  []json.RawMessage `json:"firstMatch"`
		}
		if err := json.Unmarshal(raw, &c); err != nil {
			return nil, argErr("\"capabilities\" must be an object with an object \"alwaysMatch\" and an array of objects \"firstMatch\": %v", err)
		}
		if len(c.FirstMatch) > MaxFirstMatch {
			return nil, argErr("\"firstMatch\" has %d entries; at most %d are accepted", len(c.FirstMatch), MaxFirstMatch)
		}
		n.AlwaysMatch = c.AlwaysMatch
		if n.AlwaysMatch == nil {
			n.AlwaysMatch = map[string]any{}
		}
		for i, raw := range c.FirstMatch {
			var fm map[string]any
			if err := json.Unmarshal(raw, &fm); err != nil {
				return nil, argErr("\"firstMatch\"[%d] must be an object: %v", i, err)
			}
			for k := range fm {
				if _, dup := n.AlwaysMatch[k]; dup {
					return nil, argErr("capability %q is in both \"alwaysMatch\" and \"firstMatch\"[%d]; W3C allows it in one only", k, i)
				}
			}
			n.FirstMatch = append(n.FirstMatch, fm)
		}
		if len(n.FirstMatch) == 0 {
			n.FirstMatch = []map[string]any{{}}
		}
	}
	if raw, ok := top["desiredCapabilities"]; ok && string(raw) != "null" {
		if err := json.Unmarshal(raw, &n.Desired); err != nil {
			return nil, argErr("\"desiredCapabilities\" must be an object: %v", err)
		}
	}
	if !n.W3C && n.Desired == nil {
		return nil, argErr("new session request has neither \"capabilities\" (W3C) nor \"desiredCapabilities\" (JSONWire)")
	}
	return n, nil
}

// Candidate is one set of capabilities the request would accept: alwaysMatch
// merged with one firstMatch entry (W3C), or desiredCapabilities (JSONWire). The
// merge is made only when asked for (Caps), for the one candidate chosen.
type Candidate struct {
	Browser string
	Version string
	Options Options

	always, first map[string]any
}

// Caps is the candidate's merged capabilities. Each call merges afresh.
func (c Candidate) Caps() map[string]any {
	m := make(map[string]any, len(c.always)+len(c.first))
	maps.Copy(m, c.always)
	maps.Copy(m, c.first)
	return m
}

// OtherPlatform reports whether the candidate asks for a desktop platform
// other than Linux, where the hub's browsers run (Windows, macOS): a W3C
// remote end would pass on to the next firstMatch entry. A mobile platform
// (an operator's Android image, by deviceName) is not passed over.
func (c Candidate) OtherPlatform() bool {
	p, _ := c.lookup("platformName")
	s, _ := p.(string)
	s = strings.ToLower(s)
	return strings.HasPrefix(s, "win") || strings.HasPrefix(s, "mac") || s == "os x" || s == "darwin" || s == "xp" || s == "vista"
}

// lookup finds a capability in the candidate without merging.
func (c Candidate) lookup(k string) (any, bool) {
	if v, ok := c.first[k]; ok {
		return v, true
	}
	v, ok := c.always[k]
	return v, ok
}

// stringCaps must be strings when present (null counts as absent, as W3C's
// merging has it).
var stringCaps = []string{"browserName", "browserVersion", "version", "deviceName", "appium:deviceName", "platformName", "platform"}

// Candidates returns the request's candidates in the order they are to be tried.
// Vendor options in alwaysMatch and desiredCapabilities are decoded once, not
// once per candidate.
func (n *NewSession) Candidates() ([]Candidate, error) {
	var cands []Candidate
	if n.W3C {
		for _, fm := range n.FirstMatch {
			cands = append(cands, Candidate{always: n.AlwaysMatch, first: fm})
		}
	} else {
		cands = []Candidate{{always: n.Desired}}
	}
	// desiredCapabilities' options: a JSONWire request's, and a W3C request's
	// when desiredCapabilities names a browser, as Selenoid reads them. Selenium
	// 3 clients send both halves and strip the non-W3C keys (enableVNC, name,
	// sessionTimeout, …) from "capabilities": only this half has them.
	var top, desiredBlock *optionsLayer
	// The browser desiredCapabilities names, for a W3C candidate that names
	// none: Selenoid takes the browser from desiredCapabilities whenever that
	// half names one, and Selenium 3 clients send "capabilities":{} or an empty
	// alwaysMatch beside it.
	var desiredBrowser, desiredVersion string
	if !n.W3C || mapBrowser(n.Desired) != "" {
		var err error
		if top, err = legacyOptions(n.Desired); err != nil {
			return nil, err
		}
		if desiredBlock, err = vendorOptions(n.Desired); err != nil {
			return nil, err
		}
		if n.W3C {
			desiredBrowser = mapBrowser(n.Desired)
			if desiredVersion, err = mapVersion(n.Desired); err != nil {
				return nil, err
			}
		}
	}
	var shared *Options // alwaysMatch's (or desired's) options, decoded once
	for i := range cands {
		c := &cands[i]
		for _, k := range stringCaps {
			if v, ok := c.lookup(k); ok && v != nil {
				if _, isString := v.(string); !isString {
					return nil, argErr("capability %q must be a string (got %s)", k, JSONType(v))
				}
			}
		}
		c.Browser = firstString(c, "browserName", "deviceName", "appium:deviceName")
		c.Version = firstString(c, "browserVersion", "version")
		// Where the W3C half names a browser of its own, it wins (Selenoid
		// would take desiredCapabilities'); where it names the same one
		// without a version, desiredCapabilities' version stands, as it does
		// in Selenoid.
		if desiredBrowser != "" && (c.Browser == "" || c.Browser == desiredBrowser && c.Version == "") {
			c.Browser = desiredBrowser
			if desiredVersion != "" {
				c.Version = desiredVersion
			}
		}
		own := false
		for _, k := range []string{OptionsKey, SelenoidOptionsKey} {
			if _, ok := c.first[k]; ok {
				own = true
			}
		}
		grid, err := gridOptions(*c)
		if err != nil {
			return nil, err
		}
		if own || shared == nil || grid != nil {
			var block *optionsLayer // the W3C half's; a JSONWire request's is desiredBlock
			if n.W3C {
				src := c.always
				if own {
					src = c.first
				}
				var err error
				if block, err = vendorOptions(src); err != nil {
					return nil, err
				}
			}
			// Selenoid's order: desiredCapabilities' block wins over the W3C
			// half's, which fills what it leaves unset; both win over the top
			// level, and that over Grid's se: capabilities.
			o, err := mergeOptions(grid, top, block, desiredBlock)
			if err != nil {
				return nil, err
			}
			if own || grid != nil {
				c.Options = o
				continue
			}
			shared = &o
		}
		c.Options = *shared
	}
	return cands, nil
}

// gridCaps are the capabilities of Selenium Grid's Dynamic Grid
// (docker-selenium) that ask what a Selenoid option asks, by that option.
var gridCaps = map[string]string{"se:recordVideo": "enableVideo", "se:screenResolution": "screenResolution",
	"se:timeZone": "timeZone", "se:name": "name"}

// gridOptions reads a candidate's Grid capabilities (gridCaps) as a layer of
// options, so a Grid user's request records, sizes and names its session
// rather than being silently ignored; nil when it has none.
func gridOptions(c Candidate) (*optionsLayer, error) {
	src := map[string]any{}
	for k, opt := range gridCaps {
		v, ok := c.lookup(k)
		if !ok || v == nil {
			continue
		}
		if _, isBool := v.(bool); opt == "enableVideo" && !isBool {
			return nil, argErr("capability %q must be true or false (got %s)", k, JSONType(v))
		}
		if _, isString := v.(string); opt != "enableVideo" && !isString {
			return nil, argErr("capability %q must be a string (got %s)", k, JSONType(v))
		}
		src[opt] = v
	}
	if len(src) == 0 {
		return nil, nil
	}
	o, err := readOptions(src, "Grid's se: capabilities", false)
	return &optionsLayer{"Grid's se: capabilities", o}, err
}

// mapBrowser is the browser a capabilities object names, as Selenoid's
// BrowserName reads it.
func mapBrowser(caps map[string]any) string {
	for _, k := range []string{"browserName", "deviceName", "appium:deviceName"} {
		if s, ok := caps[k].(string); ok && s != "" {
			return s
		}
	}
	return ""
}

// mapVersion is the version a capabilities object names: browserVersion, or
// Selenoid's legacy version. Each must be a string when present (null counts
// as absent).
func mapVersion(caps map[string]any) (string, error) {
	for _, k := range []string{"browserVersion", "version"} {
		switch v := caps[k].(type) {
		case nil:
		case string:
			if v != "" {
				return v, nil
			}
		default:
			return "", argErr("desiredCapabilities.%s must be a string (got %s)", k, JSONType(v))
		}
	}
	return "", nil
}

// JSONType names the JSON type of a decoded value, for an error message.
func JSONType(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case float64:
		return "a number"
	case bool:
		return "a boolean"
	case []any:
		return "an array"
	case map[string]any:
		return "an object"
	case string:
		return "a string"
	}
	return fmt.Sprintf("%T", v)
}

func firstString(c *Candidate, keys ...string) string {
	for _, k := range keys {
		if v, ok := c.lookup(k); ok {
			if s, ok := v.(string); ok && s != "" {
				return s
			}
		}
	}
	return ""
}

// Options are the vendor options a client may set, under "websummoner:options"
// or, for drop-in use, "selenoid:options" (and at the top level of
// desiredCapabilities: a JSONWire request's, or a W3C request's that also
// carries one naming a browser, as Selenium 3 clients send).
type Options struct {
	Name             string            `json:"name,omitempty"`
	SessionTimeout   time.Duration     `json:"-"`
	Env              []string          `json:"env,omitempty"`
	Labels           map[string]string `json:"labels,omitempty"`
	ScreenResolution string            `json:"screenResolution,omitempty"`
	TimeZone         string            `json:"timeZone,omitempty"`
	EnableVNC        bool              `json:"enableVNC,omitempty"`
	// EnableLog keeps the session's driver output in -log-output-dir, as LogName
	// or <session-id>.log.
	EnableLog bool   `json:"enableLog,omitempty"`
	LogName   string `json:"logName,omitempty"`

	// Video recording (Selenoid's names); containers only. A zero field takes
	// Selenoid's default: <session-id>.mp4, the screen's size, 12 frames a
	// second, libx264.
	EnableVideo     bool   `json:"enableVideo,omitempty"`
	VideoName       string `json:"videoName,omitempty"`
	VideoScreenSize string `json:"videoScreenSize,omitempty"`
	VideoFrameRate  int    `json:"videoFrameRate,omitempty"`
	VideoCodec      string `json:"videoCodec,omitempty"`

	// Per-session networking (Selenoid's names); containers only.
	HostsEntries          []string `json:"hostsEntries,omitempty"`          // "host:ip" lines for /etc/hosts
	DNSServers            []string `json:"dnsServers,omitempty"`            // resolver addresses
	AdditionalNetworks    []string `json:"additionalNetworks,omitempty"`    // Docker networks to join
	ApplicationContainers []string `json:"applicationContainers,omitempty"` // containers linked by name
	ContainerHostname     string   `json:"containerHostname,omitempty"`

	// Ignored names the keys of the vendor options the hub does not know, as
	// "selenoid:options.key": ignored, as Selenoid ignores them, and logged.
	Ignored []string `json:"-"`
}

// Networking reports the per-session networking the options ask for, by
// capability name, for a launcher that cannot apply it to refuse.
func (o Options) Networking() []string {
	var out []string
	for name, set := range map[string]bool{"hostsEntries": len(o.HostsEntries) > 0, "dnsServers": len(o.DNSServers) > 0,
		"additionalNetworks": len(o.AdditionalNetworks) > 0, "applicationContainers": len(o.ApplicationContainers) > 0,
		"containerHostname": o.ContainerHostname != ""} {
		if set {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// knownOptions are the vendor options the hub reads; any other key in
// websummoner:options or selenoid:options is ignored, as Selenoid ignores it
// (clients send options for other grids there too), and named in
// Options.Ignored.
var knownOptions = map[string]bool{"name": true, "sessionTimeout": true, "env": true, "labels": true, "screenResolution": true,
	"timeZone": true, "enableVNC": true, "hostsEntries": true, "dnsServers": true, "additionalNetworks": true,
	"applicationContainers": true, "containerHostname": true, "enableLog": true, "logName": true,
	"enableVideo": true, "videoName": true, "videoScreenSize": true, "videoFrameRate": true, "videoCodec": true}

// notYetOptions are Selenoid options the hub does not implement yet: false or
// empty is accepted, anything else refused, saying so.
var notYetOptions = map[string]string{
	"s3KeyPattern": "S3 upload", "skin": "emulator skins",
}

// maxSessionTimeout bounds a client's sessionTimeout before -max-timeout caps it,
// so no value overflows a time.Duration.
const maxSessionTimeout = 365 * 24 * time.Hour

// optionsLayer is one source of vendor options, read and checked on its own;
// key names it in messages.
type optionsLayer struct {
	key string
	o   Options
}

// vendorOptions reads caps' vendor block, websummoner:options or else
// selenoid:options; nil when it has neither.
func vendorOptions(caps map[string]any) (*optionsLayer, error) {
	for _, k := range []string{OptionsKey, SelenoidOptionsKey} {
		if v, ok := caps[k]; ok {
			m, ok := v.(map[string]any)
			if !ok {
				return nil, argErr("%q must be an object", k)
			}
			o, err := readOptions(m, k, true)
			return &optionsLayer{k, o}, err
		}
	}
	return nil, nil
}

// knownFold is knownOptions in lower case: encoding/json matches names without
// regard to case, as Selenoid's decoding of the same keys does.
var knownFold = func() map[string]bool {
	m := map[string]bool{}
	for k := range knownOptions {
		m[strings.ToLower(k)] = true
	}
	return m
}()

// legacyOptions reads the options a JSONWire client sets at the top level of
// desiredCapabilities.
func legacyOptions(desired map[string]any) (*optionsLayer, error) {
	return knownOptionsOf(desired, "desiredCapabilities")
}

// knownOptionsOf reads the known options among caps' keys, key naming caps in
// messages. Only those keys are read: caps may hold everything else too, an
// extension's megabytes among it.
func knownOptionsOf(caps map[string]any, key string) (*optionsLayer, error) {
	src := map[string]any{}
	for k, v := range caps {
		if knownFold[strings.ToLower(k)] {
			src[k] = v
		}
	}
	if len(src) == 0 {
		return nil, nil
	}
	o, err := readOptions(src, key, false)
	return &optionsLayer{key, o}, err
}

// SessionOptions reads back the options in a session's capabilities, for
// /status, which polls it for every session: Grid's se: capabilities, under
// the known keys at the top level, under those of the vendor block, as
// Candidates merges them. Only known keys are read, so nothing else in the
// capabilities is copied. A layer that does not read is left out: the top
// level of a W3C request is not read at creation, so it was never checked.
func SessionOptions(caps map[string]any) Options {
	top, err := knownOptionsOf(caps, "capabilities")
	if err != nil {
		top = nil
	}
	var block *optionsLayer
	for _, k := range []string{OptionsKey, SelenoidOptionsKey} {
		if v, ok := caps[k]; ok {
			if m, ok := v.(map[string]any); ok {
				if block, err = knownOptionsOf(m, k); err != nil {
					block = nil
				}
			}
			break
		}
	}
	// mergeOptions' errors are a video size larger than a screen another
	// layer set, where the merge it returns is still what the layers say,
	// and labels or env over their bounds between the layers (a W3C
	// request's top level was not read at creation), which are left out.
	grid, err := gridOptions(Candidate{always: caps})
	if err != nil {
		grid = nil
	}
	o, _ := mergeOptions(grid, top, block)
	if len(o.Labels) > maxLabels {
		o.Labels = nil
	}
	if envBytes(o.Env) > maxEnvBytes {
		o.Env = nil
	}
	return o
}

// mergeOptions lays the layers (nil ones skipped) on one another, later ones
// winning, as Selenoid merges them (mergo with override): only a set value
// overrides, so false, "" or [] never unsets one below it; labels merge by
// key; Ignored names each key once. The checks that span options and the video
// defaults are then made on the result.
func mergeOptions(layers ...*optionsLayer) (Options, error) {
	var o Options
	sizeKey := ""
	for _, l := range layers {
		if l == nil {
			continue
		}
		o.overlay(l.o)
		if l.o.VideoScreenSize != "" {
			sizeKey = l.key
		}
	}
	slices.Sort(o.Ignored)
	o.Ignored = slices.Compact(o.Ignored)
	err := videoDefaults(sizeKey, &o)
	// Each layer was bounded; their merge is too.
	if len(o.Labels) > maxLabels {
		return o, argErr("labels has %d entries between its layers: at most %d", len(o.Labels), maxLabels)
	}
	if n := envBytes(o.Env); n > maxEnvBytes {
		return o, argErr("env holds %d bytes: at most %d in all (a process's environment and arguments share about 2 MiB)", n, maxEnvBytes)
	}
	return o, err
}

func envBytes(env []string) int {
	n := 0
	for _, e := range env {
		n += len(e) + 1
	}
	return n
}

// overlay sets o's fields to p's set ones; p's zero fields and empty lists and
// maps leave o's as they are. Labels merge by key; Ignored lists are joined.
// Neither o's nor p's lists or maps are written to: candidates share layers.
func (o *Options) overlay(p Options) {
	labels := p.Labels
	if len(o.Labels) > 0 && len(p.Labels) > 0 {
		labels = maps.Clone(o.Labels)
		maps.Copy(labels, p.Labels)
	} else if len(p.Labels) == 0 {
		labels = o.Labels
	}
	var ignored []string
	if len(o.Ignored)+len(p.Ignored) > 0 {
		ignored = slices.Concat(o.Ignored, p.Ignored)
	}
	dst, src := reflect.ValueOf(o).Elem(), reflect.ValueOf(p)
	for i := range src.NumField() {
		f := src.Field(i)
		if empty := f.IsZero() || (f.Kind() == reflect.Slice || f.Kind() == reflect.Map) && f.Len() == 0; !empty {
			dst.Field(i).Set(f)
		}
	}
	o.Labels, o.Ignored = labels, ignored
}

// readOptions reads and checks one layer of options, src: a vendor block, or
// (checkKeys false) the known options of a JSONWire request's top level. The
// checks that span layers and the video defaults are mergeOptions'.
func readOptions(src map[string]any, key string, checkKeys bool) (Options, error) {
	var o Options
	if checkKeys {
		for k, v := range src {
			if what, ok := notYetOptions[k]; ok {
				if v != nil && v != false && v != "" {
					return o, argErr("%s.%s: %s is not supported by this hub yet (docs/selenoid.md); remove it or set it false", key, k, what)
				}
				continue
			}
			if !knownOptions[k] {
				o.Ignored = append(o.Ignored, key+"."+k)
			}
		}
	}
	raw, _ := json.Marshal(src)
	var aux struct {
		Options
		SessionTimeout any `json:"sessionTimeout"`
		Env            any `json:"env"`
		Labels         any `json:"labels"`
	}
	if err := json.Unmarshal(raw, &aux); err != nil {
		return o, argErr("%s: %v", key, err)
	}
	ignored := o.Ignored
	slices.Sort(ignored)
	o = aux.Options
	o.Ignored = ignored
	// A zero sessionTimeout is the hub's -timeout, as none is: Selenoid
	// takes "0s" too.
	switch t := aux.SessionTimeout.(type) {
	case nil:
	case string:
		d, err := time.ParseDuration(t)
		if err != nil || d < 0 || d > maxSessionTimeout {
			return o, argErr("%s.sessionTimeout %q must be a duration such as \"90s\" or \"5m\", up to 365 days (\"0s\": the hub's -timeout)", key, t)
		}
		o.SessionTimeout = d
	case float64:
		if t < 0 || t > maxSessionTimeout.Seconds() {
			return o, argErr("%s.sessionTimeout %v must be a number of seconds from 0 to %v", key, t, maxSessionTimeout.Seconds())
		}
		o.SessionTimeout = time.Duration(t * float64(time.Second))
	default:
		return o, argErr("%s.sessionTimeout must be a duration string such as \"5m\"", key)
	}
	if aux.Env != nil {
		list, ok := aux.Env.([]any)
		if !ok {
			return o, argErr("%s.env must be an array of \"NAME=value\" strings", key)
		}
		if len(list) > maxEnv {
			return o, argErr("%s.env has %d entries: at most %d", key, len(list), maxEnv)
		}
		for _, e := range list {
			s, ok := e.(string)
			if !ok || !strings.Contains(s, "=") || strings.HasPrefix(s, "=") {
				return o, argErr("%s.env entry %v must be a \"NAME=value\" string", key, e)
			}
			if len(s) > maxEnvEntry {
				name, _, _ := strings.Cut(s, "=")
				return o, argErr("%s.env entry %.64q is %d bytes: at most %d (a process's environment holds no larger variable)", key, name, len(s), maxEnvEntry)
			}
			if strings.IndexByte(s, 0) >= 0 {
				// A process's environment ends each string at a NUL: the
				// container would not start, and the start be counted as
				// the engine's failure.
				name, _, _ := strings.Cut(s, "=")
				return o, argErr("%s.env entry %.64q holds a NUL byte, which no process's environment can", key, name)
			}
			o.Env = append(o.Env, s)
		}
	}
	if len(o.Name) > maxOptionText {
		return o, argErr("%s.name is %d bytes: at most %d", key, len(o.Name), maxOptionText)
	}
	if err := checkNetworking(key, o); err != nil {
		return o, err
	}
	if n := o.LogName; n != "" && !plainFileName(n, maxFileName) {
		return o, argErr("%s.logName %q must be a file name, without a path, such as \"checkout.log\": no '/' or '\\', not starting with '.', no control characters, at most %d bytes", key, n, maxFileName)
	}
	if err := checkScreen(key, &o); err != nil {
		return o, err
	}
	if aux.Labels != nil {
		m, ok := aux.Labels.(map[string]any)
		if !ok {
			return o, argErr("%s.labels must be an object of strings", key)
		}
		if len(m) > maxLabels {
			return o, argErr("%s.labels has %d entries: at most %d", key, len(m), maxLabels)
		}
		o.Labels = map[string]string{}
		for k, v := range m {
			s, ok := v.(string)
			if !ok {
				return o, argErr("%s.labels[%.64q] must be a string", key, k)
			}
			if len(k) > maxLabelKey || len(s) > maxOptionText {
				return o, argErr("%s.labels[%.64q] is too long: a key of at most %d bytes, a value of at most %d", key, k, maxLabelKey, maxOptionText)
			}
			o.Labels[k] = s
		}
	}
	return o, nil
}

// DriverBody is the new-session body to send to the driver for a chosen
// candidate, in the protocol the client spoke: a W3C client's as
// capabilities.alwaysMatch; a JSONWire client's (desiredCapabilities only) as
// desiredCapabilities, so a driver that still speaks JSONWire (chromedriver)
// stays in that mode for the session's commands, as behind Selenoid, which
// forwards the body as it came. Either way the hub's vendor options and the
// version (already resolved by the hub, and a driver would compare it to its
// exact build) are removed, and defaults from browsers.json are merged under
// the client's values. A JSONWire client's chromeOptions is sent as
// goog:chromeOptions, the name browsers.json's defaults use and chromedriver
// reads in both modes.
func DriverBody(merged map[string]any, w3c bool, defaults map[string]any) []byte {
	caps := Merge(defaults, driverCaps(merged, w3c))
	if !w3c {
		return marshal(map[string]any{"desiredCapabilities": caps})
	}
	return marshal(map[string]any{"capabilities": map[string]any{"alwaysMatch": caps, "firstMatch": []any{map[string]any{}}}})
}

// marshal encodes v without json.Marshal's HTML escaping, which writes each
// '<', '>' and '&' as six bytes: a client's body of them would reach its
// driver six times as large.
func marshal(v any) []byte {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
	return bytes.TrimSuffix(b.Bytes(), []byte("\n"))
}

// CheckDefaults refuses a client's value that would take the place of an
// object or array browsers.json gives (goog:chromeOptions: "x", "args": "--y"):
// the operator's defaults (a headless browser's flags, its binary) would
// be gone from the browser, which then fails to start, or starts unlike
// the operator set it up. A null is no value, and the default stays.
func CheckDefaults(merged map[string]any, w3c bool, defaults map[string]any) error {
	return checkOverlay(defaults, driverCaps(merged, w3c), "")
}

func checkOverlay(base, over map[string]any, at string) error {
	for k, bv := range base {
		ov, ok := over[k]
		if !ok || ov == nil {
			continue
		}
		switch b := bv.(type) {
		case map[string]any:
			o, ok := ov.(map[string]any)
			if !ok {
				return argErr("capability %s%s must be a JSON object: browsers.json gives it one for this browser, and %s would remove it", at, k, JSONType(ov))
			}
			if err := checkOverlay(b, o, at+k+"."); err != nil {
				return err
			}
		case []any:
			if _, ok := ov.([]any); !ok {
				return argErr("capability %s%s must be a JSON array: browsers.json gives one for this browser, and %s would remove it", at, k, JSONType(ov))
			}
		}
	}
	return nil
}

// driverCaps is a candidate's capabilities as a driver gets them: without
// the hub's vendor options and the version, a JSONWire client's
// chromeOptions as goog:chromeOptions.
func driverCaps(merged map[string]any, w3c bool) map[string]any {
	caps := map[string]any{}
	for k, v := range merged {
		switch {
		case k == OptionsKey || k == SelenoidOptionsKey || k == "browserVersion" || k == "version":
		case w3c:
			caps[k] = v
		case k == "chromeOptions":
			if _, ok := merged["goog:chromeOptions"]; !ok {
				caps["goog:chromeOptions"] = v
			}
		default:
			caps[k] = v
		}
	}
	if !w3c {
		if name, ok := caps["browserName"]; ok && name == "" {
			delete(caps, "browserName")
		}
	}
	return caps
}

// Merge returns over laid on base: objects merge key by key, arrays are joined
// without repeats (base first), and over's other values win but null, which
// is no value (W3C), so base's stays.
func Merge(base, over map[string]any) map[string]any {
	out := maps.Clone(over)
	if out == nil {
		out = map[string]any{}
	}
	for k, bv := range base {
		ov, ok := out[k]
		if !ok || ov == nil {
			out[k] = bv
			continue
		}
		switch b := bv.(type) {
		case map[string]any:
			if o, ok := ov.(map[string]any); ok {
				out[k] = Merge(b, o)
			}
		case []any:
			if o, ok := ov.([]any); ok {
				joined := slices.Clone(b)
				for _, x := range o {
					if !slices.ContainsFunc(joined, func(y any) bool { return fmt.Sprint(x) == fmt.Sprint(y) }) {
						joined = append(joined, x)
					}
				}
				out[k] = joined
			}
		}
	}
	return out
}

// checkNetworking validates the per-session networking options' shapes.
func checkNetworking(key string, o Options) error {
	// Each entry is a line of the container's /etc/hosts or resolv.conf:
	// tens are a test's, tens of thousands an attempt on the engine's or the
	// API server's message limits.
	if len(o.HostsEntries) > maxHostsEntries {
		return argErr("%s.hostsEntries has %d entries: at most %d", key, len(o.HostsEntries), maxHostsEntries)
	}
	if len(o.DNSServers) > maxDNSServers {
		return argErr("%s.dnsServers has %d entries: at most %d", key, len(o.DNSServers), maxDNSServers)
	}
	for _, e := range o.HostsEntries {
		// Each entry becomes a line of the browser's /etc/hosts: a newline or
		// space in it would add lines or names the client does not own.
		// Docker's "host-gateway" names the host by the address the engine
		// gives it (docker0's, or its host-gateway-ip), which a container
		// reaches anyway, as any of the host's addresses: as in
		// browsers.json's hosts, and as Selenoid takes it.
		host, ip, ok := strings.Cut(e, ":")
		if !ok || !hostName(host) || net.ParseIP(ip) == nil && ip != "host-gateway" {
			return argErr("%s.hostsEntries entry %q must be \"host:ip\", a host name (letters, digits, '-', '_', '.') and an IP address or \"host-gateway\", such as \"db.test:10.0.0.5\"", key, e)
		}
	}
	for _, d := range o.DNSServers {
		if net.ParseIP(d) == nil {
			return argErr("%s.dnsServers entry %q must be an IP address", key, d)
		}
	}
	for _, n := range append(slices.Clone(o.AdditionalNetworks), o.ApplicationContainers...) {
		if n == "" || strings.ContainsAny(n, " /:") {
			return argErr("%s: %q is not a Docker network or container name", key, n)
		}
	}
	if h := o.ContainerHostname; h != "" && (len(h) > 63 || strings.Trim(h, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-.") != "") {
		return argErr("%s.containerHostname %q must be a host name (letters, digits, '-', '.')", key, h)
	}
	return nil
}

// Bounds of the options a session keeps and /status shows to everyone who
// asks: what a test names or labels itself with, not megabytes. An env entry
// stays well under what one variable of a process's environment may be
// (MAX_ARG_STRLEN, 128 KiB).
const (
	maxOptionText = 4096
	maxLabels     = 100
	maxLabelKey   = 255
	maxEnv        = 256
	maxEnvEntry   = 32 << 10
	maxEnvBytes   = 256 << 10

	maxHostsEntries = 256
	maxDNSServers   = 16
)

// maxFileName is the longest logName: a file name's limit on Linux file
// systems. maxVideoName is the longest videoName: the launchers copy a video
// in under a hidden temporary name 15 bytes longer (".<name>.<8 hex>.part").
const (
	maxFileName  = 255
	maxVideoName = maxFileName - len("..01234567.part")
)

// plainFileName reports whether n names a file in the output directory
// itself. Selenoid takes any name, and test names carry spaces, brackets,
// '#', ':' or accents; refused is only what could leave the directory, hide
// a file or forge a line: a directory part ('/', or '\' that reads as one
// elsewhere), a leading '.' ("." and "..", and hidden files, as the
// launchers' temporary files are and listings skip), invalid UTF-8, control
// characters (log lines, file listings), more than limit bytes. Listings
// escape ':' in their links, so a name never reads as a URL such as
// "javascript:…".
func plainFileName(n string, limit int) bool {
	if n == "" || len(n) > limit || n[0] == '.' || strings.ContainsAny(n, "/\\") || !utf8.ValidString(n) {
		return false
	}
	return !strings.ContainsFunc(n, unicode.IsControl)
}

// hostName reports whether h is a DNS host name: dot-separated labels of
// letters, digits, '-' and '_', each 1 to 63 bytes and not starting or ending
// with '-'; at most 253 bytes.
func hostName(h string) bool {
	if h == "" || len(h) > 253 {
		return false
	}
	for label := range strings.SplitSeq(h, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' ||
			strings.Trim(label, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_") != "" {
			return false
		}
	}
	return true
}

// Screen and video bounds: a screen as large as 8K, depths X servers offer,
// frame rates a recorder keeps up with.
const (
	maxScreenSide = 8192
	maxFrameRate  = 60
	defaultScreen = "1920x1080x24"
)

// ParseScreen reads "WxH" or "WxHxDEPTH" (depth 8, 16 or 24) into its parts; a
// missing depth is 24.
func ParseScreen(s string) (w, h, depth int, ok bool) {
	parts := strings.Split(s, "x")
	if len(parts) < 2 || len(parts) > 3 {
		return 0, 0, 0, false
	}
	depth = 24
	nums := []*int{&w, &h, &depth}
	for i, p := range parts {
		n, err := strconv.Atoi(p)
		if err != nil || n <= 0 || p[0] == '+' {
			return 0, 0, 0, false
		}
		*nums[i] = n
	}
	if w < 16 || h < 16 || w > maxScreenSide || h > maxScreenSide || (depth != 8 && depth != 16 && depth != 24) {
		return 0, 0, 0, false
	}
	return w, h, depth, true
}

// Screen is the session's screen as "WxHxDEPTH": screenResolution, or the
// images' default 1920x1080x24.
func (o Options) Screen() string {
	if o.ScreenResolution == "" {
		return defaultScreen
	}
	w, h, d, _ := ParseScreen(o.ScreenResolution)
	return fmt.Sprintf("%dx%dx%d", w, h, d)
}

// checkScreen validates screenResolution and the video options' shapes.
func checkScreen(key string, o *Options) error {
	if o.ScreenResolution != "" {
		if _, _, _, ok := ParseScreen(o.ScreenResolution); !ok {
			return argErr("%s.screenResolution %q must be WIDTHxHEIGHT or WIDTHxHEIGHTxDEPTH (depth 8, 16 or 24; sides 16 to %d), such as \"1920x1080x24\"", key, o.ScreenResolution, maxScreenSide)
		}
	}
	if n := o.VideoName; n != "" && !plainFileName(n, maxVideoName) {
		return argErr("%s.videoName %q must be a file name, without a path, such as \"checkout.mp4\": no '/' or '\\', not starting with '.', no control characters, at most %d bytes", key, n, maxVideoName)
	}
	if v := o.VideoScreenSize; v != "" {
		if _, _, _, ok := ParseScreen(v); !ok || strings.Count(v, "x") != 1 {
			return argErr("%s.videoScreenSize %q must be WIDTHxHEIGHT, such as \"1280x720\"", key, v)
		}
	}
	if r := o.VideoFrameRate; r < 0 || r > maxFrameRate {
		return argErr("%s.videoFrameRate %d must be from 1 to %d frames a second", key, r, maxFrameRate)
	}
	if c := o.VideoCodec; c != "" && !slices.Contains(videoCodecs, c) {
		return argErr("%s.videoCodec %.40q must be one of %s: a compressing encoder (an uncompressed one fills the host's disk at hundreds of MB a second)", key, c, strings.Join(videoCodecs, ", "))
	}
	return nil
}

// videoCodecs are the encoders a client may ask of the recorder (ffmpeg's
// names): those Selenoid's users ask for, all compressing and fast enough
// for a live screen. Selenoid passes any name, and an uncompressed encoder
// (rawvideo, ffv1) fills the host's disk; libx265 or libaom-av1 fall behind.
var videoCodecs = []string{"libx264", "h264", "mpeg4", "libvpx", "libvpx-vp9", "vp8", "vp9"}

// videoDefaults checks videoScreenSize (set in the layer key names) against
// the merged options' screen, which another layer may set, and fills the
// video defaults when enableVideo is set.
func videoDefaults(key string, o *Options) error {
	sw, sh, _, _ := ParseScreen(o.Screen())
	if v := o.VideoScreenSize; v != "" {
		if w, h, _, _ := ParseScreen(v); w > sw || h > sh {
			return argErr("%s.videoScreenSize %s is larger than the screen (%dx%d); set screenResolution at least as large", key, v, sw, sh)
		}
	}
	if !o.EnableVideo {
		return nil
	}
	if o.VideoScreenSize == "" {
		o.VideoScreenSize = fmt.Sprintf("%dx%d", sw, sh)
	}
	if o.VideoFrameRate == 0 {
		o.VideoFrameRate = 12
	}
	if o.VideoCodec == "" {
		o.VideoCodec = "libx264"
	}
	return nil
}
