// Package deploytest checks what a user applies to a cluster: the manifests
// in deploy/ decode strictly into the Kubernetes API types and agree with
// themselves, every proxy-supervisor command line in them passes the
// binary's own --check, Istio's own injector renders the injection template,
// the Dockerfiles in images/ pass BuildKit's parser and linter, and the
// lifecycle diagram in docs/ matches its source.
//
// It is a separate module so that the heavy test-only dependencies
// (k8s.io/api, BuildKit) never reach the binary's module; Istio's injector
// is istioinject/, a module of its own per Istio release, which the Istio
// tests run.
package deploytest
