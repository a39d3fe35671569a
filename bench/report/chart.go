package report

import (
	"bytes"
	"fmt"
	"image/color"
	"math"
	"os"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/text"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
	"gonum.org/v1/plot/vg/vgsvg"
)

// The chart's layout, in points.
const (
	chartWidth   = 9 * vg.Inch
	chartHeader  = 46 // title and legend, above the plot
	chartFooter  = 52 // x axis with its ticks and label, below the rows
	barThickness = 9  // one bar
	rowGap       = 10 // between the bars of two rows
	headroom     = 18 // above the first row, for the parity note
	fontSize     = 8
)

// peerColors are the fill colors of the peers' bars, in the order in which
// the peers are first seen: the Okabe-Ito palette, readable by the color
// blind and in grey scale.
var peerColors = []color.Color{
	color.RGBA{0xE6, 0x9F, 0x00, 0xFF}, // orange
	color.RGBA{0x56, 0xB4, 0xE9, 0xFF}, // sky blue
	color.RGBA{0x00, 0x9E, 0x73, 0xFF}, // bluish green
	color.RGBA{0xCC, 0x79, 0xA7, 0xFF}, // reddish purple
	color.RGBA{0x00, 0x72, 0xB2, 0xFF}, // blue
	color.RGBA{0xD5, 0x5E, 0x00, 0xFF}, // vermillion
	color.RGBA{0xF0, 0xE4, 0x42, 0xFF}, // yellow
}

var (
	sansFont  = font.Font{Typeface: "Liberation", Variant: "Sans"}
	black     = color.Gray{0}
	darkGrey  = color.Gray{0x55}
	gridGrey  = color.Gray{0xDD}
	bandColor = color.Gray{0xF3}
)

// chartRow is one row of the chart: a workload with its parameters, and
// annal's ratio to each peer.
type chartRow struct {
	label  string
	ratios []float64 // per peer; 0: none
	notes  []string  // per peer without a ratio: "n/a", "error", or "" (no summary)
}

// chartData picks the peers and the rows of the chart from ss: the rows are
// the (workload, params) groups in which at least one peer has a ratio, the
// peers are the stores other than annal with at least one ratio, both in
// the order of ss.
func chartData(ss []Summary) (peers []string, rows []chartRow) {
	peerIdx := map[string]int{}
	for _, s := range ss {
		if s.Store == Baseline || !s.HasRatio() {
			continue
		}
		if _, ok := peerIdx[s.Store]; !ok {
			peerIdx[s.Store] = len(peers)
			peers = append(peers, s.Store)
		}
	}
	rowIdx := map[groupKey]int{}
	for _, s := range ss {
		g := groupKey{s.Workload, s.Params}
		i, ok := rowIdx[g]
		if !ok {
			i = len(rows)
			rowIdx[g] = i
			rows = append(rows, chartRow{
				label:  strings.TrimSuffix(s.Workload+" · "+s.Params, " · "),
				ratios: make([]float64, len(peers)),
				notes:  make([]string, len(peers)),
			})
		}
		j, ok := peerIdx[s.Store]
		if !ok {
			continue
		}
		switch {
		case s.HasRatio():
			rows[i].ratios[j] = s.Ratio
		case s.Err == NA:
			rows[i].notes[j] = NA
		case s.Err != "":
			rows[i].notes[j] = "error"
		default:
			rows[i].notes[j] = NA // measured, but annal was not
		}
	}
	// Keep the rows with at least one ratio.
	kept := rows[:0]
	for _, r := range rows {
		for _, x := range r.ratios {
			if x > 0 {
				kept = append(kept, r)
				break
			}
		}
	}
	return peers, kept
}

