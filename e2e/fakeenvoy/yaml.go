package fakeenvoy

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

// parseYAML reads the YAML that Envoy configs are written in: block mappings
// and sequences by indentation, flow {..} and [..] collections, plain,
// quoted and literal (|) scalars, comments. That is every form Envoy's own
// examples and this project's manifests use; anchors, tags and multiple
// documents are refused. JSON is YAML, so a JSON config parses too. The
// result is what encoding/json would decode: map[string]any, []any, string,
// float64, bool or nil.
func parseYAML(src string) (any, error) {
	p := &yamlParser{}
	for n, raw := range strings.Split(strings.ReplaceAll(src, "\r\n", "\n"), "\n") {
		text := stripComment(raw)
		trimmed := strings.TrimLeft(text, " ")
		if strings.TrimSpace(trimmed) == "" || trimmed == "---" {
			p.lines = append(p.lines, yamlLine{n: n + 1, indent: -1, raw: raw})
			continue
		}
		if strings.HasPrefix(trimmed, "\t") {
			return nil, fmt.Errorf("line %d: tab in indentation", n+1)
		}
		p.lines = append(p.lines, yamlLine{n: n + 1, indent: len(text) - len(trimmed), text: strings.TrimRight(trimmed, " \t"), raw: raw})
	}
	p.skipBlank()
	if p.i == len(p.lines) {
		return map[string]any{}, nil
	}
	v, err := p.node(p.lines[p.i].indent)
	if err != nil {
		return nil, err
	}
	p.skipBlank()
	if p.i < len(p.lines) {
		return nil, fmt.Errorf("line %d: unexpected %q", p.lines[p.i].n, p.lines[p.i].text)
	}
	return v, nil
}

// YAMLToJSON is a YAML document (as parseYAML reads it) in compact JSON.
func YAMLToJSON(src string) ([]byte, error) {
	v, err := parseYAML(src)
	if err != nil {
		return nil, err
	}
	return json.Marshal(v)
}

type yamlLine struct {
	n      int
	indent int // -1 for a blank or comment line
	text   string
	raw    string
}

type yamlParser struct {
	lines []yamlLine
	i     int
}

func (p *yamlParser) skipBlank() {
	for p.i < len(p.lines) && p.lines[p.i].indent < 0 {
		p.i++
	}
}

// node parses the block that starts at the current line, indented by indent.
func (p *yamlParser) node(indent int) (any, error) {
	l := p.lines[p.i]
	switch {
	case l.text == "-" || strings.HasPrefix(l.text, "- "):
		return p.sequence(indent)
	case mappingKey(l.text) >= 0:
		return p.mapping(indent)
	}
	p.i++
	return p.inline(l, l.text)
}

func (p *yamlParser) sequence(indent int) (any, error) {
	out := []any{}
	for {
		p.skipBlank()
		if p.i == len(p.lines) {
			return out, nil
		}
		l := p.lines[p.i]
		isItem := l.text == "-" || strings.HasPrefix(l.text, "- ")
		if l.indent < indent || (l.indent == indent && !isItem) {
			return out, nil // a sequence may end at its key's indent
		}
		if l.indent > indent || !isItem {
			return nil, fmt.Errorf("line %d: want a sequence item at indent %d", l.n, indent)
		}
		rest := strings.TrimLeft(strings.TrimPrefix(l.text, "-"), " ")
		if rest == "" {
			p.i++
			p.skipBlank()
			if p.i == len(p.lines) || p.lines[p.i].indent <= indent {
				out = append(out, nil)
				continue
			}
			v, err := p.node(p.lines[p.i].indent)
			if err != nil {
				return nil, err
			}
			out = append(out, v)
			continue
		}
		// "- key: v" opens a mapping whose other keys line up with key.
		inner := l.indent + len(l.text) - len(rest)
		p.lines[p.i] = yamlLine{n: l.n, indent: inner, text: rest, raw: l.raw}
		v, err := p.node(inner)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
}

func (p *yamlParser) mapping(indent int) (any, error) {
	out := map[string]any{}
	for {
		p.skipBlank()
		if p.i == len(p.lines) {
			return out, nil
		}
		l := p.lines[p.i]
		if l.indent < indent {
			return out, nil
		}
		k := mappingKey(l.text)
		if l.indent > indent || k < 0 {
			return nil, fmt.Errorf("line %d: want a mapping key at indent %d", l.n, indent)
		}
		key, err := scalarKey(l.text[:k])
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", l.n, err)
		}
		if _, dup := out[key]; dup {
			return nil, fmt.Errorf("line %d: duplicate key %q", l.n, key)
		}
		rest := strings.TrimLeft(l.text[k+1:], " ")
		p.i++
		switch {
		case rest == "":
			p.skipBlank()
			next := -1
			if p.i < len(p.lines) {
				next = p.lines[p.i].indent
			}
			nl := p.lines[min(p.i, len(p.lines)-1)]
			isSeq := p.i < len(p.lines) && (nl.text == "-" || strings.HasPrefix(nl.text, "- "))
			// A sequence may sit at its key's own indent.
			if next > indent || (next == indent && isSeq) {
				v, err := p.node(next)
				if err != nil {
					return nil, err
				}
				out[key] = v
			} else {
				out[key] = nil
			}
		case rest == "|" || rest == "|-" || rest == ">" || rest == ">-":
			out[key] = p.blockScalar(indent, rest)
		default:
			v, err := p.inline(l, rest)
			if err != nil {
				return nil, err
			}
			out[key] = v
		}
	}
}

