package envoy

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"
)

// ReadyURL is a readiness endpoint beside Envoy's own that must also answer
// 200, such as pilot-agent's http://127.0.0.1:15020/healthz/ready, which
// checks what Envoy's LIVE does not (its DNS proxy, for one).
type ReadyURL struct {
	url    string
	client *http.Client
}

// maxWhy bounds what of a refusal's body is kept as its reason.
const maxWhy = 256

// NewReadyURL returns a checker of rawURL.
func NewReadyURL(rawURL string) (*ReadyURL, error) {
	req, err := http.NewRequest(http.MethodGet, rawURL, nil)
	if err != nil {
		return nil, fmt.Errorf("readiness URL %q: %w", rawURL, err)
	}
	return &ReadyURL{url: req.URL.String(), client: &http.Client{
		Transport: &http.Transport{
			Proxy:               nil, // local; never through HTTP_PROXY
			DialContext:         (&net.Dialer{Timeout: time.Second}).DialContext,
			MaxIdleConnsPerHost: 1,
			IdleConnTimeout:     30 * time.Second,
			DisableCompression:  true,
		},
		// Never follow a redirect: the answer is this URL's.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		Timeout:       2 * time.Second,
	}}, nil
}

// Check asks the URL, bounded by ctx, and returns "" when it answered 200,
// otherwise why not.
func (r *ReadyURL) Check(ctx context.Context) string {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, r.url, nil)
	if err != nil {
		return err.Error()
	}
	resp, err := r.client.Do(req)
	if err != nil {
		return fmt.Sprintf("%s: %v", r.url, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, maxWhy))
	if resp.StatusCode == http.StatusOK {
		return ""
	}
	why := fmt.Sprintf("%s answered %d", r.url, resp.StatusCode)
	if b := strings.Join(strings.Fields(string(body)), " "); b != "" {
		why += ": " + b
	}
	return why
}
