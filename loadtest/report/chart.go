package report

import (
	"fmt"
	"html"
	"math"
	"strings"
)

// series is one line of a chart. A NaN in ys is no data: a gap in the line.
type series struct {
	name, color string
	ys          []float64
	dashed      bool
}

// Chart geometry, in SVG user units: the plot area sits inside the padding.
const (
	chartW, chartH         = 900, 320
	padL, padR, padT, padB = 70, 20, 36, 40
	plotW, plotH           = chartW - padL - padR, chartH - padT - padB
	yTicks                 = 5
	legendW, legendSwatch  = 110, 14
	chartFont              = `font-family="sans-serif" font-size="12"`
	gridColor, axisColor   = "#e3e3e3", "#555"
	emptyChart             = "no intervals recorded"
)

// lineChart draws series over xs (seconds) as an inline SVG element: no scripts, no
// outside references, so the page opens offline.
func lineChart(title, unit string, xs []float64, ss []series) string {
	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="chart" viewBox="0 0 %d %d" width="100%%" role="img" aria-label="%s">`, chartW, chartH, html.EscapeString(title))
	fmt.Fprintf(&b, `<text x="%d" y="20" %s font-size="14" font-weight="bold">%s</text>`, padL, chartFont, html.EscapeString(title))
	if len(xs) == 0 {
		fmt.Fprintf(&b, `<text x="%d" y="%d" %s fill="#888">%s</text></svg>`, chartW/2-60, chartH/2, chartFont, emptyChart)
		return b.String()
	}
	xMax := xs[len(xs)-1]
	if xMax <= 0 {
		xMax = 1
	}
	yMax := 0.0
	for _, s := range ss {
		for _, y := range s.ys {
			if !math.IsNaN(y) {
				yMax = max(yMax, y)
			}
		}
	}
	yMax = niceCeil(yMax)
	x := func(v float64) float64 { return padL + v/xMax*plotW }
	y := func(v float64) float64 { return padT + plotH - v/yMax*plotH }

	// Grid and y labels.
	for i := 0; i <= yTicks; i++ {
		v := yMax * float64(i) / yTicks
		fmt.Fprintf(&b, `<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="%s"/>`, padL, padL+plotW, y(v), y(v), gridColor)
		fmt.Fprintf(&b, `<text x="%d" y="%.1f" %s text-anchor="end">%s</text>`, padL-6, y(v)+4, chartFont, tickLabel(v))
	}
	fmt.Fprintf(&b, `<text x="14" y="%d" %s transform="rotate(-90 14 %d)" text-anchor="middle">%s</text>`,
		padT+plotH/2, chartFont, padT+plotH/2, html.EscapeString(unit))
	// x labels.
	step := niceStep(xMax / 8)
	for v := 0.0; v <= xMax+step/1e6; v += step {
		fmt.Fprintf(&b, `<line x1="%.1f" x2="%.1f" y1="%d" y2="%d" stroke="%s"/>`, x(v), x(v), padT+plotH, padT+plotH+4, axisColor)
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" %s text-anchor="middle">%s</text>`, x(v), padT+plotH+18, chartFont, tickLabel(v))
	}
	fmt.Fprintf(&b, `<text x="%d" y="%d" %s text-anchor="middle">seconds</text>`, padL+plotW/2, chartH-4, chartFont)
	fmt.Fprintf(&b, `<line x1="%d" x2="%d" y1="%d" y2="%d" stroke="%s"/>`, padL, padL+plotW, padT+plotH, padT+plotH, axisColor)
	fmt.Fprintf(&b, `<line x1="%d" x2="%d" y1="%d" y2="%d" stroke="%s"/>`, padL, padL, padT, padT+plotH, axisColor)

	// One group per series: a polyline per run of intervals with data (a point per
	// interval end), a dot for a lone one; a legend entry above the plot.
	for i, s := range ss {
		dash := ""
		if s.dashed {
			dash = ` stroke-dasharray="5 4"`
		}
		fmt.Fprintf(&b, `<g class="series" fill="none" stroke="%s" stroke-width="2"%s>`, s.color, dash)
		for from := 0; from < len(s.ys); {
			if math.IsNaN(s.ys[from]) {
				from++
				continue
			}
			to := from + 1
			for to < len(s.ys) && !math.IsNaN(s.ys[to]) {
				to++
			}
			if to-from == 1 {
				fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="3" fill="%s" stroke="none"/>`, x(xs[from]), y(s.ys[from]), s.color)
			} else {
				b.WriteString(`<polyline points="`)
				for j := from; j < to; j++ {
					if j > from {
						b.WriteByte(' ')
					}
					fmt.Fprintf(&b, "%.1f,%.1f", x(xs[j]), y(s.ys[j]))
				}
				b.WriteString(`"/>`)
			}
			from = to
		}
		b.WriteString(`</g>`)
		lx := padL + plotW - (len(ss)-i)*legendW
		fmt.Fprintf(&b, `<rect x="%d" y="10" width="%d" height="4" fill="%s"/>`, lx, legendSwatch, s.color)
		fmt.Fprintf(&b, `<text x="%d" y="16" %s>%s</text>`, lx+legendSwatch+4, chartFont, html.EscapeString(s.name))
	}
	b.WriteString(`</svg>`)
	return b.String()
}

// niceCeil rounds v up to 1, 2, 2.5 or 5 times a power of ten (1 for v <= 0).
func niceCeil(v float64) float64 {
	if v <= 0 || math.IsNaN(v) || math.IsInf(v, 0) {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if v <= m*p*(1+1e-9) {
			return m * p
		}
	}
	return 10 * p
}

// niceStep is the axis step nearest above v: 1, 2 or 5 times a power of ten.
func niceStep(v float64) float64 {
	if v <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if v <= m*p {
			return m * p
		}
	}
	return 10 * p
}

// tickLabel formats an axis value compactly: 0.25, 3, 1.5k, 2M.
func tickLabel(v float64) string {
	switch {
	case v >= 1e6:
		return trimZeros(fmt.Sprintf("%.2f", v/1e6)) + "M"
	case v >= 1e4:
		return trimZeros(fmt.Sprintf("%.1f", v/1e3)) + "k"
	case v >= 10 || v == 0:
		return fmt.Sprintf("%.0f", v)
	default:
		return trimZeros(fmt.Sprintf("%.3f", v))
	}
}

func trimZeros(s string) string {
	if strings.Contains(s, ".") {
		s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	}
	return s
}