// blockScalar reads a literal (|) or folded (>) scalar's lines, indented past
// its key.
func (p *yamlParser) blockScalar(indent int, style string) string {
	var lines []string
	body := -1
	for p.i < len(p.lines) {
		l := p.lines[p.i]
		trimmed := strings.TrimLeft(l.raw, " ")
		ind := len(l.raw) - len(trimmed)
		if strings.TrimSpace(l.raw) != "" && ind <= indent {
			break
		}
		if body < 0 && strings.TrimSpace(l.raw) != "" {
			body = ind
		}
		if body >= 0 && len(l.raw) >= body {
			lines = append(lines, l.raw[body:])
		} else {
			lines = append(lines, "")
		}
		p.i++
	}
	for len(lines) > 0 && lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	}
	sep := "\n"
	if style[0] == '>' {
		sep = " "
	}
	s := strings.Join(lines, sep)
	if !strings.HasSuffix(style, "-") && s != "" {
		s += "\n"
	}
	return s
}

// inline parses a value written on one line (a flow collection may go on
// over the next lines until its brackets close).
func (p *yamlParser) inline(l yamlLine, s string) (any, error) {
	if s[0] == '{' || s[0] == '[' {
		for !balanced(s) && p.i < len(p.lines) {
			if p.lines[p.i].indent >= 0 {
				s += " " + p.lines[p.i].text
			}
			p.i++
		}
		f := &flowParser{s: s}
		v, err := f.value()
		if err == nil {
			f.space()
			if f.pos < len(f.s) {
				err = fmt.Errorf("unexpected %q", f.s[f.pos:])
			}
		}
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", l.n, err)
		}
		return v, nil
	}
	v, err := scalar(s)
	if err != nil {
		return nil, fmt.Errorf("line %d: %w", l.n, err)
	}
	return v, nil
}

// mappingKey is the index of the colon that ends a block mapping's key on
// the line, or -1.
func mappingKey(s string) int {
	if s == "" || s[0] == '{' || s[0] == '[' {
		return -1
	}
	if s[0] == '"' || s[0] == '\'' {
		end := quotedEnd(s)
		if end < 0 || end+1 >= len(s) || s[end+1] != ':' {
			return -1
		}
		if end+2 == len(s) || s[end+2] == ' ' {
			return end + 1
		}
		return -1
	}
	for i := 0; i < len(s); i++ {
		if s[i] == ':' && (i+1 == len(s) || s[i+1] == ' ') {
			return i
		}
	}
	return -1
}

// quotedEnd is the index of the quote that closes the string s starts, or -1.
func quotedEnd(s string) int {
	q := s[0]
	for i := 1; i < len(s); i++ {
		switch {
		case q == '"' && s[i] == '\\':
			i++
		case s[i] == q && q == '\'' && i+1 < len(s) && s[i+1] == '\'':
			i++
		case s[i] == q:
			return i
		}
	}
	return -1
}

// eachUnquoted calls visit with the index of each byte of s outside quoted
// strings until it returns false; a quote opens a string where opens says.
func eachUnquoted(s string, opens func(i int) bool, visit func(i int) bool) {
	var q byte
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case q != 0:
			if c == '\\' && q == '"' {
				i++
			} else if c == q {
				q = 0
			}
		case (c == '"' || c == '\'') && opens(i):
			q = c
		default:
			if !visit(i) {
				return
			}
		}
	}
}

// stripComment cuts a line's comment: a '#' that starts the line or
// follows a blank, outside a string. A quote opens a string only where a
// scalar can start, so "don't" is a plain word.
func stripComment(s string) string {
	cut := len(s)
	eachUnquoted(s,
		func(i int) bool { return i == 0 || strings.ContainsRune(" \t:[{,-", rune(s[i-1])) },
		func(i int) bool {
			if s[i] == '#' && (i == 0 || s[i-1] == ' ' || s[i-1] == '\t') {
				cut = i
				return false
			}
			return true
		})
	return s[:cut]
}

