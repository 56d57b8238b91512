// Package portwatch owns the question "which TCP ports are still listening in this pod,
// and which of them are the app's". It lists listening sockets in the pod's shared
// network namespace (netlink sock_diag, with /proc/net/tcp{,6} as a fallback), tells
// when a listener is destroyed (OpenScanner, the kernel's sock_diag destroy broadcast), and
// sorts them into the proxy's and the app's by one ownership rule (Owner;
// docs/reference.md, "Which sockets are the proxy's"), so that a drain can wait until the
// app has closed its ports without polling for it.
package portwatch
