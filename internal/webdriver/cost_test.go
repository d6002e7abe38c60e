package webdriver

import (
	"encoding/json"
	"fmt"
	"runtime"
	"strings"
	"testing"
)

// hostileBodies are new-session bodies built to make parsing expensive: many
// firstMatch entries against big alwaysMatch vendor options, many keys, deep
// option blocks. Each is a few MB, well under the hub's 32 MiB limit.
func hostileBodies() map[string][]byte {
	big := `"env":[` + strings.Repeat(`"A=1",`, 200_000) + `"B=2"]`
	var manyKeys strings.Builder
	for i := range 200_000 {
		fmt.Fprintf(&manyKeys, `"key%d":%d,`, i, i)
	}
	fm := func(n int, entry string) string {
		return "[" + strings.TrimSuffix(strings.Repeat(entry+",", n), ",") + "]"
	}
	return map[string][]byte{
		"64 firstMatch vs big vendor options":    []byte(`{"capabilities":{"alwaysMatch":{"browserName":"chrome","selenoid:options":{` + big + `}},"firstMatch":` + fm(64, `{}`) + `}}`),
		"1.5M empty firstMatch entries":          []byte(`{"capabilities":{"alwaysMatch":{"selenoid:options":{` + big + `}},"firstMatch":` + fm(1_500_000, `{}`) + `}}`),
		"64 firstMatch vs 200k alwaysMatch keys": []byte(`{"capabilities":{"alwaysMatch":{` + manyKeys.String() + `"browserName":"chrome"},"firstMatch":` + fm(64, `{"browserVersion":"1"}`) + `}}`),
		"JSONWire with big options":              []byte(`{"desiredCapabilities":{"browserName":"chrome",` + big + `}}`),
		// A Selenium 3 body: desiredCapabilities' options are read once, beside
		// each of the W3C half's candidates.
		"64 firstMatch vs big desiredCapabilities": []byte(`{"capabilities":{"alwaysMatch":{"browserName":"chrome"},"firstMatch":` + fm(64, `{"selenoid:options":{"name":"n"}}`) +
			`},"desiredCapabilities":{` + manyKeys.String() + `"browserName":"chrome",` + big + `,"selenoid:options":{` + big + `}}}`),
	}
}

func parseAll(body []byte) {
	n, err := ParseNewSession(body)
	if err != nil {
		return
	}
	cs, err := n.Candidates()
	if err == nil && len(cs) > 0 {
		_ = cs[0].Caps()
	}
}

func allocated(f func()) uint64 {
	var a, b runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&a)
	f()
	runtime.ReadMemStats(&b)
	return b.TotalAlloc - a.TotalAlloc
}

// Parsing any body costs at most 20× json.Unmarshal of the same body in
// allocated bytes (time is BenchmarkHostileBodies', against the same baseline).
func TestParsingCostIsLinear(t *testing.T) {
	if testing.Short() {
		t.Skip("builds multi-megabyte bodies")
	}
	for name, body := range hostileBodies() {
		base := allocated(func() {
			var v any
			_ = json.Unmarshal(body, &v)
		})
		got := allocated(func() { parseAll(body) })
		if ratio := float64(got) / float64(base); ratio > 20 {
			t.Errorf("%s (%d KB): parsing allocated %d KB, %.1f× json.Unmarshal's %d KB", name, len(body)>>10, got>>10, ratio, base>>10)
		} else {
			t.Logf("%s (%d KB): %.2f× json.Unmarshal in allocated bytes", name, len(body)>>10, ratio)
		}
	}
}

// BenchmarkHostileBodies reports parse time against json.Unmarshal of the same
// body (the baseline, in the same run): the target is ≤ 20×.
func BenchmarkHostileBodies(b *testing.B) {
	for name, body := range hostileBodies() {
		b.Run(name+"/unmarshal", func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(body)))
			for b.Loop() {
				var v any
				_ = json.Unmarshal(body, &v)
			}
		})
		b.Run(name+"/parse", func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(body)))
			for b.Loop() {
				parseAll(body)
			}
		})
	}
}
