// Command k8s is a multi-call binary (like the old hyperkube) holding every
// program the single-node test cluster of scripts/k8s-up.sh runs: etcd,
// kube-apiserver, kube-controller-manager, kube-scheduler, kubelet,
// kube-proxy and kubectl, each the upstream cobra command of Kubernetes
// v1.37.2 (etcd: etcdmain of the etcd server release Kubernetes selects).
// One link instead of seven saves build time and cache space.
//
//	k8s <component> [flags]
//	<component> [flags]        (a symlink named after the component)
package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	_ "time/tzdata" // CronJob time zones, as upstream's apiserver and controller-manager

	"github.com/spf13/cobra"
	"go.etcd.io/etcd/server/v3/etcdmain"
	"k8s.io/component-base/cli"
	"k8s.io/component-base/logs"
	_ "k8s.io/component-base/logs/json/register"          // JSON log format registration
	_ "k8s.io/component-base/metrics/prometheus/clientgo" // client-go metrics
	_ "k8s.io/component-base/metrics/prometheus/version"  // version metric
	kubectlcmd "k8s.io/kubectl/pkg/cmd"
	kubectlutil "k8s.io/kubectl/pkg/cmd/util"
	apiserver "k8s.io/kubernetes/cmd/kube-apiserver/app"
	controllermanager "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	proxy "k8s.io/kubernetes/cmd/kube-proxy/app"
	scheduler "k8s.io/kubernetes/cmd/kube-scheduler/app"
	kubelet "k8s.io/kubernetes/cmd/kubelet/app"
)

// components maps a name to a function running it with os.Args already
// rewritten to [name, flags...]; it returns the exit code.
var components = map[string]func() int{
	"etcd": func() int {
		etcdmain.Main(os.Args)
		return 0
	},
	"kube-apiserver": func() int { return cli.Run(apiserver.NewAPIServerCommand()) },
	"kube-controller-manager": func() int {
		return cli.Run(controllermanager.NewControllerManagerCommand())
	},
	"kube-scheduler": func() int { return cli.Run(scheduler.NewSchedulerCommand()) },
	"kubelet":        func() int { return cli.Run(kubelet.NewKubeletCommand(context.Background())) },
	"kube-proxy":     func() int { return cli.Run(proxy.NewProxyCommand()) },
	"kubectl":        runKubectl,
}

func runKubectl() int {
	logs.GlogSetter(kubectlcmd.GetLogVerbosity(os.Args)) // nolint:errcheck
	var command *cobra.Command = kubectlcmd.NewDefaultKubectlCommand()
	if err := cli.RunNoErrOutput(command); err != nil {
		kubectlutil.CheckErr(err)
	}
	return 0
}

func usage() {
	names := make([]string, 0, len(components))
	for n := range components {
		names = append(names, n)
	}
	sort.Strings(names)
	fmt.Fprintf(os.Stderr, "usage: k8s <component> [flags]\ncomponents: %s\n", strings.Join(names, ", "))
}

func main() {
	name := filepath.Base(os.Args[0])
	run, ok := components[name]
	if !ok {
		// Called as k8s (or any other name): the component is the first argument.
		if len(os.Args) < 2 {
			usage()
			os.Exit(2)
		}
		name = os.Args[1]
		if name == "-h" || name == "--help" || name == "help" {
			usage()
			return
		}
		if run, ok = components[name]; !ok {
			fmt.Fprintf(os.Stderr, "k8s: unknown component %q\n", name)
			usage()
			os.Exit(2)
		}
		os.Args = append([]string{name}, os.Args[2:]...)
	}
	os.Exit(run())
}
