// Command scuttle is the wait-run-quit wrapper pattern of scuttle
// (github.com/redboxllc/scuttle), the baseline of `proxy-supervisor exec` in
// docs/benchmarks.md. scuttle itself is not served by the Go module proxy, so
// this does what it does, in the same order, with the standard library only:
//
//  1. poll ENVOY_ADMIN_API/server_info until Envoy's state is LIVE (scuttle
//     retries with a backoff; the proxy is ready in the benchmark, so the
//     first poll answers and the backoff never runs);
//  2. run the command, passing stdin, stdout and stderr through;
//  3. POST ENVOY_ADMIN_API/quitquitquit (scuttle's ISTIO_QUIT_API is the
//     same call on pilot-agent's port);
//  4. exit with the command's code.
//
// Usage: ENVOY_ADMIN_API=http://127.0.0.1:15000 scuttle COMMAND [ARG...]
package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"time"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: ENVOY_ADMIN_API=URL scuttle COMMAND [ARG...]")
		os.Exit(2)
	}
	admin := os.Getenv("ENVOY_ADMIN_API")
	client := &http.Client{Timeout: time.Second}
	if admin != "" {
		if err := waitLive(client, admin, 60*time.Second); err != nil {
			fmt.Fprintln(os.Stderr, "scuttle:", err)
		}
	}
	cmd := exec.Command(os.Args[1], os.Args[2:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	code := 0
	if err := cmd.Run(); err != nil {
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			fmt.Fprintln(os.Stderr, "scuttle:", err)
			os.Exit(127)
		}
		code = ee.ExitCode()
	}
	if admin != "" {
		if resp, err := client.Post(admin+"/quitquitquit", "", nil); err != nil {
			fmt.Fprintln(os.Stderr, "scuttle: quit:", err)
		} else {
			resp.Body.Close()
		}
	}
	os.Exit(code)
}

// waitLive polls /server_info with a doubling backoff from 100 ms until the
// state is LIVE or the bound passes.
func waitLive(c *http.Client, admin string, bound time.Duration) error {
	deadline := time.Now().Add(bound)
	for backoff := 100 * time.Millisecond; ; backoff = min(2*backoff, 2*time.Second) {
		if live(c, admin) {
			return nil
		}
		if time.Now().Add(backoff).After(deadline) {
			return fmt.Errorf("Envoy not LIVE within %v", bound)
		}
		time.Sleep(backoff)
	}
}

func live(c *http.Client, admin string) bool {
	resp, err := c.Get(admin + "/server_info")
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	var info struct {
		State string `json:"state"`
	}
	return json.NewDecoder(resp.Body).Decode(&info) == nil && info.State == "LIVE"
}
