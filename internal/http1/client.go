package http1

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"
	"time"
)

// Client makes requests to one server, over connections it keeps open
// between requests while the server does (a readiness poll every 10 ms must
// not cost a connection each). It is safe for concurrent use.
//
// Every request the supervisor and its clients send may be sent twice (a
// poll, a completion recorded again, a drain joined, a second
// /quitquitquit), so a request that fails on a kept connection before any of
// its answer arrived is sent again once on a new one: the server may have
// closed the idle connection under it.
type Client struct {
	// Dial opens a connection to the server, bounded by ctx.
	Dial func(ctx context.Context) (net.Conn, error)
	// Host is the Host header.
	Host string
	// MaxBody bounds an answer's body; a longer one is an error, never a
	// cut-off answer that could be read as a short one.
	MaxBody int

	mu   sync.Mutex
	idle []*conn
}

// maxIdle is how many connections a Client keeps; the supervisor's callers
// overlap at most two at a time (the tracker's poll and a drain's).
const maxIdle = 2

// maxHead bounds a response's head, and its trailer; maxInterim, the 1xx
// answers before it.
const (
	maxHead    = 64 << 10
	maxInterim = 8
)

// Response is an answer.
type Response struct {
	Code   int
	Status string // the status line after the code, such as "OK"
	Body   []byte
}

type conn struct {
	net.Conn
	br *bufio.Reader
}

func newConn(nc net.Conn) *conn { return &conn{Conn: nc, br: bufio.NewReaderSize(nc, 4<<10)} }

// Do sends a request without a body for target (a path with its query),
// bounded by ctx, and returns the answer whatever its code.
func (c *Client) Do(ctx context.Context, method, target string) (Response, error) {
	return c.DoMax(ctx, method, target, c.MaxBody)
}

// DoMax is Do with its own bound on the answer's body, for a request whose
// answer is small by nature: no more than maxBody of it is read, and a
// longer one is an error (ErrTooLarge).
func (c *Client) DoMax(ctx context.Context, method, target string, maxBody int) (Response, error) {
	if err := ctx.Err(); err != nil {
		return Response{}, err
	}
	// The resend dials, and drops the other kept connections: a server
	// that closes its idle connections closes every one.
	for fresh := false; ; fresh = true {
		cn, kept, err := c.get(ctx, fresh)
		started := false
		if err == nil {
			var resp Response
			var keep bool
			resp, keep, started, err = c.roundTrip(ctx, cn, method, target, maxBody)
			if err == nil {
				c.put(cn, keep)
				return resp, nil
			}
			cn.Close()
		}
		// A dial or a request cut by ctx's deadline may say "i/o timeout":
		// ctx's error says why, and the cause stays in the chain (a refused
		// port is still one).
		if cerr := ctxErr(ctx); cerr != nil {
			return Response{}, fmt.Errorf("%w (%w)", cerr, err)
		}
		if !kept || started {
			return Response{}, err
		}
		c.CloseIdle()
	}
}

// ctxErr is ctx.Err(), and DeadlineExceeded once ctx's deadline has passed:
// the connection's deadline, set to ctx's, may fire before ctx's own timer,
// and a caller tells a request cut by its deadline by ctx's error.
func ctxErr(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if d, ok := ctx.Deadline(); ok && !time.Now().Before(d) {
		return context.DeadlineExceeded
	}
	return nil
}

// Keep adds nc, a connection to the server that the caller opened with
// Dial, to those kept for the next request.
func (c *Client) Keep(nc net.Conn) {
	c.put(newConn(nc), true)
}

// CloseIdle closes the connections kept for reuse.
func (c *Client) CloseIdle() {
	c.mu.Lock()
	idle := c.idle
	c.idle = nil
	c.mu.Unlock()
	for _, cn := range idle {
		cn.Close()
	}
}

// get returns a kept connection unless fresh, or a new one; kept says which.
func (c *Client) get(ctx context.Context, fresh bool) (*conn, bool, error) {
	c.mu.Lock()
	if n := len(c.idle); n > 0 && !fresh {
		cn := c.idle[n-1]
		c.idle = c.idle[:n-1]
		c.mu.Unlock()
		return cn, true, nil
	}
	c.mu.Unlock()
	nc, err := c.Dial(ctx)
	if err != nil {
		return nil, false, err
	}
	return newConn(nc), false, nil
}

func (c *Client) put(cn *conn, keep bool) {
	if keep {
		c.mu.Lock()
		if len(c.idle) < maxIdle {
			c.idle = append(c.idle, cn)
			c.mu.Unlock()
			return
		}
		c.mu.Unlock()
	}
	cn.Close()
}

