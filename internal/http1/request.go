package http1

import "bytes"

// HeadEnd is the length of the request head at the start of b (its blank
// line included), or -1 while it is incomplete. A bare LF ends a line too.
func HeadEnd(b []byte) int {
	for i := 0; ; {
		j := bytes.IndexByte(b[i:], '\n')
		if j < 0 {
			return -1
		}
		i += j + 1
		if k := bytes.IndexByte(b[i:], '\n'); k == 0 || k == 1 && b[i] == '\r' {
			return i + k + 1
		}
	}
}

// Request is a parsed request head. Its slices point into the head.
type Request struct {
	Method []byte
	Path   []byte // the target's path, from an origin- or absolute-form target
	Query  []byte // what follows '?' in the target, without it
	// Close is set when the client asked to close the connection after
	// the answer, or speaks HTTP/1.0.
	Close bool
	// Body is set when the head announces a body: a Content-Length other
	// than 0, or any Transfer-Encoding. Neither server takes bodies (a body
	// is only something for a slow client to trickle), so both refuse such
	// a request and close the connection, whose next bytes would be the body.
	Body bool
}

// ParseRequest reads a request head (up to and including its blank line).
// It refuses what no client of the supervisor sends and a server could
// misread, and everything net/http's server refuses (FuzzParseRequestAsNetHTTP
// holds it to that): a malformed request line, a method that is not a token,
// a target other than an origin-form or http:// absolute-form one, a
// protocol other than HTTP/1.0 and 1.1, a header name that is not a token, a
// control character in a header value, a folded header line, an HTTP/1.1
// request without exactly one valid Host, a Content-Length that is not one
// decimal number, and a Transfer-Encoding other than one chunked. It does not
// allocate.
func ParseRequest(head []byte) (Request, bool) {
	line, rest, _ := bytes.Cut(head, []byte{'\n'})
	line = bytes.TrimSuffix(line, []byte{'\r'})
	method, line, ok1 := bytes.Cut(line, []byte{' '})
	target, proto, ok2 := bytes.Cut(line, []byte{' '})
	if !ok1 || !ok2 || !isToken(method) {
		return Request{}, false
	}
	var r Request
	switch string(proto) {
	case "HTTP/1.1":
	case "HTTP/1.0":
		r.Close = true
	default:
		return Request{}, false
	}
	if rest, ok := bytes.CutPrefix(target, []byte("http://")); ok {
		// absolute-form: the path follows the authority
		i := bytes.IndexByte(rest, '/')
		if i < 0 || !validAuthority(rest[:i]) {
			return Request{}, false
		}
		target = rest[i:]
	}
	if len(target) == 0 || target[0] != '/' || !only(target, cTarget) {
		return Request{}, false
	}
	if i := bytes.IndexByte(target, '?'); i >= 0 {
		target, r.Query = target[:i], target[i+1:]
	}
	if !validEscapes(target) {
		return Request{}, false
	}
	r.Method, r.Path = method, target
	var length, te []byte
	hosts := 0
	for len(rest) > 0 {
		line, rest, _ = bytes.Cut(rest, []byte{'\n'})
		line = bytes.TrimSuffix(line, []byte{'\r'})
		if len(line) == 0 {
			break
		}
		// A name that is not a token (`Content-Length : 5`) would slip
		// past the body check below: refused, as net/http did.
		name, value, ok := headerLine(line)
		if !ok {
			return Request{}, false
		}
		switch {
		case bytes.EqualFold(name, []byte("Host")):
			if hosts++; hosts > 1 || !only(value, cHost) {
				return Request{}, false
			}
		case bytes.EqualFold(name, []byte("Connection")):
			if hasToken(value, "close") {
				r.Close = true
			}
		case bytes.EqualFold(name, []byte("Transfer-Encoding")):
			if te != nil || !bytes.EqualFold(value, []byte("chunked")) {
				return Request{}, false
			}
			te = value
		case bytes.EqualFold(name, []byte("Content-Length")):
			if !isDecimal(value) || length != nil && !bytes.Equal(value, length) {
				return Request{}, false
			}
			length = value
		}
	}
	if hosts == 0 && string(proto) == "HTTP/1.1" {
		return Request{}, false
	}
	r.Body = te != nil || len(bytes.TrimLeft(length, "0")) > 0
	return r, true
}

// isDecimal reports whether b is a Content-Length: decimal digits, no sign,
// that fit an int64.
func isDecimal(b []byte) bool { return len(b) > 0 && len(b) <= 18 && only(b, cDigit) }

// validEscapes reports whether every '%' in the path b starts an escape of
// two hex digits: net/http refuses a request whose path has another.
func validEscapes(b []byte) bool {
	for i := 0; i < len(b); i++ {
		if b[i] != '%' {
			continue
		}
		if i+2 >= len(b) || !only(b[i+1:i+3], cHex) {
			return false
		}
		i += 2
	}
	return true
}

