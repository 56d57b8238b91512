module github.com/proxy-supervisor/proxy-supervisor/e2e

go 1.26.0

require (
	github.com/proxy-supervisor/proxy-supervisor v0.0.0
	golang.org/x/sys v0.49.0
)

replace github.com/proxy-supervisor/proxy-supervisor => ../
