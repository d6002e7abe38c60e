package config

import "testing"

// FuzzParse: any browsers.json loads or is refused with an error; a loaded one
// resolves every configured browser and version without panicking.
func FuzzParse(f *testing.F) {
	for _, seed := range []string{
		`{"chrome": {"default": "128.0", "versions": {"128.0": {"image": "selenoid/chrome:128.0", "port": "4444", "path": "/", "env": ["TZ=UTC"], "tmpfs": {"/tmp": "size=512m"}, "caps": {"a": 1}}}}}`,
		`{"stub": {"default": "1", "versions": {"1": {"image": ["/bin/wdstub", "-x"], "clientEnv": ["APP_*"], "allowClientBinary": true}}}}`,
		`{"a": null}`, `{"": {"versions": {}}}`, `{} {}`, `[`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		bs, err := Parse(data, true)
		if err != nil {
			return
		}
		_ = bs.Describe()
		for _, name := range bs.Names() {
			for _, v := range bs.VersionsOf(name) {
				if r, err := bs.Find(name, v); err != nil || r.Browser == nil {
					t.Fatalf("%s %s is configured but not found: %v", name, v, err)
				}
			}
			_, _ = bs.Find(name, "")
		}
	})
}