// roundTrip writes the request and reads its answer. started reports
// whether any of the answer arrived, after which it must not be sent again.
func (c *Client) roundTrip(ctx context.Context, cn *conn, method, target string, maxBody int) (resp Response, keep, started bool, err error) {
	deadline, _ := ctx.Deadline()
	cn.SetDeadline(deadline)
	// A cancelled ctx cuts the connection's wait at once; the connection is
	// then closed, since an answer may still be on its way.
	stop := context.AfterFunc(ctx, func() { cn.SetDeadline(time.Unix(1, 0)) })
	defer stop()

	req := make([]byte, 0, 128+len(target)+len(c.Host))
	req = append(req, method...)
	req = append(req, ' ')
	req = append(req, target...)
	req = append(req, " HTTP/1.1\r\nHost: "...)
	req = append(req, c.Host...)
	req = append(req, "\r\nUser-Agent: proxy-supervisor\r\n"...)
	if method == "POST" {
		req = append(req, "Content-Length: 0\r\n"...)
	}
	req = append(req, "\r\n"...)
	if _, err := cn.Write(req); err != nil {
		return Response{}, false, false, err
	}
	if _, err := cn.br.Peek(1); err != nil {
		return Response{}, false, false, err
	}
	resp, keep, err = ReadResponse(cn.br, maxBody)
	if err == nil {
		// A cancel that came as the answer ended may still set its
		// deadline in the past: such a connection is not kept.
		if !stop() {
			keep = false
		}
		// Bytes past the answer are no answer to anything this client
		// asked: the connection is not kept to read them as the next one.
		if cn.br.Buffered() > 0 {
			keep = false
		}
		cn.SetDeadline(time.Time{})
	}
	return resp, keep, true, err
}

// ErrTooLarge is an answer whose body is longer than the client's MaxBody.
var ErrTooLarge = errors.New("answer larger than the bound")

// ReadResponse reads one answer from br: its status, and its body whether
// framed by Content-Length, chunked, or by the end of the connection, up to
// maxBody bytes; the client sends no HEAD, so an answer's body is never to
// be left unread. keep reports whether the connection can carry another
// request. Interim (1xx) answers are skipped; 101 is refused, since no
// request asks to switch protocols. What it takes net/http's client takes
// alike (FuzzReadResponseAsNetHTTP).
func ReadResponse(br *bufio.Reader, maxBody int) (resp Response, keep bool, err error) {
	for interim := 0; ; interim++ {
		var h respHead
		if h, err = readHead(br); err != nil {
			return Response{}, false, err
		}
		if h.code == 101 {
			return Response{}, false, errors.New("unexpected 101 Switching Protocols")
		}
		if h.code >= 100 && h.code < 200 {
			if interim == maxInterim {
				return Response{}, false, fmt.Errorf("more than %d interim answers", maxInterim)
			}
			continue
		}
		resp = Response{Code: h.code, Status: h.status}
		keep = h.keep
		switch {
		case h.code == 204 || h.code == 304:
		case h.chunked:
			resp.Body, err = readChunked(br, maxBody)
		case h.length >= 0:
			if h.length > int64(maxBody) {
				return Response{}, false, fmt.Errorf("%w: Content-Length %d, bound %d", ErrTooLarge, h.length, maxBody)
			}
			resp.Body = make([]byte, h.length)
			_, err = io.ReadFull(br, resp.Body)
		default:
			keep = false
			resp.Body, err = io.ReadAll(io.LimitReader(br, int64(maxBody)+1))
			if err == nil && len(resp.Body) > maxBody {
				err = fmt.Errorf("%w of %d bytes", ErrTooLarge, maxBody)
			}
		}
		if err != nil {
			return Response{}, false, fmt.Errorf("read answer: %w", unexpected(err))
		}
		return resp, keep, nil
	}
}

type respHead struct {
	code    int
	status  string
	length  int64 // -1: not given
	chunked bool
	keep    bool
}

// readHead reads a response head. It refuses a header name that is not a
// token, a control character in a value, a Content-Length that is not one
// decimal number, and a Transfer-Encoding other than one chunked, or any on
// HTTP/1.0 (where net/http ignores it and reads to the end: the server is
// confused, and which of the two it meant is not for the client to guess).
func readHead(br *bufio.Reader) (respHead, error) {
	h := respHead{length: -1}
	line, err := readLine(br)
	if err != nil {
		return h, unexpected(err)
	}
	proto, rest, _ := bytes.Cut(line, []byte{' '})
	codeText, status, _ := bytes.Cut(rest, []byte{' '})
	code, cerr := strconv.Atoi(string(codeText))
	switch {
	case cerr != nil || len(codeText) != 3 || codeText[0] < '1' || codeText[0] > '9':
		return h, fmt.Errorf("malformed status line %q", line)
	case string(proto) == "HTTP/1.1":
		h.keep = true
	case string(proto) != "HTTP/1.0":
		return h, fmt.Errorf("malformed status line %q", line)
	}
	h.code, h.status = code, string(status)
	old := !h.keep // HTTP/1.0
	size := len(line)
	closed := false
	for {
		line, err := readLine(br)
		if err != nil {
			return h, fmt.Errorf("read answer's head: %w", unexpected(err))
		}
		if len(line) == 0 {
			if closed {
				h.keep = false
			}
			return h, nil
		}
		if size += len(line); size > maxHead {
			return h, fmt.Errorf("answer's head longer than %d bytes", maxHead)
		}
		name, value, ok := headerLine(line)
		if !ok {
			return h, fmt.Errorf("malformed header line %q", line)
		}
		switch {
		case bytes.EqualFold(name, []byte("Content-Length")):
			n, err := strconv.ParseInt(string(value), 10, 64)
			if err != nil || !isDecimal(value) || h.length >= 0 && n != h.length {
				return h, fmt.Errorf("bad Content-Length %q", value)
			}
			h.length = n
		case bytes.EqualFold(name, []byte("Transfer-Encoding")):
			if h.chunked || old || !bytes.EqualFold(value, []byte("chunked")) {
				return h, fmt.Errorf("unsupported Transfer-Encoding %q", value)
			}
			h.chunked = true
		case bytes.EqualFold(name, []byte("Connection")):
			// close anywhere wins; keep-alive keeps an HTTP/1.0 answer's
			closed = closed || hasToken(value, "close")
			if hasToken(value, "keep-alive") {
				h.keep = true
			}
		}
	}
}