// Chart writes to path an SVG chart of annal's ratio to each peer: one row
// per (workload, params) group in which a peer has a ratio, one horizontal
// bar per peer, starting at parity (1x) and going right where annal is
// faster and left where the peer is, on a log2 axis. It returns
// ErrNothingToChart when no peer has a ratio.
//
// The SVG names its fonts (Liberation Sans, with Arial, Helvetica and
// sans-serif as fallbacks) rather than embedding them, to stay small.
func Chart(path string, ss []Summary) error {
	return writeChart(path, ss, func(w, h vg.Length) vg.CanvasWriterTo {
		return vgsvg.New(w, h)
	}, svgFonts)
}

// ChartPNG writes the chart of Chart as a PNG image at 144 dots per inch.
func ChartPNG(path string, ss []Summary) error {
	return writeChart(path, ss, func(w, h vg.Length) vg.CanvasWriterTo {
		return vgimg.PngCanvas{Canvas: vgimg.NewWith(vgimg.UseWH(w, h), vgimg.UseDPI(144))}
	}, nil)
}

// svgFonts adds fallbacks to the font family named by the SVG canvas, for
// viewers without the Liberation fonts.
func svgFonts(b []byte) []byte {
	return bytes.ReplaceAll(b,
		[]byte("font-family:Liberation Sans;"),
		[]byte("font-family:'Liberation Sans',Arial,Helvetica,sans-serif;"))
}

// writeChart draws the chart on a canvas made by newCanvas and writes it to
// path, through fix if not nil.
func writeChart(path string, ss []Summary, newCanvas func(w, h vg.Length) vg.CanvasWriterTo, fix func([]byte) []byte) error {
	peers, rows := chartData(ss)
	if len(rows) == 0 {
		return ErrNothingToChart
	}
	rowHeight := vg.Length(barThickness*len(peers) + rowGap)
	height := chartHeader + headroom + rowHeight*vg.Length(len(rows)) + chartFooter
	c := newCanvas(chartWidth, height)
	drawChart(draw.New(c), peers, rows, rowHeight)

	var buf bytes.Buffer
	if _, err := c.WriteTo(&buf); err != nil {
		return fmt.Errorf("report: rendering chart: %w", err)
	}
	out := buf.Bytes()
	if fix != nil {
		out = fix(out)
	}
	if err := os.WriteFile(path, out, 0o644); err != nil {
		return fmt.Errorf("report: writing chart: %w", err)
	}
	return nil
}

// textStyle returns a text style in the chart's font.
func textStyle(size vg.Length, clr color.Color, x text.XAlignment, y text.YAlignment) text.Style {
	return text.Style{
		Color:   clr,
		Font:    font.From(sansFont, size),
		XAlign:  x,
		YAlign:  y,
		Handler: plot.DefaultTextHandler,
	}
}