// balanced tells whether every bracket a flow collection opened is closed.
func balanced(s string) bool {
	depth := 0
	eachUnquoted(s, func(int) bool { return true }, func(i int) bool {
		switch s[i] {
		case '{', '[':
			depth++
		case '}', ']':
			depth--
		}
		return true
	})
	return depth <= 0
}

func scalarKey(s string) (string, error) {
	v, err := scalar(s)
	if err != nil {
		return "", err
	}
	if str, ok := v.(string); ok {
		return str, nil
	}
	return strings.TrimSpace(s), nil
}

// scalar reads a plain or quoted scalar with YAML 1.2's core types.
func scalar(s string) (any, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, nil
	}
	switch s[0] {
	case '"':
		if quotedEnd(s) != len(s)-1 {
			return nil, fmt.Errorf("bad quoted string %s", s)
		}
		return strconv.Unquote(s)
	case '\'':
		if quotedEnd(s) != len(s)-1 {
			return nil, fmt.Errorf("bad quoted string %s", s)
		}
		return strings.ReplaceAll(s[1:len(s)-1], "''", "'"), nil
	case '&', '*', '!', '%', '@', '`':
		return nil, fmt.Errorf("unsupported YAML %q", s)
	}
	switch s {
	case "null", "Null", "NULL", "~":
		return nil, nil
	case "true", "True", "TRUE":
		return true, nil
	case "false", "False", "FALSE":
		return false, nil
	}
	if f, err := strconv.ParseFloat(s, 64); err == nil && strings.Trim(s, "+-0123456789.eE") == "" {
		return f, nil
	}
	return s, nil
}

// flowParser reads a flow collection: {k: v, ...} and [v, ...].
type flowParser struct {
	s   string
	pos int
}

func (f *flowParser) space() {
	for f.pos < len(f.s) && (f.s[f.pos] == ' ' || f.s[f.pos] == '\t') {
		f.pos++
	}
}

func (f *flowParser) value() (any, error) {
	f.space()
	if f.pos == len(f.s) {
		return nil, fmt.Errorf("unexpected end of flow collection")
	}
	switch f.s[f.pos] {
	case '{':
		f.pos++
		out := map[string]any{}
		for {
			f.space()
			if f.pos < len(f.s) && f.s[f.pos] == '}' {
				f.pos++
				return out, nil
			}
			k, err := f.scalar(true)
			if err != nil {
				return nil, err
			}
			key, _ := k.(string)
			if key == "" {
				key = fmt.Sprint(k)
			}
			f.space()
			var v any
			if f.pos < len(f.s) && f.s[f.pos] == ':' {
				f.pos++
				if v, err = f.value(); err != nil {
					return nil, err
				}
			}
			out[key] = v
			if err := f.next('}'); err != nil {
				return nil, err
			}
		}
	case '[':
		f.pos++
		out := []any{}
		for {
			f.space()
			if f.pos < len(f.s) && f.s[f.pos] == ']' {
				f.pos++
				return out, nil
			}
			v, err := f.value()
			if err != nil {
				return nil, err
			}
			out = append(out, v)
			if err := f.next(']'); err != nil {
				return nil, err
			}
		}
	}
	return f.scalar(false)
}

// next moves past a ',' or stays before the closing bracket.
func (f *flowParser) next(end byte) error {
	f.space()
	if f.pos < len(f.s) && f.s[f.pos] == ',' {
		f.pos++
		return nil
	}
	if f.pos < len(f.s) && f.s[f.pos] == end {
		return nil
	}
	return fmt.Errorf("want ',' or %q in flow collection at %q", end, f.s[f.pos:])
}

// scalar reads a scalar inside a flow collection; a key ends at ": ".
func (f *flowParser) scalar(key bool) (any, error) {
	f.space()
	start := f.pos
	if f.pos < len(f.s) && (f.s[f.pos] == '"' || f.s[f.pos] == '\'') {
		end := quotedEnd(f.s[f.pos:])
		if end < 0 {
			return nil, fmt.Errorf("unterminated string in flow collection")
		}
		f.pos += end + 1
		return scalar(f.s[start:f.pos])
	}
	for f.pos < len(f.s) {
		c := f.s[f.pos]
		if c == ',' || c == '}' || c == ']' || (c == ':' && (key || f.pos+1 == len(f.s) || f.s[f.pos+1] == ' ')) {
			break
		}
		f.pos++
	}
	return scalar(f.s[start:f.pos])
}
