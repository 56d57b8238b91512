// Package testjson reads the output of `go test -json` (test2json's
// events), for the scripts that summarise test runs.
package testjson

import (
	"bufio"
	"encoding/json"
	"io"
)

// Event is one line of test2json's output.
type Event struct {
	Action  string
	Package string
	Test    string
	Elapsed float64
	Output  string
}

// Read calls event for each of r's test2json lines and other for each line
// that is not one (go test's own, a build's), in order.
func Read(r io.Reader, event func(Event), other func(line []byte)) error {
	sc := bufio.NewScanner(r)
	// A test's output line can be long (a dumped log); test2json keeps it whole.
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		line := sc.Bytes()
		var e Event
		if len(line) == 0 || line[0] != '{' || json.Unmarshal(line, &e) != nil {
			other(line)
			continue
		}
		event(e)
	}
	return sc.Err()
}
