// Command etcd is etcd's own server entry point, built by test/cluster at the
// version pinned in this module's go.mod.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
