package launcher

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/websummoner/websummoner/internal/config"
	"github.com/websummoner/websummoner/internal/webdriver"
)

// One precedence for every launcher: client env < derived < operator env, each
// name once.
func TestEnv(t *testing.T) {
	r := Request{Browser: config.Resolved{Browser: &config.Browser{Image: config.Image{Name: "selenoid/chrome"}, Env: []string{"LANG=C", "TZ=UTC"}}},
		Options: webdriver.Options{Env: []string{"TZ=Asia/Tokyo", "FOO=1", "LANG=de", "SCREEN_RESOLUTION=1x1x1"},
			TimeZone: "Europe/Paris", ScreenResolution: "1280x1024x24", EnableVNC: true}}
	got := strings.Join(Env(r), " ")
	// A container always says whether it records, as Selenoid's do.
	if want := "TZ=UTC FOO=1 LANG=C SCREEN_RESOLUTION=1280x1024x24 ENABLE_VNC=true ENABLE_VIDEO=false"; got != want {
		t.Fatalf("env %q, want %q", got, want)
	}
	if env := Env(Request{Browser: config.Resolved{Browser: &config.Browser{Image: config.Image{Command: []string{"chromedriver"}}}}}); len(env) != 0 {
		t.Fatalf("nothing asked: %v", env)
	}
}

// The zero Options work; negative values name their flag.
func TestOptionsDefaultsAndValidate(t *testing.T) {
	o := Options{}.WithDefaults()
	if o.StartupTimeout != 30*time.Second || o.StopTimeout != 30*time.Second || o.Instance != DefaultInstance {
		t.Fatalf("defaults %+v", o)
	}
	if err := (Options{}).Validate(); err != nil {
		t.Fatalf("zero options refused: %v", err)
	}
	for _, c := range []struct {
		o    Options
		flag string
	}{
		{Options{StartupTimeout: -1}, "-service-startup-timeout"},
		{Options{StopTimeout: -1}, "-session-delete-timeout"},
		{Options{Instance: "a b"}, "-instance"},
	} {
		if err := c.o.Validate(); err == nil || !strings.Contains(err.Error(), c.flag) {
			t.Errorf("%+v: %v, want an error naming %s", c.o, err, c.flag)
		}
	}
}

