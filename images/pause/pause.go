// Command pause is the infrastructure ("pause") container of every pod of the
// test cluster (scripts/k8s-up.sh): it holds the pod's namespaces open, sleeps
// until SIGTERM or SIGINT, and as PID 1 of a pod sharing its PID namespace it
// reaps the zombies re-parented to it. The same job as Kubernetes' pause.c,
// built as a static Go binary so the image needs no registry.
package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

var version = "3.10"

func main() {
	if len(os.Args) > 1 && (os.Args[1] == "-v" || os.Args[1] == "--version") {
		fmt.Println("pause", version)
		return
	}
	if os.Getpid() != 1 {
		fmt.Fprintln(os.Stderr, "pause: warning: not PID 1")
	}
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGCHLD)
	for s := range sigs {
		if s == syscall.SIGCHLD {
			reap()
			continue
		}
		fmt.Fprintf(os.Stderr, "pause: shutting down, got %v\n", s)
		os.Exit(0)
	}
}

// reap waits for every exited child without blocking: SIGCHLDs coalesce, so
// one signal may stand for several zombies.
func reap() {
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		if pid <= 0 || err != nil {
			return
		}
	}
}
