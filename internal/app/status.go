package app

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"time"
)

// Status is the status command: it prints the supervisor's state as
// indented JSON on stdout and returns 0, or says why it could not and
// returns 1.
func Status(s Socket, stdout, stderr io.Writer) int {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	raw, err := s.client().Status(ctx)
	if err != nil {
		fmt.Fprintf(stderr, "proxy-supervisor: status: %v\n", err)
		return 1
	}
	var out bytes.Buffer
	if json.Indent(&out, raw, "", "  ") != nil {
		out.Write(raw)
	}
	out.WriteByte('\n')
	stdout.Write(out.Bytes())
	return 0
}
