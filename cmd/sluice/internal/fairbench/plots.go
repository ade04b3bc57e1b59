package fairbench

import (
	"fmt"
	"image/color"
	"math"
	"path/filepath"
	"slices"
	"sort"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// plots draws work.png and ttft.png for this run and, when the sibling
// directories hold other modes' runs (DIR/../fifo, ../rpm, ../fair), the
// comparison ttft_by_mode.png and work_by_mode.png beside them.
func (r *runner) plots(smp *samples) error {
	if err := workPlot(smp, filepath.Join(r.opts.Out, "work.png")); err != nil {
		return err
	}
	curves := []curve{{"victim, before the burst", smp.VictimUnloaded}, {"victim, during the burst", smp.Victim},
		{"light tenants, during the burst", smp.Light}}
	if err := cdfPlot(fmt.Sprintf("%s: time to first token", smp.Mode), curves, filepath.Join(r.opts.Out, "ttft.png")); err != nil {
		return err
	}
	parent := filepath.Dir(filepath.Clean(r.opts.Out))
	var modes []curve
	var unloaded []float64
	for _, m := range []string{ModeFIFO, ModeRPM, ModeFair} {
		s := loadSamples(filepath.Join(parent, m))
		if s == nil {
			continue
		}
		modes = append(modes, curve{m + ": victim during the burst", s.Victim})
		if unloaded == nil {
			unloaded = s.VictimUnloaded
		}
	}
	if len(modes) < 2 {
		return nil
	}
	modes = append([]curve{{"victim, unloaded", unloaded}}, modes...)
	return cdfPlot("The victim's time to first token, by mode", modes, filepath.Join(parent, "ttft_by_mode.png"))
}

type curve struct {
	name string
	xs   []float64
}

// cdfPlot draws the empirical CDFs of curves (milliseconds, log scale).
func cdfPlot(title string, curves []curve, path string) error {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = "time to first token (ms, log scale)"
	p.Y.Label.Text = "fraction of requests"
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = plot.LogTicks{Prec: -1}
	p.Y.Min, p.Y.Max = 0, 1
	p.Legend.Top = false
	p.Legend.Left = false
	p.Add(plotter.NewGrid())
	for i, c := range curves {
		if len(c.xs) == 0 {
			continue
		}
		xs := slices.Clone(c.xs)
		sort.Float64s(xs)
		pts := make(plotter.XYs, len(xs))
		for k, x := range xs {
			pts[k].X = math.Max(x, 1)
			pts[k].Y = float64(k+1) / float64(len(xs))
		}
		l, err := plotter.NewLine(pts)
		if err != nil {
			return err
		}
		l.Color = plotutil.Color(i)
		l.Width = vg.Points(1.5)
		p.Add(l)
		p.Legend.Add(fmt.Sprintf("%s (n=%d)", c.name, len(xs)), l)
	}
	return p.Save(9*vg.Inch, 5*vg.Inch, path)
}

// workPlot draws the token work admitted per 10s window of the hot, heavy,
// priority and victim tenants over the run, the burst marked.
func workPlot(smp *samples, path string) error {
	p := plot.New()
	p.Title.Text = fmt.Sprintf("%s: token work admitted per tenant (10 s windows)", smp.Mode)
	p.X.Label.Text = "seconds into the run (dashed: the hot tenant's burst)"
	p.Y.Label.Text = "work (input + 2 x output tokens)"
	p.Add(plotter.NewGrid())
	ids := make([]string, 0, len(smp.Work))
	for id := range smp.Work {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	top := 0.0
	for i, id := range ids {
		w := smp.Work[id]
		pts := make(plotter.XYs, len(w))
		for k, v := range w {
			pts[k].X = (float64(k) + 0.5) * window.Seconds()
			pts[k].Y = v
			top = math.Max(top, v)
		}
		l, err := plotter.NewLine(pts)
		if err != nil {
			return err
		}
		l.Color = plotutil.Color(i)
		l.Width = vg.Points(1)
		switch id {
		case tenantID(roleHot):
			l.Width = vg.Points(2.5)
			id += " (hot)"
		case tenantID(rolePriority):
			id += " (priority)"
		case tenantID(roleVictim):
			id += " (victim)"
		default:
			id += " (heavy)"
		}
		p.Add(l)
		p.Legend.Add(id, l)
	}
	for _, x := range smp.Burst {
		l, err := plotter.NewLine(plotter.XYs{{X: x, Y: 0}, {X: x, Y: top}})
		if err != nil {
			return err
		}
		l.Color = color.Gray{Y: 96}
		l.Dashes = []vg.Length{vg.Points(4), vg.Points(4)}
		p.Add(l)
	}
	p.Legend.Top = true
	return p.Save(10*vg.Inch, 5*vg.Inch, path)
}
