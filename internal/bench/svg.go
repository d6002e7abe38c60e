package bench

import (
	"fmt"
	"os"
	"strings"
)

type svg struct{ b strings.Builder }

func newSVG(w, h int, title string) *svg {
	s := &svg{}
	fmt.Fprintf(&s.b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="12">`+"\n", w, h)
	fmt.Fprintf(&s.b, `<rect width="100%%" height="100%%" fill="white"/><text x="%d" y="20" text-anchor="middle" font-size="15">%s</text>`+"\n", w/2, title)
	return s
}

func (s *svg) add(format string, a ...any) { fmt.Fprintf(&s.b, format+"\n", a...) }

func (s *svg) save(path string) error {
	s.b.WriteString("</svg>\n")
	return os.WriteFile(path, []byte(s.b.String()), 0o644)
}

// LatencyChart draws p50 and p99 command latency, direct, through the byte
// relay and through the hub, per concurrency, from a proxy Result.
func LatencyChart(r *Result, concs []int, path string) error {
	const w, h, left, bottom, top = 720, 380, 60, 320, 40
	maxV := 0.0
	for _, c := range concs {
		for _, k := range []string{"direct_p50", "direct_p99", "relay_p50", "relay_p99", "hub_p50", "hub_p99"} {
			maxV = max(maxV, r.Figures[fmt.Sprintf("c%d_%s_ms", c, k)])
		}
	}
	maxV *= 1.15
	s := newSVG(w, h, "WebDriver command latency: direct, through a byte relay, through the hub (same run)")
	s.add(`<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="black"/>`, left, bottom, w-20, bottom)
	s.add(`<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="black"/>`, left, top, left, bottom)
	for i := 0; i <= 4; i++ {
		v := maxV * float64(i) / 4
		y := bottom - int(float64(bottom-top)*float64(i)/4)
		s.add(`<text x="%d" y="%d" text-anchor="end">%.2f</text><line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#ddd"/>`, left-5, y+4, v, left, y, w-20, y)
	}
	s.add(`<text x="15" y="%d" transform="rotate(-90 15 %d)" text-anchor="middle">ms</text>`, (top+bottom)/2, (top+bottom)/2)
	colors := map[string]string{"direct_p50": "#9ecae1", "direct_p99": "#3182bd", "relay_p50": "#c7e9c0", "relay_p99": "#31a354", "hub_p50": "#fdae6b", "hub_p99": "#e6550d"}
	keys := []string{"direct_p50", "direct_p99", "relay_p50", "relay_p99", "hub_p50", "hub_p99"}
	group := (w - 20 - left) / len(concs)
	bar := group / 8
	for gi, c := range concs {
		x0 := left + gi*group + bar
		for ki, k := range keys {
			v := r.Figures[fmt.Sprintf("c%d_%s_ms", c, k)]
			bh := int(float64(bottom-top) * v / maxV)
			s.add(`<rect x="%d" y="%d" width="%d" height="%d" fill="%s"/>`, x0+ki*bar, bottom-bh, bar-2, bh, colors[k])
		}
		s.add(`<text x="%d" y="%d" text-anchor="middle">%d sessions</text>`, x0+3*bar, bottom+18, c)
	}
	for i, k := range keys {
		s.add(`<rect x="%d" y="%d" width="12" height="12" fill="%s"/><text x="%d" y="%d">%s</text>`, left+10+i*105, h-22, colors[k], left+26+i*105, h-12, strings.ReplaceAll(k, "_", " "))
	}
	return s.save(path)
}

