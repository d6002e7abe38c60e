package bench

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
)

// TestFloorChartLabelClearsTarget: a value just short of its target is
// labelled after the target's dashed line, not under it; a value far from its
// target is labelled at its bar's end.
func TestFloorChartLabelClearsTarget(t *testing.T) {
	path := filepath.Join(t.TempDir(), "floor.svg")
	if err := FloorChart([]Ratio{{Label: "close", Value: 1.89, Target: 2.0}, {Label: "far", Value: 0.5, Target: 2.0}}, path); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	num := func(re string) []int {
		var xs []int
		for _, m := range regexp.MustCompile(re).FindAllSubmatch(b, -1) {
			x, _ := strconv.Atoi(string(m[1]))
			xs = append(xs, x)
		}
		return xs
	}
	labels := num(`<text x="(\d+)" y="\d+">[\d.]+×</text>`)
	lines := num(`<line x1="(\d+)" y1="\d+" x2="\d+" y2="\d+" stroke="black" stroke-dasharray="3"/>`)
	bars := num(`<rect x="\d+" y="\d+" width="(\d+)" height="20"`)
	if len(labels) != 2 || len(lines) != 2 || len(bars) != 2 {
		t.Fatalf("labels %v, target lines %v, bars %v in:\n%s", labels, lines, bars, b)
	}
	if labels[0] <= lines[0] {
		t.Errorf("1.89 against 2.0: label at x=%d, under the target's line at x=%d", labels[0], lines[0])
	}
	if barEnd := 330 + bars[1]; labels[1] != barEnd+4 {
		t.Errorf("0.5 against 2.0: label at x=%d, want the bar's end %d + 4", labels[1], barEnd)
	}
}
