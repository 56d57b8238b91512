package http1

import (
	"errors"
	"fmt"
	"strings"
)

// Query is a request's query parameters, in their order. A parameter with
// an empty value is a flag, such as Envoy's usedonly, and is written as its
// bare key.
type Query []Param

// Param is one parameter of a Query.
type Param struct{ Key, Value string }

// Get returns the first value of key, or "" if there is none.
func (q Query) Get(key string) string {
	for _, p := range q {
		if p.Key == key {
			return p.Value
		}
	}
	return ""
}

// Has reports whether key is among the parameters.
func (q Query) Has(key string) bool {
	for _, p := range q {
		if p.Key == key {
			return true
		}
	}
	return false
}

// Encode writes the parameters in their order, joined by '&', their keys
// and values escaped as net/url's QueryEscape escapes them, and a flag as
// its bare key (key=value otherwise).
func (q Query) Encode() string {
	var b []byte
	for i, p := range q {
		if i > 0 {
			b = append(b, '&')
		}
		b = appendEscaped(b, p.Key)
		if p.Value != "" {
			b = appendEscaped(append(b, '='), p.Value)
		}
	}
	return string(b)
}

// appendEscaped appends s with every byte but the unreserved ones of RFC
// 3986 (letters, digits, '-', '.', '_', '~') escaped: a space as '+', the
// others as %XX.
func appendEscaped(b []byte, s string) []byte {
	const hex = "0123456789ABCDEF"
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '-', c == '.', c == '_', c == '~':
			b = append(b, c)
		case c == ' ':
			b = append(b, '+')
		default:
			b = append(b, '%', hex[c>>4], hex[c&15])
		}
	}
	return b
}

// maxParams is the most parameters a query may have: net/url's bound,
// without its GODEBUG setting.
const maxParams = 10000

// ParseQuery reads a query (what follows '?', without it) as net/url's
// ParseQuery does, with the same errors: '&' separates the parameters, a
// parameter without '=' has an empty value, empty ones are skipped, '+' is
// a space, and a parameter holding a ';' or a bad escape is refused, as is
// a query of more than 10000 parameters. The parameters read are returned
// with the error, which is the semicolon's if there is one, the first bad
// escape's otherwise.
func ParseQuery(s string) (Query, error) {
	if strings.Count(s, "&") >= maxParams {
		return nil, errors.New("number of URL query parameters exceeded limit")
	}
	var q Query
	var err error
	for s != "" {
		var kv string
		kv, s, _ = strings.Cut(s, "&")
		if strings.Contains(kv, ";") {
			err = errors.New("invalid semicolon separator in query")
			continue
		}
		if kv == "" {
			continue
		}
		k, v, _ := strings.Cut(kv, "=")
		k, err1 := unescape(k, true)
		if err1 == nil {
			v, err1 = unescape(v, true)
		}
		if err1 != nil {
			if err == nil {
				err = err1
			}
			continue
		}
		q = append(q, Param{k, v})
	}
	return q, err
}

// PathUnescape undoes the %XX escapes of a path as net/url's PathUnescape
// does, with the same error for a '%' not followed by two hex digits; '+'
// stays itself.
func PathUnescape(s string) (string, error) { return unescape(s, false) }

// unescape undoes the %XX escapes of s, and turns '+' into a space in a
// query's key or value.
func unescape(s string, query bool) (string, error) {
	n := 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '%':
			if i+2 >= len(s) || class[s[i+1]]&class[s[i+2]]&cHex == 0 {
				bad := s[i:min(i+3, len(s))]
				return "", fmt.Errorf("invalid URL escape %q", bad)
			}
			n++
			i += 2
		case '+':
			if query {
				n++
			}
		}
	}
	if n == 0 {
		return s, nil
	}
	b := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '%':
			b = append(b, unhex(s[i+1])<<4|unhex(s[i+2]))
			i += 2
		case c == '+' && query:
			b = append(b, ' ')
		default:
			b = append(b, c)
		}
	}
	return string(b), nil
}

// unhex is the value of the hex digit c.
func unhex(c byte) byte {
	switch {
	case c <= '9':
		return c - '0'
	case c <= 'F':
		return c - 'A' + 10
	}
	return c - 'a' + 10
}