// JamChart draws each jam arrival: when it came, how long until it was answered,
// and with what; and the moment the hub reported congestion.
func JamChart(r *Result, points []JamPoint, path string) error {
	const w, h, left, bottom, top = 720, 400, 60, 340, 40
	maxX, maxY := 0.0, 0.0
	for _, p := range points {
		maxX = max(maxX, (p.Arrival + p.Answer).Seconds())
		maxY = max(maxY, p.Answer.Seconds())
	}
	maxX, maxY = maxX*1.05, maxY*1.1
	px := func(v float64) int { return left + int(float64(w-20-left)*v/maxX) }
	py := func(v float64) int { return bottom - int(float64(bottom-top)*v/maxY) }
	s := newSVG(w, h, fmt.Sprintf("Jam: -queue-timeout %.0fs, browsers that never start; one arrival each step", r.Figures["queue_timeout_s"]))
	s.add(`<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="black"/><line x1="%d" y1="%d" x2="%d" y2="%d" stroke="black"/>`, left, bottom, w-20, bottom, left, top, left, bottom)
	for i := 0; i <= 4; i++ {
		y := maxY * float64(i) / 4
		x := maxX * float64(i) / 4
		s.add(`<text x="%d" y="%d" text-anchor="end">%.1f</text>`, left-5, py(y)+4, y)
		s.add(`<text x="%d" y="%d" text-anchor="middle">%.0f</text>`, px(x), bottom+16, x)
	}
	s.add(`<text x="%d" y="%d" text-anchor="middle">arrival (s)</text>`, (left+w)/2, bottom+34)
	s.add(`<text x="15" y="%d" transform="rotate(-90 15 %d)" text-anchor="middle">time to answer (s)</text>`, (top+bottom)/2, (top+bottom)/2)
	if c := r.Figures["congested_at_s"]; c >= 0 {
		s.add(`<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#e6550d" stroke-dasharray="4"/><text x="%d" y="%d" fill="#e6550d">congested = 1</text>`, px(c), top, px(c), bottom, px(c)+4, top+12)
	}
	limit := r.Figures["saturated_budget_s"] + 1
	s.add(`<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#31a354" stroke-dasharray="2"/><text x="%d" y="%d" fill="#31a354">saturated budget + 1s</text>`, left, py(limit), w-20, py(limit), w-170, py(limit)-4)
	for _, p := range points {
		color := "#999"
		if p.Status == 429 {
			color = "#de2d26"
		} else if p.Status == 200 {
			color = "#31a354"
		}
		s.add(`<circle cx="%d" cy="%d" r="4" fill="%s"/>`, px(p.Arrival.Seconds()), py(p.Answer.Seconds()), color)
	}
	s.add(`<circle cx="%d" cy="%d" r="4" fill="#de2d26"/><text x="%d" y="%d">429</text>`, left+10, h-14, left+18, h-10)
	return s.save(path)
}

// Ratio is one bar of FloorChart: the hub's figure over its same-run floor,
// and the target ratio (0: reported, no target).
type Ratio struct {
	Label         string
	Value, Target float64
	// Higher says the hub should be at or above Target (throughput); else at
	// or below (latency).
	Higher bool
}

// FloorChart draws the hub's figures as ratios to their floors (1.0 = as good
// as the floor), each with its target.
func FloorChart(ratios []Ratio, path string) error {
	const w, left, top, row = 760, 330, 40, 34
	h := top + row*len(ratios) + 50
	maxV := 1.0
	for _, r := range ratios {
		maxV = max(maxV, r.Value, r.Target)
	}
	maxV *= 1.1
	px := func(v float64) int { return left + int(float64(w-30-left)*v/maxV) }
	s := newSVG(w, h, "The hub over its floor, same run (1.0 = the floor; dashed = target; grey = reported)")
	s.add(`<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="black"/>`, px(1), top, px(1), top+row*len(ratios))
	for i, r := range ratios {
		y := top + i*row + 6
		met := r.Value <= r.Target
		if r.Higher {
			met = r.Value >= r.Target
		}
		color := "#31a354"
		switch {
		case r.Target == 0:
			color = "#969696"
		case !met:
			color = "#de2d26"
		}
		s.add(`<text x="%d" y="%d" text-anchor="end">%s</text>`, left-8, y+14, r.Label)
		s.add(`<rect x="%d" y="%d" width="%d" height="20" fill="%s"/>`, left, y, px(r.Value)-left, color)
		// The value's label clears the target's line when the two are close.
		lx := px(r.Value) + 4
		if t := px(r.Target); r.Target > 0 && t >= lx-4 && t < lx+40 {
			lx = t + 4
		}
		s.add(`<text x="%d" y="%d">%.2f×</text>`, lx, y+14, r.Value)
		if r.Target > 0 {
			s.add(`<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="black" stroke-dasharray="3"/>`, px(r.Target), y-3, px(r.Target), y+23)
		}
	}
	s.add(`<text x="%d" y="%d">%s</text>`, left, h-16, "green: target met; red: missed; grey: reported, no target")
	return s.save(path)
}