// drawChart draws the title and the legend in the header of dc, and the
// plot of the rows below them.
func drawChart(dc draw.Canvas, peers []string, rows []chartRow, rowHeight vg.Length) {
	dc.SetColor(color.White)
	dc.Fill(dc.Rectangle.Path())

	// Title.
	top := dc.Max.Y - 6
	dc.FillText(textStyle(13, black, draw.XCenter, draw.YTop),
		vg.Point{X: dc.Center().X, Y: top},
		"annal vs peers: ratio of medians (> 1: annal faster)")

	// Legend: one swatch and name per peer, in a centered line.
	leg := textStyle(10, black, draw.XLeft, draw.YCenter)
	const swatch, gap = 10, 16
	var total vg.Length
	for _, p := range peers {
		total += swatch + 4 + leg.Width(p) + gap
	}
	total -= gap
	x, y := dc.Center().X-total/2, top-28
	for i, p := range peers {
		dc.FillPolygon(peerColors[i%len(peerColors)], []vg.Point{
			{X: x, Y: y - swatch/2}, {X: x + swatch, Y: y - swatch/2},
			{X: x + swatch, Y: y + swatch/2}, {X: x, Y: y + swatch/2},
		})
		dc.FillText(leg, vg.Point{X: x + swatch + 4, Y: y}, p)
		x += swatch + 4 + leg.Width(p) + gap
	}

	// The plot, right of the row labels. The labels are drawn here rather
	// than as tick labels of the y axis so that they can be aligned on the
	// left: the SVG names its font, and a viewer without it (or Arial)
	// draws wider text; the labels are given 15% more room than they need
	// for that, which left-aligned labels use without running into the
	// bars.
	label := textStyle(fontSize, black, draw.XLeft, draw.YCenter)
	var labelWidth vg.Length
	for _, r := range rows {
		labelWidth = max(labelWidth, label.Width(r.label))
	}
	const margin = 8
	area := draw.Crop(dc, margin+labelWidth*1.15+6, -12, 4, -chartHeader)
	p := newRatioPlot(peers, rows, rowHeight)
	dataC := p.DataCanvas(area)
	_, trY := p.Transforms(&dataC)

	// Bands behind every other row, labels included.
	n := float64(len(rows))
	for i := range rows {
		if i%2 == 0 {
			y := n - 1 - float64(i)
			fillRect(&dc, bandColor, dc.Min.X+margin/2, trY(y-0.5), dataC.Max.X, trY(y+0.5))
		}
	}
	p.Draw(area)
	for i, r := range rows {
		dc.FillText(label, vg.Point{X: dc.Min.X + margin, Y: trY(n - 1 - float64(i))}, r.label)
	}
}

// newRatioPlot returns the plot of the rows, without a background and with
// no ticks on its y axis (drawChart writes the rows' labels): one row per
// unit of y, the first at the top, and above it the headroom for the note
// on which side is which; the x axis is log2 of the ratio, labelled as
// ratios.
func newRatioPlot(peers []string, rows []chartRow, rowHeight vg.Length) *plot.Plot {
	p := plot.New()
	p.BackgroundColor = nil
	p.Add(&ratioBars{peers: peers, rows: rows})

	// X: log2 of the ratios, with parity inside and at least one
	// doubling on each side, and room for the value labels.
	lo, hi := -1.0, 1.0
	for _, r := range rows {
		for _, x := range r.ratios {
			if x > 0 {
				lo, hi = math.Min(lo, math.Log2(x)), math.Max(hi, math.Log2(x))
			}
		}
	}
	lo, hi = math.Floor(lo), math.Ceil(hi)
	pad := 0.12 * (hi - lo)
	p.X.Min, p.X.Max = lo-pad, hi+pad
	p.X.Tick.Marker = log2Ticks{}
	p.X.Label.Text = "annal vs peer, log2 scale (rates: annal ÷ peer; times: peer ÷ annal)"
	p.X.Label.TextStyle = textStyle(9, black, draw.XCenter, draw.YBottom)
	p.X.Tick.Label = textStyle(fontSize, black, draw.XCenter, draw.YTop)

	n := float64(len(rows))
	p.Y.Min, p.Y.Max = -0.5, n-0.5+float64(headroom/rowHeight)
	p.Y.Tick.Marker = plot.ConstantTicks{}
	p.Y.Tick.Length = 0
	p.Y.LineStyle.Width = 0
	p.Y.Padding = 0
	return p
}

// log2Ticks marks each power of two of an axis that shows log2 of ratios,
// labelled as ratios (1/4x, 1/2x, 1x, 2x, 4x), with as many powers between
// two labels as keeps the labels at most about 12.
type log2Ticks struct{}

// Ticks implements plot.Ticker.
func (log2Ticks) Ticks(lo, hi float64) []plot.Tick {
	first, last := int(math.Ceil(lo)), int(math.Floor(hi))
	step := max(1, (last-first+11)/12)
	var ticks []plot.Tick
	for k := first; k <= last; k++ {
		t := plot.Tick{Value: float64(k)}
		if k%step == 0 {
			t.Label = log2Label(k)
		}
		ticks = append(ticks, t)
	}
	return ticks
}