// What a client may choose for a local driver, which runs on the hub's host:
// env from the allow-list (operator-extendable, never a loader or search-path
// variable), no binary, launcher or profile unless the operator allows it. In
// a container, which is the boundary as under Selenoid, all of it but the
// hub's own variables.
func TestCheckClient(t *testing.T) {
	local := config.Resolved{Name: "chrome", Version: "128.0", Browser: &config.Browser{
		Image: config.Image{Command: []string{"chromedriver"}}, ClientEnv: []string{"APP_*", "LD_PRELOAD", "PATH"}}}
	container := config.Resolved{Name: "chrome", Version: "128.0", Browser: &config.Browser{
		Image: config.Image{Name: "selenoid/chrome:128.0"}}}
	opts := func(env ...string) webdriver.Options { return webdriver.Options{Env: env} }
	chrome := func(k string, v any) map[string]any {
		return map[string]any{"browserName": "chrome", "goog:chromeOptions": map[string]any{k: v}}
	}
	for _, c := range []struct {
		name      string
		o         webdriver.Options
		caps      map[string]any
		local     string // "" = allowed
		container string
	}{
		{"locale", opts("LANG=de_DE.UTF-8", "LC_ALL=C", "TZ=UTC"), nil, "", ""},
		{"zone names", webdriver.Options{TimeZone: "America/New_York", Env: []string{"TZ=:Europe/Paris", "TZ=EST5EDT,M3.2.0,M11.1.0"}}, nil, "", ""},
		{"a zone file of the host's", opts("TZ=/etc/passwd", "TZ=UTC"), nil, `env TZ "/etc/passwd" names a file of the hub's host`, ""},
		{"a zone file, glibc's colon", opts("TZ=:/root/x"), nil, `env TZ ":/root/x"`, ""},
		{"a zone file, by timeZone", webdriver.Options{TimeZone: "../../../etc/passwd"}, nil, `timeZone "../../../etc/passwd"`, ""},
		{"operator's family", opts("APP_MODE=test"), nil, "", ""},
		{"a locale file of the host's", opts("LC_ALL=/etc"), nil, `env LC_ALL "/etc" names a file of the hub's host`, ""},
		{"a locale up the tree", opts("LANGUAGE=en:../../x"), nil, `env LANGUAGE "en:../../x"`, ""},
		{"a locale file by geckodriver's env", webdriver.Options{}, map[string]any{"moz:firefoxOptions": map[string]any{"env": map[string]any{"LC_ALL": "/tmp/evil"}}}, `"moz:firefoxOptions".env "LC_ALL=/tmp/evil"`, ""},
		{"a zone file by geckodriver's env", webdriver.Options{}, map[string]any{"moz:firefoxOptions": map[string]any{"env": map[string]any{"TZ": ":/root/x"}}}, `"moz:firefoxOptions".env "TZ=:/root/x"`, ""},
		{"a locale by geckodriver's env", webdriver.Options{}, map[string]any{"moz:firefoxOptions": map[string]any{"env": map[string]any{"LC_ALL": "de_DE.UTF-8", "TZ": "Europe/Paris"}}}, "", ""},
		{"Firefox's profile by name", webdriver.Options{}, map[string]any{"moz:firefoxOptions": map[string]any{"args": []any{"-P", "default-release"}}}, `"-P"`, ""},
		{"unlisted", opts("FOO=1"), nil, `env "FOO" may not be set`, ""},
		{"loader, even listed", opts("LD_PRELOAD=/tmp/x.so"), nil, `env "LD_PRELOAD"`, ""},
		{"search path, even listed", opts("PATH=/tmp"), nil, `env "PATH"`, ""},
		{"search path family", opts("PYTHONPATH=/tmp"), nil, `env "PYTHONPATH"`, ""},
		{"our marker", opts("WEBSUMMONER_PROCESS=x"), nil, `env "WEBSUMMONER_PROCESS"`, `env "WEBSUMMONER_PROCESS"`},
		{"the image's allow-list", opts("WEBSUMMONER_HUB_ADDRESSES=0.0.0.0/0"), nil, `env "WEBSUMMONER_HUB_ADDRESSES"`, `env "WEBSUMMONER_HUB_ADDRESSES"`},
		{"a screen past its bounds", opts("SCREEN_RESOLUTION=12000x12000x24"), nil, `env "SCREEN_RESOLUTION"`, `option screenResolution`},
		{"VNC past /status", opts("ENABLE_VNC=true"), nil, `env "ENABLE_VNC"`, `option enableVNC`},
		{"the hub's labels", webdriver.Options{Labels: map[string]string{"websummoner.instance": "other"}}, nil, `labels "websummoner.instance"`, `labels "websummoner.instance"`},
		{"a team's label", webdriver.Options{Labels: map[string]string{"team": "web"}}, nil, "", ""},
		{"plain args", webdriver.Options{}, chrome("args", []any{"--headless", "--window-size=800,600"}), "", ""},
		{"options that are not an object", webdriver.Options{}, map[string]any{"browserName": "chrome", "goog:chromeOptions": "--headless"}, `"goog:chromeOptions" must be a JSON object of the browser's options, not a string`, `"goog:chromeOptions" must be a JSON object`},
		{"args as one string", webdriver.Options{}, chrome("args", "--user-agent=x"), `"goog:chromeOptions".args must be a list of strings, such as ["--headless"], not a string`, `"goog:chromeOptions".args must be a list`},
		{"args with a number", webdriver.Options{}, map[string]any{"ms:edgeOptions": map[string]any{"args": []any{"--a", 1.0}}}, `"ms:edgeOptions".args must be a list of strings: it holds a number`, `"ms:edgeOptions".args must be a list`},
		{"prefs as a list", webdriver.Options{}, map[string]any{"moz:firefoxOptions": map[string]any{"prefs": []any{}}}, `"moz:firefoxOptions".prefs must be a JSON object, not an array`, `"moz:firefoxOptions".prefs`},
		{"null is left out", webdriver.Options{}, map[string]any{"goog:chromeOptions": map[string]any{"args": nil, "prefs": nil}, "ms:edgeOptions": nil}, "", ""},
		{"a PAC file of the host's", webdriver.Options{}, map[string]any{"proxy": map[string]any{"proxyType": "pac", "proxyAutoconfigUrl": "file:///etc/passwd"}}, `"proxy".proxyAutoconfigUrl "file:///etc/passwd"`, ""},
		{"a PAC file served", webdriver.Options{}, map[string]any{"proxy": map[string]any{"proxyType": "pac", "proxyAutoconfigUrl": "http://pac.test/proxy.pac"}}, "", ""},
		{"binary", webdriver.Options{}, chrome("binary", "/tmp/evil"), `"goog:chromeOptions".binary chooses what runs`, ""},
		{"firefox binary", webdriver.Options{}, map[string]any{"moz:firefoxOptions": map[string]any{"binary": "/x"}}, `"moz:firefoxOptions".binary`, ""},
		{"command prefix", webdriver.Options{}, chrome("args", []any{"--renderer-cmd-prefix=/tmp/evil"}), `--renderer-cmd-prefix`, ""},
		// A command that names no absolute path: the switch alone refuses it.
		{"zygote's prefix", webdriver.Options{}, chrome("args", []any{"--zygote-cmd-prefix=sh -c touch${IFS}/tmp/x"}), `--zygote-cmd-prefix`, ""},
		// chromedriver trims white space and takes an argument with no dashes as a switch.
		{"a refused switch behind white space", webdriver.Options{}, chrome("args", []any{" \t--renderer-cmd-prefix=sh -c id"}), `--renderer-cmd-prefix`, ""},
		{"a refused switch without dashes", webdriver.Options{}, chrome("args", []any{"utility-cmd-prefix=sh"}), `utility-cmd-prefix`, ""},
		{"a refused switch in capitals", webdriver.Options{}, chrome("args", []any{"--GPU-Launcher=sh"}), `--GPU-Launcher`, ""},
		{"a launcher not yet listed", webdriver.Options{}, chrome("args", []any{"--future-helper-cmd-prefix=sh"}), `--future-helper-cmd-prefix`, ""},
		{"a library to load", webdriver.Options{}, chrome("args", []any{"--gssapi-library-name=libevil.so"}), `--gssapi-library-name`, ""},
		{"a GTK module in a list", webdriver.Options{}, map[string]any{"webkitgtk:browserOptions": map[string]any{"args": []any{"--gtk-module=x:/tmp/evil.so"}}}, `--gtk-module`, ""},
		{"a path list as its own argument", webdriver.Options{}, map[string]any{"webkitgtk:browserOptions": map[string]any{"args": []any{"--sm-client-id", "x:/tmp/evil.so"}}}, `x:/tmp/evil.so`, ""},
		{"GStreamer's plugins", webdriver.Options{}, map[string]any{"webkitgtk:browserOptions": map[string]any{"args": []any{"--gst-plugin-path=.:/tmp/p"}}}, `--gst-plugin-path`, ""},
		{"another session's display", webdriver.Options{}, map[string]any{"webkitgtk:browserOptions": map[string]any{"args": []any{"--display=:101"}}}, `--display`, ""},
		{"a path list's entry", webdriver.Options{}, chrome("args", []any{"--some-list=a:/etc/x"}), `--some-list=a:/etc/x`, ""},
		{"a path list's entry up the tree", webdriver.Options{}, chrome("args", []any{"--some-list=a:../x.so"}), `--some-list=a:../x.so`, ""},
		{"a one-letter scheme is a list's", webdriver.Options{}, chrome("args", []any{"--some-list=x://tmp/x.so"}), `x://tmp/x.so`, ""},
		{"loader variables of a family the operator admits", opts("APP_IM_MODULE_FILE=im.cache"), nil, `env "APP_IM_MODULE_FILE"`, ""},
		{"a host path by a variable the operator admits", opts("APP_HOME=/etc"), nil, `env APP_HOME "/etc" names a file of the hub's host`, ""},
		{"a URL after other characters", webdriver.Options{}, chrome("args", []any{"--user-agent=MyBot/1.0 (+http://example.com/bot)", "--proxy-server=socks5://[::1]:1080", "--enable-features=Foo:url/http://x"}), "", ""},
		{"the parent directory first in a list", webdriver.Options{}, chrome("args", []any{"--some-list=..:x"}), `--some-list=..:x`, ""},
		{"a path behind a bar", webdriver.Options{}, chrome("args", []any{"--x=a|/tmp/evil"}), `--x=a|/tmp/evil`, ""},
		{"a URL by a variable the operator admits", opts("APP_URL=http://app.test:8080/?next=/login"), nil, "", ""},
		{"a dash first in a variable's path list", opts("APP_X=-x:/tmp/evil.so"), nil, `env APP_X "-x:/tmp/evil.so"`, ""},
		{"a loader's list of files", opts("APP_ICD_FILENAMES=icd.json"), nil, `env "APP_ICD_FILENAMES"`, ""},
		{"WebKit's remote inspector", opts("WEBKIT_INSPECTOR_SERVER=127.0.0.1:9999"), nil, `env "WEBKIT_INSPECTOR_SERVER"`, ""},
		{"a host path behind white space", webdriver.Options{}, chrome("args", []any{" --log-file=/etc/cron.d/x"}), `--log-file=/etc/cron.d/x`, ""},
		{"another profile", webdriver.Options{}, chrome("args", []any{"--user-data-dir=/tmp/other"}), `--user-data-dir`, ""},
		{"another browser", webdriver.Options{}, chrome("debuggerAddress", "127.0.0.1:9222"), `debuggerAddress`, ""},
		// A JSONWire client's chromeOptions reach chromedriver as goog:chromeOptions.
		{"JSONWire binary", webdriver.Options{}, map[string]any{"chromeOptions": map[string]any{"binary": "/tmp/evil"}}, `"chromeOptions".binary chooses what runs`, ""},
		{"JSONWire profile", webdriver.Options{}, map[string]any{"chromeOptions": map[string]any{"args": []any{"--user-data-dir=/tmp/other"}}}, `--user-data-dir`, ""},
		// WebKitWebDriver attaches to the browser at targetAddress: another
		// local WebKit session's remote inspector, on the host's loopback.
		{"another WebKit browser", webdriver.Options{}, map[string]any{"webkitgtk:browserOptions": map[string]any{"targetAddress": "127.0.0.1:33563"}}, `targetAddress`, ""},
		{"another WPE browser's port", webdriver.Options{}, map[string]any{"wpe:browserOptions": map[string]any{"targetPort": 33563}}, `targetPort`, ""},
		{"JSONWire another browser", webdriver.Options{}, map[string]any{"chromeOptions": map[string]any{"debuggerAddress": "127.0.0.1:1"}}, `debuggerAddress`, ""},
		{"Selenium 2 binary", webdriver.Options{}, map[string]any{"firefox_binary": "/tmp/evil"}, `"firefox_binary" chooses what runs`, ""},
		// Arguments that name host files: written (a log over a cron file),
		// read (an extension, a page), wherever in the value.
		{"log over a host file", webdriver.Options{}, chrome("args", []any{"--enable-logging", "--log-file=/etc/cron.d/x"}), `--log-file=/etc/cron.d/x`, ""},
		{"a host extension", webdriver.Options{}, chrome("args", []any{"--load-extension=ext,/home/u/ext"}), `--load-extension`, ""},
		{"V8's log", webdriver.Options{}, chrome("args", []any{"--js-flags=--logfile=/tmp/x --log"}), `--js-flags`, ""},
		{"a host page", webdriver.Options{}, chrome("args", []any{"/etc/passwd"}), `"/etc/passwd"`, ""},
		{"a file URL", webdriver.Options{}, chrome("args", []any{"--proxy-pac-url=FILE:///etc/x.pac"}), `--proxy-pac-url`, ""},
		{"a way up", webdriver.Options{}, chrome("args", []any{"--disk-cache-dir=../../x"}), `--disk-cache-dir`, ""},
		{"Chromium expands no ~", webdriver.Options{}, chrome("args", []any{"--crash-dumps-dir=~/x"}), "", ""},
		{"certificate hashes", webdriver.Options{}, chrome("args", []any{"--ignore-certificate-errors-spki-list=/7Rhu5Ph3gOTe2V8ZoS1Yk1z4pe5wLfH1L0z1kDcX4A=,AAAA"}), "", ""},
		{"a crash dump directory", webdriver.Options{}, chrome("minidumpPath", "/home/hub/.config/autostart"), `goog:chromeOptions.minidumpPath "/home/hub/.config/autostart"`, ""},
		{"downloads the hub pins", webdriver.Options{}, chrome("prefs", map[string]any{"download.default_directory": "/tmp/downloads", "intl.accept_languages": "de"}), "", ""},
		{"downloads as nested prefs", webdriver.Options{}, chrome("prefs", map[string]any{"download": map[string]any{"default_directory": "/etc/cron.d"}}), `prefs.download.default_directory`, ""},
		{"Firefox's environment", webdriver.Options{}, map[string]any{"moz:firefoxOptions": map[string]any{"env": map[string]any{"LD_PRELOAD": "/tmp/x.so"}}}, `"moz:firefoxOptions".env "LD_PRELOAD=`, ""},
		{"Firefox's log file", webdriver.Options{}, map[string]any{"moz:firefoxOptions": map[string]any{"env": map[string]any{"MOZ_LOG": "all:5", "MOZ_LOG_FILE": "/home/hub/.bashrc"}}}, `.env "MOZ_LOG`, ""},
		{"Firefox's locale", webdriver.Options{}, map[string]any{"moz:firefoxOptions": map[string]any{"env": map[string]any{"LANG": "de_DE.UTF-8"}}}, "", ""},
		{"Firefox's downloads, pinned", webdriver.Options{}, map[string]any{"moz:firefoxOptions": map[string]any{"prefs": map[string]any{"browser.download.dir": "/tmp/dl", "browser.helperApps.neverAsk.saveToDisk": "text/csv,application/pdf"}}}, "", ""},
		{"Firefox's cache on the host", webdriver.Options{}, map[string]any{"moz:firefoxOptions": map[string]any{"prefs": map[string]any{"browser.cache.disk.parent_directory": "/home/hub"}}}, `browser.cache.disk.parent_directory`, ""},
		{"Firefox's whole profile", webdriver.Options{}, map[string]any{"moz:firefoxOptions": map[string]any{"profile": "UEsDBBQAAAAIAA=="}}, `"moz:firefoxOptions".profile`, ""},
		{"downloads of a block the hub does not pin", webdriver.Options{}, map[string]any{"operaOptions": map[string]any{"prefs": map[string]any{"download.default_directory": "/home/hub/.config/autostart"}}}, `operaOptions.prefs.download.default_directory`, ""},
		{"a cloud's options", webdriver.Options{}, map[string]any{"sauce:options": map[string]any{"name": "/checkout flow"}, "wdio:chromedriverOptions": map[string]any{"cacheDir": "/tmp/wdio"}}, "", ""},
		{"the hub's own options", webdriver.Options{}, map[string]any{"selenoid:options": map[string]any{"labels": map[string]any{"build": "/job/123"}, "name": "/checkout"}}, "", ""},
		{"a relative log is the session's", webdriver.Options{}, chrome("args", []any{"--log-file=chrome.log"}), "", ""},
		{"what users pass", webdriver.Options{}, chrome("args", []any{"--user-agent=Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36", "--lang=de-DE",
			"--proxy-server=http://127.0.0.1:3128", "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE localhost", "--window-size=1280,800", "--headless=new",
			"--unsafely-treat-insecure-origin-as-secure=http://app.test:8080", "--disable-features=Translate,OptimizationHints"}), "", ""},
	} {
		for _, where := range []struct {
			b    config.Resolved
			want string
		}{{local, c.local}, {container, c.container}} {
			err := CheckClient(where.b, c.o, c.caps)
			if where.want == "" && err != nil || where.want != "" && (err == nil || !strings.Contains(err.Error(), where.want)) {
				t.Errorf("%s for %v: %v, want %q", c.name, where.b.Image, err, where.want)
			}
			var ae *webdriver.ArgumentError
			if err != nil && !errors.As(err, &ae) {
				t.Errorf("%s: %T is not an ArgumentError", c.name, err)
			}
		}
	}
	if err := CheckClient(local, webdriver.Options{HostsEntries: []string{"a:1.2.3.4"}}, nil); err == nil || !strings.Contains(err.Error(), "hostsEntries cannot apply") {
		t.Errorf("networking for a local driver: %v", err)
	}
	if err := CheckClient(container, webdriver.Options{HostsEntries: []string{"a:1.2.3.4"}}, nil); err != nil {
		t.Errorf("networking for a container: %v", err)
	}
	local.AllowClientBinary = true
	if err := CheckClient(local, webdriver.Options{}, chrome("binary", "/opt/chrome")); err != nil {
		t.Errorf("allowClientBinary: %v", err)
	}
	if err := CheckClient(local, opts("LD_PRELOAD=/x"), nil); err == nil {
		t.Error("allowClientBinary let a loader variable through")
	}
}