// readLine reads one line without its CRLF (or bare LF); a line longer than
// br's buffer is an error, not a line read in pieces.
func readLine(br *bufio.Reader) ([]byte, error) {
	line, err := br.ReadSlice('\n')
	if errors.Is(err, bufio.ErrBufferFull) {
		return nil, fmt.Errorf("header line longer than %d bytes", br.Size())
	}
	if err != nil {
		return nil, err
	}
	line = line[:len(line)-1]
	return bytes.TrimSuffix(line, []byte{'\r'}), nil
}

// maxChunkLine bounds a chunk's size line, and maxOverhead what chunk lines
// may add beyond what their data pays for (16 bytes a chunk, plus twice its
// data), as net/http bounds them: a server cannot make the client read
// megabytes of extensions for a few bytes of body.
const (
	maxChunkLine = 4 << 10
	maxOverhead  = 16 << 10
)

// readChunked reads a chunked body and its trailer.
func readChunked(br *bufio.Reader, maxBody int) ([]byte, error) {
	var body []byte
	var overhead int64
	for {
		line, err := crlfLine(br)
		if err != nil {
			return nil, err
		}
		overhead += int64(len(line)) + 2
		// hex digits alone, 15 at most, then extensions
		sizeText, _, _ := bytes.Cut(bytes.TrimRight(line, " \t"), []byte{';'})
		n, err := strconv.ParseUint(string(sizeText), 16, 60)
		if err != nil || len(sizeText) > 15 {
			return nil, fmt.Errorf("bad chunk size %q", line)
		}
		if overhead = max(overhead-16-2*int64(n), 0); overhead > maxOverhead {
			return nil, errors.New("too much chunk overhead")
		}
		if n == 0 {
			return body, readTrailer(br)
		}
		if uint64(len(body))+n > uint64(maxBody) {
			return nil, fmt.Errorf("%w of %d bytes", ErrTooLarge, maxBody)
		}
		body = append(body, make([]byte, n)...)
		if _, err := io.ReadFull(br, body[len(body)-int(n):]); err != nil {
			return nil, err
		}
		var crlf [2]byte
		if _, err := io.ReadFull(br, crlf[:]); err != nil {
			return nil, err
		}
		if string(crlf[:]) != "\r\n" {
			return nil, errors.New("chunk data not followed by CRLF")
		}
	}
}

// readTrailer reads the header lines after the last chunk, up to their
// blank line; each ends in CRLF.
func readTrailer(br *bufio.Reader) error {
	for size := 0; ; {
		line, err := crlfLine(br)
		if err != nil {
			return err
		}
		if len(line) == 0 {
			return nil
		}
		if _, _, ok := headerLine(line); !ok {
			return fmt.Errorf("malformed header line %q", line)
		}
		if size += len(line); size > maxHead {
			return fmt.Errorf("trailer longer than %d bytes", maxHead)
		}
	}
}

// crlfLine reads a line of a chunked body without its CRLF: RFC 9112 allows
// a bare LF to end a line of the head, not one of a chunked body (erratum
// 7633), nor a CR anywhere else in it.
func crlfLine(br *bufio.Reader) ([]byte, error) {
	line, err := br.ReadSlice('\n')
	if errors.Is(err, bufio.ErrBufferFull) || err == nil && len(line) > maxChunkLine {
		return nil, fmt.Errorf("chunk line longer than %d bytes", maxChunkLine)
	}
	if err != nil {
		return nil, err
	}
	line, ok := bytes.CutSuffix(line, []byte("\r\n"))
	if !ok || bytes.IndexByte(line, '\r') >= 0 {
		return nil, fmt.Errorf("bad chunk line %q: not ended by CRLF alone", line)
	}
	return line, nil
}

// unexpected turns an EOF in the middle of an answer into the error it is.
func unexpected(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}