// RealBrowserChart draws the realbrowser scenario's p50 and p99 per path
// (chromedriver direct, the bare ReverseProxy and Selenoid if they ran, the
// hub) and the proxies' own CPU per command, from its Result.
func RealBrowserChart(r *Result, path string) error {
	type bar struct {
		label, key string
	}
	var paths []bar
	for _, p := range []bar{{"chromedriver, direct", "direct"}, {"ReverseProxy alone", "reverseproxy"}, {"hub", "hub"}, {"Selenoid", "selenoid"}} {
		if _, ok := r.Figures[p.key+"_p50_ms"]; ok {
			paths = append(paths, p)
		}
	}
	if len(paths) == 0 {
		return fmt.Errorf("realbrowser chart: the result has no p50 figure of any path")
	}
	const w, left, top, row = 760, 170, 50, 28
	h := top + len(paths)*2*row + 54
	maxMs, maxCPU := 0.0, 0.0
	for _, p := range paths {
		maxMs = max(maxMs, r.Figures[p.key+"_p99_ms"])
		maxCPU = max(maxCPU, r.Figures[p.key+"_cpu_us_per_cmd"])
	}
	maxMs, maxCPU = maxMs*1.2, max(maxCPU, 1)*1.25
	half := (w - left - 40) / 2
	s := newSVG(w, h, fmt.Sprintf("A real browser: four commands on one headless Chromium, %.0f per path, same run", r.Figures["commands_per_target"]))
	s.add(`<text x="%d" y="%d" text-anchor="middle">latency, ms (light: p50, dark: p99)</text>`, left+half/2, top-8)
	s.add(`<text x="%d" y="%d" text-anchor="middle">own CPU per command, µs</text>`, left+half+30+half/2, top-8)
	for i, p := range paths {
		y := top + i*2*row
		s.add(`<text x="%d" y="%d" text-anchor="end">%s</text>`, left-8, y+row-4, p.label)
		for j, q := range []struct {
			key, color string
		}{{"_p50_ms", "#9ecae1"}, {"_p99_ms", "#3182bd"}} {
			v := r.Figures[p.key+q.key]
			bw := int(float64(half) * v / maxMs)
			s.add(`<rect x="%d" y="%d" width="%d" height="%d" fill="%s"/><text x="%d" y="%d">%.3f</text>`, left, y+j*13, bw, 12, q.color, left+bw+4, y+j*13+11, v)
		}
		if v, ok := r.Figures[p.key+"_cpu_us_per_cmd"]; ok {
			x0 := left + half + 30
			bw := int(float64(half-40) * v / maxCPU)
			s.add(`<rect x="%d" y="%d" width="%d" height="24" fill="#fdae6b"/><text x="%d" y="%d">%.0f</text>`, x0, y, bw, x0+bw+4, y+16, v)
		}
	}
	y := top + len(paths)*2*row + 10
	var ratios []string
	if v, ok := r.Figures["hub_over_direct_p50"]; ok {
		ratios = append(ratios, fmt.Sprintf("hub p50 / direct %.3f× (target ≤ 1.05)", v))
	}
	if v, ok := r.Figures["hub_over_selenoid_p50"]; ok {
		ratios = append(ratios, fmt.Sprintf("hub p50 / Selenoid %.3f× (≤ 1.0)", v))
	}
	if v, ok := r.Figures["hub_over_selenoid_cpu"]; ok {
		ratios = append(ratios, fmt.Sprintf("hub CPU / Selenoid %.3f× (≤ 0.75)", v))
	}
	s.add(`<text x="%d" y="%d">%s</text>`, 20, y+14, strings.Join(ratios, "; "))
	return s.save(path)
}
