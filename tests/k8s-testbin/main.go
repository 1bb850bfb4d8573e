// Command k8s-testbin is a multi-call binary holding kube-apiserver, etcd and
// kubectl, built from published Go modules so tests can run a real control
// plane on a machine that cannot download release binaries.
//
// Usage: k8s-testbin {kube-apiserver|etcd|kubectl} [flags], or call it
// through a symlink named after the program.
package main

import (
	"fmt"
	"os"
	"path/filepath"
	_ "time/tzdata"

	"go.etcd.io/etcd/server/v3/etcdmain"
	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version"
	kubectl "k8s.io/kubectl/pkg/cmd"
	apiserver "k8s.io/kubernetes/cmd/kube-apiserver/app"
)

func main() {
	name, args := filepath.Base(os.Args[0]), os.Args
	if name == "k8s-testbin" && len(os.Args) > 1 {
		name, args = os.Args[1], os.Args[1:]
	}
	switch name {
	case "kube-apiserver":
		os.Args = args
		os.Exit(cli.Run(apiserver.NewAPIServerCommand()))
	case "etcd":
		etcdmain.Main(args)
	case "kubectl":
		os.Args = args
		os.Exit(cli.Run(kubectl.NewDefaultKubectlCommand()))
	default:
		fmt.Fprintln(os.Stderr, "usage: k8s-testbin {kube-apiserver|etcd|kubectl} [flags]")
		os.Exit(2)
	}
}
