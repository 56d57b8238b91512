// Package health is the TCP health server that the kubelet probes and
// Prometheus scrapes: /healthz/ready, /healthz/live and /metrics.
//
// It answers from state that others own (the supervisor's lifecycle and
// metrics) and can change nothing: stopping goes through the control socket
// alone, because under Istio traffic that Envoy redirects reaches local ports
// from 127.0.0.6, so a loopback check would protect nothing.
package health
