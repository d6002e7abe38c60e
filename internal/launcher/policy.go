package launcher

import (
	"fmt"
	"net/url"
	"slices"
	"strings"

	"github.com/websummoner/websummoner/internal/config"
	"github.com/websummoner/websummoner/internal/webdriver"
)

// defaultClientEnv is what a client's "env" may set with no operator say-so:
// locale and time zone, which change what a page shows and nothing that runs.
var defaultClientEnv = []string{"LANG", "LANGUAGE", "LC_*", "TZ"}

// neverClientEnv are variables that choose code the driver, the browser or a
// helper loads or runs: refused to a client even when the operator's
// "clientEnv" would admit them.
var neverClientEnv = []string{
	"LD_*", "DYLD_*", "*PATH", "*_PRELOAD", "*_OPTIONS", "*OPTS", "*LIB",
	"BASH_ENV", "ENV", "SHELLOPTS", "PS4", "IFS", "PYTHONSTARTUP", "PYTHONHOME",
	"GTK_MODULES", "GIO_*", "GST_*", "GCONV_*", "LOCPATH", "NLSPATH", "HOME", "TMPDIR", "XDG_*",
	"CHROME_*", "GOOGLE_*", "MOZ_*", "WEBSUMMONER_*",
	// Modules, plugins and files GTK, GDK and GStreamer load by name
	// (GTK_IM_MODULE_FILE, GDK_PIXBUF_MODULEDIR, GTK_EXE_PREFIX), and
	// WebKit's remote inspector, which any local process could then drive.
	// Vulkan's and EGL's loader lists name JSON files that load a library;
	// an X or Wayland display is another session's screen.
	"*MODULE", "*MODULES", "*MODULE_FILE", "*MODULEDIR", "*_PREFIX", "*FILE", "*FILES", "*FILENAMES", "*DIR", "*DIRS",
	"WEBKIT_INSPECTOR*", "DISPLAY", "XAUTHORITY", "WAYLAND_DISPLAY",
}

// envMatch reports whether name matches one of patterns ("X_*" a prefix, "*X" a
// suffix, else exact).
func envMatch(name string, patterns []string) bool {
	for _, p := range patterns {
		switch {
		case strings.HasSuffix(p, "*") && strings.HasPrefix(name, strings.TrimSuffix(p, "*")):
			return true
		case strings.HasPrefix(p, "*") && strings.HasSuffix(name, strings.TrimPrefix(p, "*")):
			return true
		case p == name:
			return true
		}
	}
	return false
}

// neverContainerEnv are variables a client may not set even in a container
// of its own: the hub's contract with the image (WEBSUMMONER_HUB_ADDRESSES
// names who may reach the container's services), and Selenoid's contract
// variables the hub sets from options it checks (envFromOption): set as env
// they would skip those checks, the screen's bounds among them.
var neverContainerEnv = []string{"WEBSUMMONER_*"}

// envFromOption are the variables of Selenoid's image contract the hub sets
// from an option, by the option's name.
var envFromOption = map[string]string{"SCREEN_RESOLUTION": "screenResolution", "ENABLE_VNC": "enableVNC"}

// inContainer reports whether b runs in a container. There the container is
// the boundary, as under Selenoid: what a client sets inside it (any env,
// Chromium's arguments, another binary of the image) touches its own session
// alone, while mounts, privileges, devices and networks stay the operator's.
// A local driver runs on the hub's host, where the client chooses nothing
// that runs.
func inContainer(b config.Resolved) bool { return b.Browser != nil && !b.Image.IsCommand() }

// clientEnvAllowed says whether a client may set name for browser b.
func clientEnvAllowed(b config.Resolved, name string) bool {
	if inContainer(b) {
		return !envMatch(name, neverContainerEnv) && envFromOption[name] == ""
	}
	if envMatch(name, neverClientEnv) {
		return false
	}
	return envMatch(name, defaultClientEnv) || (b.Browser != nil && envMatch(name, b.ClientEnv))
}

