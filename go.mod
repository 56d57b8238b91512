module github.com/proxy-supervisor/proxy-supervisor

go 1.26.0

require (
	github.com/hashicorp/go-multierror v1.1.1
	github.com/oklog/run v1.2.0
	golang.org/x/sys v0.49.0
)

require github.com/hashicorp/errwrap v1.0.0 // indirect