// log2Label is the label of 2^k as a ratio: "1/8x", "1x", "1024x".
func log2Label(k int) string {
	if k >= 0 {
		return fmt.Sprintf("%.0fx", math.Exp2(float64(k)))
	}
	return fmt.Sprintf("1/%.0fx", math.Exp2(float64(-k)))
}

// ratioBars draws the rows of the chart: a vertical grid line at each
// power of two, one bar per peer from parity to log2 of its ratio with the
// ratio written at its end (or why there is none), the parity line, and a
// note above the first row saying which side is which.
type ratioBars struct {
	peers []string
	rows  []chartRow
}

// Plot implements plot.Plotter.
func (b *ratioBars) Plot(c draw.Canvas, p *plot.Plot) {
	trX, trY := p.Transforms(&c)
	n := len(b.rows)
	x0 := trX(0) // parity

	// Grid at the powers of two.
	grid := draw.LineStyle{Color: gridGrey, Width: vg.Points(0.5)}
	rowsTop := trY(float64(n) - 0.5)
	for k := math.Ceil(p.X.Min); k <= p.X.Max; k++ {
		if k != 0 {
			c.StrokeLine2(grid, trX(k), c.Min.Y, trX(k), rowsTop)
		}
	}

	// Bars and their values.
	value := textStyle(fontSize-1, black, draw.XLeft, draw.YCenter)
	valueLeft := textStyle(fontSize-1, black, draw.XRight, draw.YCenter)
	note := textStyle(fontSize-1, darkGrey, draw.XLeft, draw.YCenter)
	// Each row's height as drawn is shared as writeChart sized it: one
	// slot per peer, then the gap to the next row.
	m := len(b.peers)
	pitch := trY(1) - trY(0)
	slot := pitch * barThickness / vg.Length(barThickness*m+rowGap)
	thick := slot * 0.8
	for i, r := range b.rows {
		yc := trY(float64(n - 1 - i))
		for j := range b.peers {
			// Peers top to bottom in legend order.
			y := yc + slot*(vg.Length(m-1)/2-vg.Length(j))
			ratio := r.ratios[j]
			if ratio <= 0 {
				if r.notes[j] != "" {
					c.FillText(note, vg.Point{X: x0 + 3, Y: y}, r.notes[j])
				}
				continue
			}
			x1 := trX(math.Log2(ratio))
			fillRect(&c, peerColors[j%len(peerColors)], min(x0, x1), y-thick/2, max(x0, x1), y+thick/2)
			if x1 >= x0 {
				c.FillText(value, vg.Point{X: x1 + 2, Y: y}, RatioString(ratio))
			} else {
				c.FillText(valueLeft, vg.Point{X: x1 - 2, Y: y}, RatioString(ratio))
			}
		}
	}

	// Parity, and which side is which.
	c.StrokeLine2(draw.LineStyle{Color: black, Width: vg.Points(1)}, x0, c.Min.Y, x0, c.Max.Y)
	yNote := (rowsTop + c.Max.Y) / 2
	c.FillText(textStyle(fontSize, black, draw.XLeft, draw.YCenter),
		vg.Point{X: x0 + 4, Y: yNote}, "> 1: annal faster →")
	c.FillText(textStyle(fontSize, black, draw.XRight, draw.YCenter),
		vg.Point{X: x0 - 12, Y: yNote}, "← < 1: peer faster") // room for a wider font
}

// fillRect fills the rectangle from (x0, y0) to (x1, y1) with clr.
func fillRect(c *draw.Canvas, clr color.Color, x0, y0, x1, y1 vg.Length) {
	c.FillPolygon(clr, []vg.Point{{X: x0, Y: y0}, {X: x1, Y: y0}, {X: x1, Y: y1}, {X: x0, Y: y1}})
}

// Compile-time checks.
var (
	_ plot.Plotter = (*ratioBars)(nil)
	_ plot.Ticker  = log2Ticks{}
)