// chooseWhatRuns are chromium arguments that name a program to run, a
// library to load, or another browser's state to use.
var chooseWhatRuns = []string{"--renderer-cmd-prefix", "--utility-cmd-prefix", "--zygote-cmd-prefix", "--nacl-loader-cmd-prefix",
	"--gpu-launcher", "--browser-subprocess-path", "--plugin-launcher", "--ppapi-plugin-launcher", "--nacl-gdb", "--nacl-gdb-script",
	"--gssapi-library-name", "--register-pepper-plugins", "--gpu-startup-dialog", "--user-data-dir", "--remote-debugging-pipe",
	// GTK's and GStreamer's, which WebKitGTK's MiniBrowser takes: modules
	// and plugins to load, another session's X display, files to read.
	"--gtk-module", "--gst-plugin-path", "--gst-plugin-load", "--display", "--session-file", "--cookies-file", "--config", "--content-filter"}

// runsShapes are the endings of chromium's switches that wrap or replace a
// process it starts: a switch of that shape is refused though no list above
// names it yet, as Chromium adds such switches from time to time.
var runsShapes = []string{"-cmd-prefix", "-launcher", "-library-name", "-subprocess-path", "-gdb", "-gdb-script", "-module", "-plugin-path", "-plugin-load"}

// switchName is the name chromedriver gives argument a as Chromium's switch:
// it trims the argument's white space and one leading "--" (an argument
// without one is a switch too); this trims every dash, and folds case, so
// that no spelling of a refused switch is told apart from it.
func switchName(a string) string {
	name, _, _ := strings.Cut(strings.TrimLeft(strings.TrimSpace(a), "-"), "=")
	return strings.ToLower(strings.TrimSpace(name))
}

// choosesProgram reports whether a chromium argument names what runs.
func choosesProgram(a string) bool {
	name := switchName(a)
	return slices.Contains(chooseWhatRuns, "--"+name) || name == "profile" || name == "p" || // Firefox's profile, by path or by name
		slices.ContainsFunc(runsShapes, func(end string) bool { return strings.HasSuffix(name, end) })
}

// namesHostPath reports whether a browser argument names a place of the
// host's file system — an absolute path, a file: URL, a way up (..)
// — as its value or in any part of it (--log-file=/etc/cron.d/x,
// --load-extension=a,/b, --js-flags=--logfile=/x), or as itself (a bare
// path, which Chromium opens as a page). A relative name is the session's
// own: the driver runs in the session's directory.
func namesHostPath(arg string) bool {
	v := arg
	if strings.HasPrefix(arg, "-") {
		var ok bool
		if _, v, ok = strings.Cut(arg, "="); !ok {
			return false
		}
	}
	return valueNamesHostPath(v)
}

// valueNamesHostPath is namesHostPath's rule on a value: any part of it,
// split where lists and quoting split it, that is a path of the host.
func valueNamesHostPath(v string) bool {
	for _, part := range strings.FieldsFunc(v, func(r rune) bool { return strings.ContainsRune(",;= \t\"'|()<>", r) }) {
		p := strings.ToLower(part)
		if strings.HasPrefix(p, "file:") {
			return true
		}
		// ':' separates the entries of GLib's, GStreamer's and the
		// loader's path lists (--gtk-module=x:/abs/lib.so): an entry that
		// is a path counts, but for a URL's "//" after its scheme.
		entries := strings.Split(p, ":")
		for i, e := range entries {
			if hostPath(e) && !(i > 0 && strings.HasPrefix(e, "//") && endsInScheme(entries[i-1])) {
				return true
			}
		}
	}
	return false
}

// endsInScheme reports whether s ends in what a URL's scheme could be, of
// two characters or more ("http", "socks5", "+http" in a user agent's
// "(+http://…)"): a letter, then letters, digits, '+', '.' or '-'.
func endsInScheme(s string) bool {
	i := len(s)
	for i > 0 && strings.IndexByte("abcdefghijklmnopqrstuvwxyz0123456789+.-", s[i-1]) >= 0 {
		i--
	}
	scheme := strings.TrimLeft(s[i:], "0123456789+.-")
	return len(scheme) >= 2
}

// envValueNamesHostPath is valueNamesHostPath for a variable's value, but
// for a URL of a host (APP_URL=http://app.test/?next=/login), which names
// no file of this one.
func envValueNamesHostPath(v string) bool {
	if u, err := url.Parse(v); err == nil && len(u.Scheme) > 1 && u.Scheme != "file" && u.Host != "" && !strings.ContainsAny(v, ",; |") {
		return false
	}
	return valueNamesHostPath(v)
}

// hostPath reports whether p is an absolute path, or a relative one that
// goes up ("..").
func hostPath(p string) bool {
	return strings.HasPrefix(p, "/") || strings.HasPrefix(p, "\\") ||
		p == ".." || strings.HasPrefix(p, "../") || strings.Contains(p, "/../") || strings.HasSuffix(p, "/..")
}

