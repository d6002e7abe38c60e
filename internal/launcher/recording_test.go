package launcher

import "testing"

// A videoName's extension chooses the format only when the recorder writes
// it: a test name with a dot in it ("login v1.2") still records an mp4.
func TestRecordingFile(t *testing.T) {
	for name, want := range map[string]string{
		"":               "video.mp4",
		"checkout.mp4":   "video.mp4",
		"Checkout.MKV":   "video.mkv",
		"login v1.2":     "video.mp4",
		"a.b c$(x)":      "video.mp4",
		"run #3 [ok]":    "video.mp4",
		"clip.mov":       "video.mov",
		"tricky.mp4.txt": "video.mp4",
	} {
		if got := RecordingFile(name); got != want {
			t.Errorf("RecordingFile(%q) = %q, want %q", name, got, want)
		}
	}
}
