// Package http1 speaks the part of HTTP/1.1 that the supervisor needs and
// no more: the request heads its two servers read (the health port and the
// control socket), the response heads they write, and a client for Envoy's
// admin API, the control socket and readiness URLs.
//
// net/http would do all of it, at the price of its imports (crypto/tls and
// x509 above all): they were 3.7 MB of a 7.5 MB binary, and a binary's pages
// are resident in every pod that runs it, and read at the start of every
// client command (docs/benchmarks.md). Everything here is plain HTTP over a
// local connection: a unix socket or loopback TCP.
package http1