// zoneFile reports whether a TZ value names a file, which glibc then reads
// as a zone: ":/path", "/path", or a way up ("..").
func zoneFile(tz string) bool {
	v := strings.TrimPrefix(tz, ":")
	return namesHostPath(v) || strings.Contains(v, "..")
}

// localeFile reports whether a locale variable's value names a file: glibc
// loads a locale named by a path from that path, as it reads a zone file,
// where a locale is a name ("de_DE.UTF-8", "en_US:en").
func localeFile(name, v string) bool {
	return (name == "LANG" || name == "LANGUAGE" || strings.HasPrefix(name, "LC_")) &&
		(strings.ContainsAny(v, "/\\") || strings.Contains(v, ".."))
}

// envValueNamesFile reports whether a variable a client may set for a local
// driver names a file of the host by its value: a zone file by TZ, a
// locale's files by a locale variable, any path of the host by any other
// (what an operator's "clientEnv" family admits by name is no file's).
func envValueNamesFile(name, v string) bool {
	return name == "TZ" && zoneFile(v) || localeFile(name, v) || name != "TZ" && envValueNamesHostPath(v)
}

// CheckClient refuses, before the request queues, what a client may not
// choose: for a local driver, an env variable outside the allow-list, or —
// unless the operator set "allowClientBinary" — a capability that picks the
// program that runs or another browser's state; in a container, the hub's
// own variables; anywhere, a network or container the operator did not name.
// The error is a *webdriver.ArgumentError naming it.
func CheckClient(b config.Resolved, o webdriver.Options, caps map[string]any) error {
	if err := checkBlockShapes(caps); err != nil {
		return err
	}
	for _, kv := range o.Env {
		name, _, _ := strings.Cut(kv, "=")
		if !clientEnvAllowed(b, name) {
			if opt := envFromOption[name]; inContainer(b) && opt != "" {
				return &webdriver.ArgumentError{Msg: fmt.Sprintf("env %q may not be set by a client: the hub sets it from the option %s, which it checks and shows in /status; give that instead", name, opt)}
			}
			if inContainer(b) {
				return &webdriver.ArgumentError{Msg: fmt.Sprintf("env %q may not be set by a client: WEBSUMMONER_* variables are the hub's own contract with the image (docs/security.md)", name)}
			}
			return &webdriver.ArgumentError{Msg: fmt.Sprintf("env %q may not be set by a client for %s, a local driver process on the hub's host: only %s%s, and never loader or search-path variables; in a container any other variable may be set (docs/security.md)",
				name, b, strings.Join(defaultClientEnv, ", "), operatorEnv(b))}
		}
	}
	if b.Browser != nil && b.Image.IsCommand() {
		what, zones := "timeZone", []string{o.TimeZone}
		for _, kv := range o.Env {
			if v, ok := strings.CutPrefix(kv, "TZ="); ok {
				zones = append(zones, v)
			}
		}
		for i, tz := range zones {
			if i > 0 {
				what = "env TZ"
			}
			if zoneFile(tz) {
				return &webdriver.ArgumentError{Msg: fmt.Sprintf("%s %.100q names a file of the hub's host for %s, a local driver process; give a zone name such as \"Europe/Paris\"", what, tz, b)}
			}
		}
		for _, kv := range o.Env {
			name, v, _ := strings.Cut(kv, "=")
			switch {
			case localeFile(name, v):
				return &webdriver.ArgumentError{Msg: fmt.Sprintf("env %s %.100q names a file of the hub's host for %s, a local driver process; give a locale name such as \"de_DE.UTF-8\"", name, v, b)}
			case name != "TZ" && envValueNamesFile(name, v):
				return &webdriver.ArgumentError{Msg: fmt.Sprintf("env %s %.100q names a file of the hub's host for %s, a local driver process: a client's variables name no file of the host (docs/security.md)", name, v, b)}
			}
		}
	}
	if net := o.Networking(); len(net) > 0 && b.Browser != nil && b.Image.IsCommand() {
		return &webdriver.ArgumentError{Msg: fmt.Sprintf("%s runs as a local driver process, where %s cannot apply; they work for browsers in containers", b, strings.Join(net, ", "))}
	}
	for k := range o.Labels {
		if strings.HasPrefix(k, "websummoner.") {
			return &webdriver.ArgumentError{Msg: fmt.Sprintf("labels %.64q may not be set by a client: websummoner.* labels are the hub's own, by which it finds its containers", k)}
		}
	}
	if b.Browser != nil {
		for _, n := range o.AdditionalNetworks {
			if !slices.Contains(b.AllowedNetworks, n) {
				return &webdriver.ArgumentError{Msg: fmt.Sprintf("additionalNetworks %q is not a network the operator lets %s join; networks and containers are named in browsers.json (\"allowedNetworks\"), never by a client alone (docs/security.md)", n, b)}
			}
		}
		for _, c := range o.ApplicationContainers {
			if !slices.Contains(b.AllowedApplicationContainers, c) {
				return &webdriver.ArgumentError{Msg: fmt.Sprintf("applicationContainers %q is not a container the operator lets %s reach; containers are named in browsers.json (\"allowedApplicationContainers\"), never by a client alone (docs/security.md)", c, b)}
			}
		}
	}
	if o.EnableVideo && b.Browser != nil && b.Image.IsCommand() {
		return &webdriver.ArgumentError{Msg: fmt.Sprintf("%s runs as a local driver process, which has no screen to record; enableVideo works for browsers in containers (docs/live-view.md)", b)}
	}
	if b.Browser != nil && b.AllowClientBinary || inContainer(b) {
		return nil
	}
	if what := choosesWhatRuns(b, caps); what != "" {
		return &webdriver.ArgumentError{Msg: fmt.Sprintf("%s chooses what runs on the hub's host, or a file of it; %s allows it only with \"allowClientBinary\": true in browsers.json (docs/security.md)", what, b)}
	}
	return nil
}