// additionalNetworks and applicationContainers reach only what the operator
// named in browsers.json: an internal network or another user's container
// (its id is in /status) is refused before the request queues.
func TestNetworksAndContainersFromTheOperatorOnly(t *testing.T) {
	b := config.Resolved{Name: "chrome", Version: "1", Browser: &config.Browser{
		AllowedNetworks: []string{"apps"}, AllowedApplicationContainers: []string{"db"}}}
	for _, c := range []struct {
		name string
		o    webdriver.Options
		want string
	}{
		{"listed network", webdriver.Options{AdditionalNetworks: []string{"apps"}}, ""},
		{"unlisted network", webdriver.Options{AdditionalNetworks: []string{"apps", "internal-secrets"}}, `additionalNetworks "internal-secrets" is not a network the operator lets`},
		{"listed container", webdriver.Options{ApplicationContainers: []string{"db"}}, ""},
		{"another session's container", webdriver.Options{ApplicationContainers: []string{"websummoner-hub-1-abc"}}, `applicationContainers "websummoner-hub-1-abc" is not a container the operator lets`},
	} {
		err := CheckClient(b, c.o, nil)
		var ae *webdriver.ArgumentError
		if c.want == "" && err != nil || c.want != "" && (!errors.As(err, &ae) || !strings.Contains(err.Error(), c.want)) {
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
	}
	// Nothing listed: nothing joinable.
	none := config.Resolved{Name: "chrome", Version: "1", Browser: &config.Browser{}}
	if err := CheckClient(none, webdriver.Options{AdditionalNetworks: []string{"bridge"}}, nil); err == nil {
		t.Error("a network joined with no allowedNetworks in browsers.json")
	}
}

// A container runs in a zone as under Selenoid: the client's "timeZone" if
// the hub knows it, else the hub's own; a client's or the operator's "env" TZ
// wins over the hub's. A local driver's environment is as before: it runs on
// the hub's host, in its zone.
func TestContainerEnvTimeZone(t *testing.T) {
	image := &config.Browser{Image: config.Image{Name: "selenoid/chrome"}}
	for _, c := range []struct {
		name string
		b    *config.Browser
		o    webdriver.Options
		hub  string
		want string // "": no TZ
	}{
		{"none asked: the hub's", image, webdriver.Options{}, "Europe/Berlin", "Europe/Berlin"},
		{"the client's timeZone", image, webdriver.Options{TimeZone: "Asia/Tokyo"}, "Europe/Berlin", "Asia/Tokyo"},
		{"an unknown timeZone: the hub's", image, webdriver.Options{TimeZone: "Mars/Olympus_Mons"}, "Europe/Berlin", "Europe/Berlin"},
		{"Local is no zone to tell a container", image, webdriver.Options{TimeZone: "Local"}, "UTC", "UTC"},
		{"the client's env TZ beats the hub's", image, webdriver.Options{Env: []string{"TZ=America/New_York"}}, "Europe/Berlin", "America/New_York"},
		{"the operator's env TZ beats all", &config.Browser{Image: config.Image{Name: "x"}, Env: []string{"TZ=UTC"}}, webdriver.Options{TimeZone: "Asia/Tokyo"}, "Europe/Berlin", "UTC"},
		{"a hub zone without a name: none", image, webdriver.Options{}, "", ""},
	} {
		env := ContainerEnv(Request{Browser: config.Resolved{Browser: c.b}, Options: c.o}, c.hub, nil)
		var tz []string
		for _, kv := range env {
			if v, ok := strings.CutPrefix(kv, "TZ="); ok {
				tz = append(tz, v)
			}
		}
		if len(tz) > 1 || strings.Join(tz, "") != c.want {
			t.Errorf("%s: TZ %v in %v, want %q", c.name, tz, env, c.want)
		}
	}
	local := config.Resolved{Browser: &config.Browser{Image: config.Image{Command: []string{"chromedriver"}}}}
	if env := Env(Request{Browser: local}); len(env) != 0 {
		t.Errorf("local driver, nothing asked: %v", env)
	}
	if env := Env(Request{Browser: local, Options: webdriver.Options{TimeZone: "Asia/Tokyo"}}); strings.Join(env, " ") != "TZ=Asia/Tokyo" {
		t.Errorf("local driver with timeZone: %v", env)
	}
}

// The hub's zone is named as a container's TZ can take it: TZ's value, the
// zone /etc/localtime links to when Go calls it "Local", or nothing.
func TestZoneName(t *testing.T) {
	link := func(target string) func() (string, error) {
		return func() (string, error) { return target, nil }
	}
	notLink := func() (string, error) { return "", errors.New("invalid argument") }
	for _, c := range []struct {
		local     string
		localtime func() (string, error)
		want      string
	}{
		{"Europe/Paris", notLink, "Europe/Paris"},
		{"UTC", notLink, "UTC"},
		{"Local", link("/usr/share/zoneinfo/Asia/Tokyo"), "Asia/Tokyo"},
		{"Local", link("../usr/share/zoneinfo/America/Sao_Paulo"), "America/Sao_Paulo"},
		{"Local", link("/etc/zoneinfo/Etc/UTC"), "Etc/UTC"},
		{"Local", notLink, ""},                  // a copied file: no name
		{"Local", link("/etc/mytime"), ""},      // outside a zoneinfo tree
		{"Local", link("zoneinfo/Nowhere"), ""}, // no such zone
		{"/usr/share/zoneinfo/Europe/Rome", notLink, "Europe/Rome"},
		{"/opt/tz/custom", notLink, ""},
	} {
		if got := zoneName(c.local, c.localtime); got != c.want {
			t.Errorf("zoneName(%q) = %q, want %q", c.local, got, c.want)
		}
	}
	if o := (Options{TimeZone: "Asia/Tokyo"}).WithDefaults(); o.TimeZone != "Asia/Tokyo" {
		t.Errorf("WithDefaults replaced a set zone with %q", o.TimeZone)
	}
	if o := (Options{}).WithDefaults(); o.TimeZone != HubTimeZone() {
		t.Errorf("WithDefaults gives the zone %q, the hub's is %q", o.TimeZone, HubTimeZone())
	}
}
