// Package envoyadmin holds the tests of the supervisor's Envoy client
// (internal/envoy: the admin API client and the readiness tracker) that run
// it against the fake Envoy in-process. They live in the test module
// because the fake does; internal/envoy's own tests use no fake.
package envoyadmin
