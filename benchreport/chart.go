package main

import (
	"fmt"
	"image/color"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// charted are the lifecycle sections drawn, by the start of their names,
// with the label each gets on the chart.
var charted = []struct{ prefix, label string }{
	{"readiness", "ready"},
	{"exec", "exec true"},
	{"completion", "complete"},
	{"drain", "drain"},
	{"pod in a real kubelet: proxy ready", "pod: ready → app"},
	{"pod in a real kubelet: app exit → proxy exit", "pod: app exit → proxy exit"},
	{"pod in a real kubelet: deletion → every", "pod: deletion → gone"},
}

// chart draws p50 and p99 of every lifecycle row, supervisor and baselines,
// one line per row, on a log scale: the baselines are 1 to 100 times slower,
// which a linear axis would flatten.
func chart(r *report, path string) error {
	var labels []string
	p50, p99 := plotter.XYs{}, plotter.XYs{}
	for _, c := range charted {
		for _, x := range r.rows {
			if !strings.HasPrefix(x.section, c.prefix) || x.p50 <= 0 {
				continue
			}
			y := float64(len(labels))
			labels = append(labels, c.label+": "+short(x.subject))
			p50 = append(p50, plotter.XY{X: x.p50, Y: y})
			p99 = append(p99, plotter.XY{X: x.p99, Y: y})
		}
	}
	if len(labels) == 0 {
		return fmt.Errorf("no lifecycle rows to draw")
	}
	p := plot.New()
	p.Title.Text = "Lifecycle latencies against the baselines (same run)"
	p.X.Label.Text = "ms (log scale)"
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = plot.LogTicks{Prec: -1}
	p.NominalY(labels...)
	p.Add(plotter.NewGrid())
	for _, s := range []struct {
		name  string
		xys   plotter.XYs
		shape draw.GlyphDrawer
		c     color.Color
	}{
		{"p50", p50, draw.CircleGlyph{}, color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff}},
		{"p99", p99, draw.TriangleGlyph{}, color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff}},
	} {
		sc, err := plotter.NewScatter(s.xys)
		if err != nil {
			return err
		}
		sc.GlyphStyle.Shape, sc.GlyphStyle.Color, sc.GlyphStyle.Radius = s.shape, s.c, vg.Points(3.5)
		p.Add(sc)
		p.Legend.Add(s.name, sc)
	}
	// Room on the right for the slowest baseline's glyph; the legend goes
	// bottom right, where the supervisor's fast rows leave the plot empty.
	p.X.Max *= 1.3
	p.X.Min /= 1.3
	return p.Save(10*vg.Inch, vg.Length(1.2+0.3*float64(len(labels)))*vg.Inch, path)
}

// short trims a row's subject to fit a chart label.
func short(s string) string {
	s = strings.TrimPrefix(s, "baseline: ")
	if i := strings.Index(s, " ("); i > 0 {
		s = s[:i]
	}
	s = strings.ReplaceAll(s, "proxy-supervisor + real ", "supervised ")
	s = strings.ReplaceAll(s, "proxy-supervisor, ", "")
	s = strings.ReplaceAll(s, "proxy-supervisor ", "")
	if len(s) > 48 {
		s = s[:47] + "…"
	}
	return s
}
