// Package http1 speaks the part of HTTP/1.1 that the supervisor needs and
// no more: the serving loop of its two servers (the health port and the
// control socket), the request heads they read and the answers they write,
// and a client for Envoy's admin API, the control socket and readiness URLs.
//
// net/http would do all of it, at the price of its imports (crypto/tls and
// x509 above all): they were 3.7 MB of a 7.5 MB binary, and a binary's pages
// are resident in every pod that runs it, and read at the start of every
// client command (docs/benchmarks-history.md). Everything here is plain HTTP over a
// local connection: a unix socket or loopback TCP.
//
// The subset, as a server (Server, ParseRequest):
//   - HTTP/1.0 and 1.1 requests without a body: a request that announces
//     one is answered and its connection closed, since its body would be
//     read as the next request;
//   - origin-form targets, and http:// absolute-form ones whose authority
//     is a name or an address; no asterisk- or authority-form, no
//     upgrades, no Expect: 100-continue;
//   - keep-alive and pipelining; HTTP/1.0 connections close after their
//     answer;
//   - answers of a known length, never chunked; to HEAD, the head alone;
//   - bounds on the head's size, on its arrival from its first byte, on the
//     idle wait between requests and on the write of an answer.
//
// As a client (Client, ReadResponse), over TCP or a unix socket (ParseURL
// takes http:// and unix:// URLs): requests without a body; answers
// framed by Content-Length, chunked (on HTTP/1.1 only) or by the end of
// the connection, bounded in size; interim (1xx) answers skipped, 101
// refused.
//
// Queries (Query, ParseQuery, PathUnescape), on both sides: parameters
// joined by '&', written in their order with keys and values escaped as
// net/url's QueryEscape escapes them and a flag (an empty value) as its
// bare key; read as net/url's ParseQuery reads them, with its errors: a
// parameter holding ';' or a '%' without two hex digits is refused, as is a
// query of more than 10000 parameters; a path unescaped as its PathUnescape
// does. FuzzQueryAsNetURL holds them to net/url.
//
// Both sides refuse what net/http refuses (header names that are not
// tokens, control characters in values, a bad Content-Length, codings
// other than chunked, an HTTP/1.1 request without one Host), and more: a
// head net/http would take by leniency, such as a folded header line or a
// bare LF inside a chunked body. The fuzz targets FuzzParseRequestAsNetHTTP
// and FuzzReadResponseAsNetHTTP hold what is taken to read as net/http
// reads it.
package http1
