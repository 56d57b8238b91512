// Command pause is the pod sandbox's process in the real-kubelet suite: it
// holds the pod's namespaces until the runtime stops it. The suite builds it
// because the node has no registry to pull the usual pause image from.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	<-sigs
}