func operatorEnv(b config.Resolved) string {
	if b.Browser == nil || len(b.ClientEnv) == 0 {
		return " (add more with \"clientEnv\" in browsers.json)"
	}
	return ", " + strings.Join(b.ClientEnv, ", ")
}

// choosesWhatRuns names the first capability of caps that picks a program or
// another browser's state, or returns "". Every options block counts, with a
// vendor prefix or without: a JSONWire client's chromeOptions reaches
// chromedriver as goog:chromeOptions.
func choosesWhatRuns(b config.Resolved, caps map[string]any) string {
	// W3C's proxy: a PAC file the browser would read from the host.
	if proxy, ok := caps["proxy"].(map[string]any); ok {
		if pac, _ := proxy["proxyAutoconfigUrl"].(string); namesHostPath(pac) {
			return fmt.Sprintf("\"proxy\".proxyAutoconfigUrl %.100q", pac)
		}
	}
	for key, v := range caps {
		if k := strings.ToLower(key); k == "binary" || strings.HasSuffix(k, "_binary") || strings.HasSuffix(k, ".binary") {
			return fmt.Sprintf("%q", key)
		}
		opts, ok := v.(map[string]any)
		if !ok || !strings.HasSuffix(strings.ToLower(key), "options") || key == webdriver.OptionsKey || key == webdriver.SelenoidOptionsKey {
			continue // the hub's own options are checked where they are read, and never reach the driver
		}
		// debuggerAddress (chromedriver) and targetAddress/targetPort
		// (WebKitWebDriver, "host:port") attach the driver to a browser
		// already running: on this host, another session's, whose remote
		// inspector listens on the shared loopback.
		for _, k := range []string{"binary", "debuggerAddress", "targetAddress", "targetPort", "androidPackage", "androidDeviceSerial", browserState[key]} {
			if _, ok := opts[k]; ok && k != "" {
				return fmt.Sprintf("%q.%s", key, k)
			}
		}
		args, _ := opts["args"].([]any)
		for _, a := range args {
			s, _ := a.(string)
			if choosesProgram(s) ||
				namesHostPath(strings.TrimSpace(s)) && switchName(s) != "ignore-certificate-errors-spki-list" { // base64 hashes, which may begin with '/'
				return fmt.Sprintf("%q.args %.200q", key, s)
			}
		}
		// geckodriver's env is the browser's environment: the same
		// allow-list as the session's own env.
		env, _ := opts["env"].(map[string]any)
		for name, v := range env {
			s, _ := v.(string)
			if !clientEnvAllowed(b, name) || envValueNamesFile(name, s) {
				return fmt.Sprintf("%q.env %q", key, name+"="+s)
			}
		}
		if !browserBlocks[key] {
			continue // a cloud's or a client library's options (sauce:options, wdio:…): no browser reads them
		}
		pinned := pinnedPrefs(key)
		for k, v := range opts {
			switch k {
			case "args", "env", "extensions": // checked above, or base64
				continue
			}
			if at := hostPathIn(v, key+"."+k, pinned); at != "" {
				return at
			}
		}
	}
	return ""
}

