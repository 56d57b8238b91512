// Package seqsvg draws a sequence diagram as SVG from a small line-based
// source, so that a diagram in the docs is generated from a file kept beside
// it and a test can prove the two match. The output depends on the source
// alone: no fonts are measured, no clock or randomness is read.
//
// The source, one statement a line ('#' starts a comment; quote anything
// with spaces):
//
//	title "Pod lifecycle"
//	lane ID "Title" ["second title line"]
//	section "Start"
//	msg FROM TO "label"     a solid arrow
//	reply FROM TO "label"   a dashed arrow
//	note LANE "text"        a box on a lane
package seqsvg

import (
	"encoding/csv"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"strings"
)

// Geometry, in pixels.
const (
	margin  = 20
	laneW   = 230
	headerH = 56
	titleH  = 36
	rowH    = 30
	noteH   = 22
	charW   = 6.4 // an estimate of the average glyph width at fontSize
	fontPx  = 12
)

type lane struct {
	id     string
	titles []string
}

type step struct {
	kind     string // section, msg, reply, note
	from, to int
	text     string
}

type diagram struct {
	title string
	lanes []lane
	steps []step
}

// Render turns a source into an SVG document.
func Render(src io.Reader) ([]byte, error) {
	d, err := parse(src)
	if err != nil {
		return nil, err
	}
	return d.svg(), nil
}

func parse(src io.Reader) (*diagram, error) {
	r := csv.NewReader(src)
	r.Comma = ' '
	r.Comment = '#'
	r.FieldsPerRecord = -1
	d := &diagram{}
	index := map[string]int{}
	laneOf := func(id string, line int) (int, error) {
		i, ok := index[id]
		if !ok {
			return 0, fmt.Errorf("line %d: no lane %q", line, id)
		}
		return i, nil
	}
	for {
		rec, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err
		}
		line, _ := r.FieldPos(0)
		var f []string
		for _, s := range rec {
			if s != "" {
				f = append(f, s)
			}
		}
		if len(f) == 0 {
			continue
		}
		want := map[string]int{"title": 2, "lane": 3, "section": 2, "msg": 4, "reply": 4, "note": 3}[f[0]]
		if want == 0 || len(f) < want || (f[0] != "lane" && len(f) > want) {
			return nil, fmt.Errorf("line %d: cannot read %q", line, strings.Join(f, " "))
		}
		switch f[0] {
		case "title":
			d.title = f[1]
		case "lane":
			if _, dup := index[f[1]]; dup {
				return nil, fmt.Errorf("line %d: lane %q twice", line, f[1])
			}
			index[f[1]] = len(d.lanes)
			d.lanes = append(d.lanes, lane{id: f[1], titles: f[2:]})
		case "section":
			d.steps = append(d.steps, step{kind: "section", text: f[1]})
		case "msg", "reply":
			from, err := laneOf(f[1], line)
			if err != nil {
				return nil, err
			}
			to, err := laneOf(f[2], line)
			if err != nil {
				return nil, err
			}
			if from == to {
				return nil, fmt.Errorf("line %d: %s from a lane to itself; use a note", line, f[0])
			}
			d.steps = append(d.steps, step{kind: f[0], from: from, to: to, text: f[3]})
		case "note":
			at, err := laneOf(f[1], line)
			if err != nil {
				return nil, err
			}
			d.steps = append(d.steps, step{kind: "note", from: at, to: at, text: f[2]})
		}
	}
	if len(d.lanes) == 0 {
		return nil, errors.New("no lanes")
	}
	return d, nil
}

func (d *diagram) svg() []byte {
	var b strings.Builder
	width := 2*margin + len(d.lanes)*laneW
	top := margin + titleH + headerH
	height := top + len(d.steps)*rowH + margin
	x := func(i int) int { return margin + i*laneW + laneW/2 }
	esc := func(s string) string {
		var w strings.Builder
		xml.EscapeText(&w, []byte(s))
		return w.String()
	}
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="%d">`+"\n", width, height, width, height, fontPx)
	b.WriteString(`<defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="8" markerHeight="8" orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" fill="#333"/></marker></defs>` + "\n")
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="#fff"/>`+"\n", width, height)
	fmt.Fprintf(&b, `<text x="%d" y="%d" font-size="16" font-weight="bold">%s</text>`+"\n", margin, margin+18, esc(d.title))
	for i, l := range d.lanes {
		y0 := margin + titleH
		fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%d" height="%d" rx="4" fill="#e8eef7" stroke="#4a6fa5"/>`+"\n", x(i)-laneW/2+8, y0, laneW-16, headerH-12)
		for j, t := range l.titles {
			fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="middle"%s>%s</text>`+"\n", x(i), y0+18+j*16, map[bool]string{true: ` font-weight="bold"`}[j == 0], esc(t))
		}
		fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#999" stroke-dasharray="2,3"/>`+"\n", x(i), top-12, x(i), height-margin)
	}
	for n, s := range d.steps {
		y := top + n*rowH + rowH/2
		switch s.kind {
		case "section":
			fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%d" height="%d" fill="#f4f4f4"/>`+"\n", margin, y-rowH/2+3, width-2*margin, rowH-6)
			fmt.Fprintf(&b, `<text x="%d" y="%d" font-weight="bold">%s</text>`+"\n", margin+6, y+4, esc(s.text))
		case "note":
			w := int(float64(len(s.text))*charW) + 16
			fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%d" height="%d" rx="3" fill="#fff8dc" stroke="#b8a040"/>`+"\n", x(s.from)-w/2, y-noteH/2, w, noteH)
			fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="middle">%s</text>`+"\n", x(s.from), y+4, esc(s.text))
		default:
			dash := ""
			if s.kind == "reply" {
				dash = ` stroke-dasharray="6,4"`
			}
			x1, x2 := x(s.from), x(s.to)
			fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#333"%s marker-end="url(#arrow)"/>`+"\n", x1, y+6, x2, y+6, dash)
			fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="middle">%s</text>`+"\n", (x1+x2)/2, y+1, esc(s.text))
		}
	}
	b.WriteString("</svg>\n")
	return []byte(b.String())
}