// validAuthority reports whether b is the authority of an absolute-form
// target in the subset taken: a name or IPv4 address, or an IPv6 address in
// brackets, and an optional decimal port.
func validAuthority(b []byte) bool {
	host, port := b, []byte(nil)
	if i := bytes.LastIndexByte(b, ':'); i >= 0 && bytes.IndexByte(b[i:], ']') < 0 {
		host, port = b[:i], b[i+1:]
	}
	if !only(port, cDigit) {
		return false
	}
	if ip, ok := bytes.CutPrefix(host, []byte{'['}); ok {
		ip, ok = bytes.CutSuffix(ip, []byte{']'})
		return ok && len(ip) > 0 && only(ip, cIPv6)
	}
	return only(host, cName)
}

// The classes of bytes that parts of a head may hold, as bits of class.
const (
	cToken  = 1 << iota // of a header name or a method (RFC 9110)
	cValue              // of a header value: no control character but a tab
	cTarget             // of a request target: no control character, space or '#' (url.ParseRequestURI's)
	cHost               // of a Host header net/http takes: a URL authority's, %-escapes among them
	cName               // of a host name or an IPv4 address
	cIPv6               // of an IPv6 address
	cDigit
	cHex
)

// class is the classes of each byte, a constant so that it costs neither
// code nor a written page; TestClassTable derives it from the definitions.
const class = "" +
	"\x00\x00\x00\x00\x00\x00\x00\x00\x00\x02\x00\x00\x00\x00\x00\x00" +
	"\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00" +
	"\x02\x0f\x06\x03\x0f\x0f\x0f\x0f\x0e\x0e\x0f\x0f\x0e\x1f\x3f\x06" +
	"\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x2e\x0e\x06\x0e\x06\x06" +
	"\x06\xbf\xbf\xbf\xbf\xbf\xbf\x1f\x1f\x1f\x1f\x1f\x1f\x1f\x1f\x1f" +
	"\x1f\x1f\x1f\x1f\x1f\x1f\x1f\x1f\x1f\x1f\x1f\x0e\x06\x0e\x07\x1f" +
	"\x07\xbf\xbf\xbf\xbf\xbf\xbf\x1f\x1f\x1f\x1f\x1f\x1f\x1f\x1f\x1f" +
	"\x1f\x1f\x1f\x1f\x1f\x1f\x1f\x1f\x1f\x1f\x1f\x06\x07\x06\x0f\x00" +
	"\x06\x06\x06\x06\x06\x06\x06\x06\x06\x06\x06\x06\x06\x06\x06\x06" +
	"\x06\x06\x06\x06\x06\x06\x06\x06\x06\x06\x06\x06\x06\x06\x06\x06" +
	"\x06\x06\x06\x06\x06\x06\x06\x06\x06\x06\x06\x06\x06\x06\x06\x06" +
	"\x06\x06\x06\x06\x06\x06\x06\x06\x06\x06\x06\x06\x06\x06\x06\x06" +
	"\x06\x06\x06\x06\x06\x06\x06\x06\x06\x06\x06\x06\x06\x06\x06\x06" +
	"\x06\x06\x06\x06\x06\x06\x06\x06\x06\x06\x06\x06\x06\x06\x06\x06" +
	"\x06\x06\x06\x06\x06\x06\x06\x06\x06\x06\x06\x06\x06\x06\x06\x06" +
	"\x06\x06\x06\x06\x06\x06\x06\x06\x06\x06\x06\x06\x06\x06\x06\x06"

// only reports whether every byte of b is of the class is.
func only(b []byte, is uint8) bool {
	for _, c := range b {
		if class[c]&is == 0 {
			return false
		}
	}
	return true
}

// isToken reports whether b is a header name or a method.
func isToken(b []byte) bool { return len(b) > 0 && only(b, cToken) }

// hasToken reports whether the comma list v holds token, in any case.
func hasToken(v []byte, token string) bool {
	for len(v) > 0 {
		var t []byte
		t, v, _ = bytes.Cut(v, []byte{','})
		if bytes.EqualFold(bytes.TrimSpace(t), []byte(token)) {
			return true
		}
	}
	return false
}

// headerLine splits a header line into its name, a token, and its value
// without the spaces and tabs around it, with no control character in it.
func headerLine(line []byte) (name, value []byte, ok bool) {
	name, value, ok = bytes.Cut(line, []byte{':'})
	if !ok || !isToken(name) || !only(value, cValue) {
		return nil, nil, false
	}
	return name, bytes.Trim(value, " \t"), true
}