// checkBlockShapes refuses a browser's options block that is not an object,
// or whose args is not a list of strings or prefs not an object, as its
// driver would: the hub adds to these blocks (a window size, a download
// directory), and would otherwise put a malformed one right and start a
// session without what the client asked for. null is the value left out.
func checkBlockShapes(caps map[string]any) error {
	for key, v := range caps {
		if !browserBlocks[key] || v == nil {
			continue
		}
		opts, ok := v.(map[string]any)
		if !ok {
			return &webdriver.ArgumentError{Msg: fmt.Sprintf("%q must be a JSON object of the browser's options, not %s", key, webdriver.JSONType(v))}
		}
		if args, ok := opts["args"]; ok && args != nil {
			list, ok := args.([]any)
			if !ok {
				return &webdriver.ArgumentError{Msg: fmt.Sprintf("%q.args must be a list of strings, such as [\"--headless\"], not %s", key, webdriver.JSONType(args))}
			}
			for _, a := range list {
				if _, ok := a.(string); !ok {
					return &webdriver.ArgumentError{Msg: fmt.Sprintf("%q.args must be a list of strings: it holds %s", key, webdriver.JSONType(a))}
				}
			}
		}
		if prefs, ok := opts["prefs"]; ok && prefs != nil {
			if _, ok := prefs.(map[string]any); !ok {
				return &webdriver.ArgumentError{Msg: fmt.Sprintf("%q.prefs must be a JSON object, not %s", key, webdriver.JSONType(prefs))}
			}
		}
	}
	return nil
}

// browserBlocks are the options blocks a browser's driver reads, whose
// values the browser acts on: each is scanned for host paths.
var browserBlocks = map[string]bool{"goog:chromeOptions": true, "chromeOptions": true, "ms:edgeOptions": true, "moz:firefoxOptions": true,
	"operaOptions": true, "webkitgtk:browserOptions": true, "wpe:browserOptions": true}

// browserState names, for a block, its key that hands the browser a whole
// profile — another browser's state, as --user-data-dir: Firefox's base64
// profile carries a user.js whose preferences no scan sees.
var browserState = map[string]string{"moz:firefoxOptions": "profile"}

// DownloadPrefs are the preferences, by options block, that the hub sets
// over a client's for a local driver: its downloads go to dir, the
// session's own directory, and nowhere else.
func DownloadPrefs(dir string) map[string]map[string]any {
	chromium := map[string]any{"download.default_directory": dir, "download.prompt_for_download": false, "savefile.default_directory": dir}
	return map[string]map[string]any{
		"goog:chromeOptions": chromium,
		"ms:edgeOptions":     chromium,
		"moz:firefoxOptions": {"browser.download.dir": dir, "browser.download.folderList": 2, "browser.download.useDownloadDir": true},
	}
}

// pinnedPrefs are the preferences the hub sets in block key (DownloadPrefs):
// not the client's. A JSONWire chromeOptions reaches the driver as
// goog:chromeOptions.
func pinnedPrefs(key string) map[string]any {
	if key == "chromeOptions" {
		key = "goog:chromeOptions"
	}
	return DownloadPrefs("")[key]
}

// hostPathIn names the first string under v, at path, that names a place of
// the host's file system (minidumpPath, a preference naming a directory, a
// log file), or returns "". A preference the hub pins (of pinned, at the
// block's top-level prefs) is not the client's.
func hostPathIn(v any, path string, pinned map[string]any) string {
	switch t := v.(type) {
	case string:
		if namesHostPath(t) {
			return fmt.Sprintf("%s %q", path, t)
		}
	case map[string]any:
		for k, x := range t {
			if _, ok := pinned[k]; ok && strings.HasSuffix(path, ".prefs") {
				continue
			}
			if at := hostPathIn(x, path+"."+k, pinned); at != "" {
				return at
			}
		}
	case []any:
		for i, x := range t {
			if at := hostPathIn(x, fmt.Sprintf("%s[%d]", path, i), pinned); at != "" {
				return at
			}
		}
	}
	return ""
}
