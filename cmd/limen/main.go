// Command limen is Limen's single binary: the proxy, the worker, and the
// user and administrator CLI, each as a subcommand.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := newRootCmd().ExecuteContext(ctx)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "limen:", err)
		os.Exit(1)
	}
}
