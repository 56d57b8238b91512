package supervise

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// wallClock are the calls that read or wait on the wall clock behind the
// supervisor's back: each has its form on internal/clock (Config.Clock).
var wallClock = map[string][]string{
	"time":    {"Now", "Since", "Until", "After", "AfterFunc", "NewTimer", "NewTicker", "Tick", "Sleep"},
	"context": {"WithTimeout", "WithDeadline", "WithTimeoutCause", "WithDeadlineCause"},
}

// Every stamp and every bound of the supervisor is on its one clock, so
// that a test on the fake clock moves all of them, and none is left to the
// wall clock's race. The tracker keeps its own (its polls); what the
// supervisor reads of it is a duration (Tracker.Silence).
func TestNoWallClock(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			sel, ok := n.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			pkg, ok := sel.X.(*ast.Ident)
			if ok && slices.Contains(wallClock[pkg.Name], sel.Sel.Name) {
				t.Errorf("%s: %s.%s reads the wall clock; use the supervisor's clock (internal/clock)", fset.Position(sel.Pos()), pkg.Name, sel.Sel.Name)
			}
			return true
		})
	}
}
