// Command seqsvg writes the SVG of a sequence diagram source (package
// seqsvg) to stdout: make docs regenerates docs/lifecycle.svg with it.
package main

import (
	"fmt"
	"os"

	"github.com/proxy-supervisor/proxy-supervisor/deploytest/seqsvg"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: seqsvg SOURCE > OUT.svg")
		os.Exit(2)
	}
	f, err := os.Open(os.Args[1])
	if err != nil {
		fmt.Fprintf(os.Stderr, "seqsvg: %v\n", err)
		os.Exit(1)
	}
	defer f.Close()
	out, err := seqsvg.Render(f)
	if err != nil {
		fmt.Fprintf(os.Stderr, "seqsvg: %s: %v\n", os.Args[1], err)
		os.Exit(1)
	}
	os.Stdout.Write(out)
}
