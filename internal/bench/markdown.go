package bench

import (
	"fmt"
	"os"
	"runtime"
	"strings"
)

// Machine is one line saying what machine a run was on: its CPUs, kernel and
// Go, for the table written beside the figures.
func Machine() string {
	model := "unknown CPU"
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for line := range strings.SplitSeq(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				model = strings.TrimSpace(v)
				break
			}
		}
	}
	kernel, _ := os.ReadFile("/proc/sys/kernel/osrelease")
	return fmt.Sprintf("%d CPUs (%s), Linux %s, %s", runtime.NumCPU(), model, strings.TrimSpace(string(kernel)), runtime.Version())
}

// maxMarkdownRows is the most rows of a scenario's table the markdown keeps:
// the jam's one row per arrival is for the chart and the raw output.
const maxMarkdownRows = 12

// WriteMarkdown writes the run's results as markdown for docs/benchmarks.md:
// the machine, then each scenario's table and its targets, met or missed.
func WriteMarkdown(path string, results []*Result, machine string) error {
	var b strings.Builder
	fmt.Fprintf(&b, "<!-- Written by cmd/wsbench -out; a new run replaces it. -->\n\nMachine: %s.\n", machine)
	cell := func(s string) string { return strings.ReplaceAll(s, "|", `\|`) }
	line := func(cells []string) {
		for i := range cells {
			cells[i] = cell(cells[i])
		}
		fmt.Fprintf(&b, "| %s |\n", strings.Join(cells, " | "))
	}
	for _, r := range results {
		fmt.Fprintf(&b, "\n### %s\n\n", r.Scenario)
		if len(r.Rows) <= maxMarkdownRows && len(r.Header) > 0 {
			line(append([]string(nil), r.Header...))
			line(strings.Split(strings.Repeat("---,", len(r.Header)-1)+"---", ","))
			for _, row := range r.Rows {
				line(append([]string(nil), row...))
			}
			b.WriteString("\n")
		} else if len(r.Rows) > 0 {
			fmt.Fprintf(&b, "(%d rows: see the tool's output.)\n\n", len(r.Rows))
		}
		if len(r.Targets) > 0 {
			line([]string{"target", "value", "limit", "verdict"})
			line([]string{"---", "---", "---", "---"})
			for _, t := range r.Targets {
				bound, verdict := "≤", "met"
				if t.Min {
					bound = "≥"
				}
				if !t.Met {
					verdict = "**missed**"
				}
				line([]string{t.Name, strings.TrimSpace(fmt.Sprintf("%.3f %s", t.Value, t.Unit)), strings.TrimSpace(fmt.Sprintf("%s %.3f %s", bound, t.Limit, t.Unit)), verdict})
			}
			b.WriteString("\n")
		}
		for _, n := range r.Notes {
			fmt.Fprintf(&b, "- %s\n", n)
		}
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

// WriteSummary writes the run in brief, as docs/benchmarks.md shows it: the
// machine, the realbrowser table, and every scenario's targets, met or
// missed, in one table. It needs the results' figures and targets only, so
// it can be written again from results.jsonl.
func WriteSummary(path string, results []*Result, machine string) error {
	var b strings.Builder
	fmt.Fprintf(&b, "<!-- Written by cmd/wsbench -out; a new run replaces it. -->\n\nMachine: %s.\n\n", machine)
	line := func(cells ...string) {
		for i := range cells {
			cells[i] = strings.ReplaceAll(cells[i], "|", `\|`)
		}
		fmt.Fprintf(&b, "| %s |\n", strings.Join(cells, " | "))
	}
	rb := false
	for _, r := range results {
		if r.Scenario != "realbrowser" {
			continue
		}
		rb = true
		line(realBrowserHeader...)
		line("---", "---", "---", "---", "---", "---")
		for _, row := range realBrowserRows(r.Figures) {
			line(row...)
		}
	}
	if !rb {
		b.WriteString("The realbrowser scenario did not run.\n")
	}
	b.WriteString("\n")
	line("scenario", "target", "value", "limit", "verdict")
	line("---", "---", "---", "---", "---")
	for _, r := range results {
		for _, t := range r.Targets {
			bound, verdict := "≤", "met"
			if t.Min {
				bound = "≥"
			}
			if !t.Met {
				verdict = "**missed**"
			}
			line(r.Scenario, t.Name, strings.TrimSpace(fmt.Sprintf("%.3f %s", t.Value, t.Unit)), strings.TrimSpace(fmt.Sprintf("%s %.3f %s", bound, t.Limit, t.Unit)), verdict)
		}
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}
