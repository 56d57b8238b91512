package envoy

import (
	"context"
	"fmt"
	"strings"
	"time"
	"unicode"

	"github.com/proxy-supervisor/proxy-supervisor/internal/http1"
)

// ReadyURL is a readiness endpoint beside Envoy's own that must also answer
// 200, such as pilot-agent's http://127.0.0.1:15020/healthz/ready, which
// checks what Envoy's LIVE does not (its DNS proxy, for one). A redirect is
// not followed: the answer is this URL's, and a 3xx is not a 200.
type ReadyURL struct {
	url    string
	target string
	client *http1.Client
}

// maxWhy bounds what of a refusal's body is kept as its reason: this
// URL's, and Envoy's own /ready (ServerState).
const maxWhy = 256

// brief is what of an answer's body is kept as a reason: at most its first
// maxWhy bytes, on one line, its runs of white space folded into one
// space.
func brief(body []byte) string {
	s := strings.TrimSpace(string(body[:min(len(body), maxWhy)]))
	if strings.IndexFunc(s, unicode.IsSpace) < 0 {
		return s // a state name, such as LIVE: nothing to fold
	}
	return strings.Join(strings.Fields(s), " ")
}

// maxReadyBody bounds a readiness answer's body. pilot-agent's is empty; an
// endpoint that answers more than this is no readiness endpoint, and says
// so as the reason it is not ready.
const maxReadyBody = 64 << 10

// checkTimeout bounds one check, whatever its context.
const checkTimeout = 2 * time.Second

// NewReadyURL returns a checker of u, an http:// URL: the endpoint is
// local, and plain HTTP.
func NewReadyURL(u http1.URL) *ReadyURL {
	return &ReadyURL{url: u.Raw, target: u.Target, client: &http1.Client{
		Dial:    u.Dial(time.Second),
		Host:    u.Host,
		MaxBody: maxReadyBody,
	}}
}

// Check asks the URL, bounded by ctx, and returns "" when it answered 200,
// otherwise why not.
func (r *ReadyURL) Check(ctx context.Context) string {
	ctx, cancel := context.WithTimeout(ctx, checkTimeout)
	defer cancel()
	resp, err := r.client.Do(ctx, "GET", r.target)
	if err != nil {
		return fmt.Sprintf("%s: %v", r.url, err)
	}
	if resp.Code == 200 {
		return ""
	}
	why := fmt.Sprintf("%s answered %d", r.url, resp.Code)
	if b := brief(resp.Body); b != "" {
		why += ": " + b
	}
	return why
}
