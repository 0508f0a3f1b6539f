// kubelet-standin is what `systemctl enable --now kubelet` starts on a simulated box: a kubelet as
// far as the API server can tell, with no container runtime behind it.
//
// It takes the real kubelet's flags and files (the unit and the KubeletConfiguration the self-join
// writes), TLS-bootstraps with the kubelet's own bootstrap code (a CSR for
// kubernetes.io/kube-apiserver-client-kubelet made with the bootstrap token, then its own
// certificate as system:node:<name>), registers its Node with the labels, taints and providerID it
// was given and the box's hardware as capacity, keeps its Lease and Ready condition fresh, and runs
// the pod lifecycle through the API: pods bound to it go Running and Ready, readiness probes "read"
// a file on the box, terminating pods honour their preStop sleep and grace period before the node
// deletes them. Every write goes through the node's own credentials, so the Node authorizer and
// NodeRestriction judge it. See README.md beside this file.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/pflag"
	"k8s.io/klog/v2"
)

func main() {
	opts := defaultOptions()
	fs := pflag.NewFlagSet("kubelet", pflag.ContinueOnError)
	opts.addFlags(fs)
	klogFlags := newKlogFlags()
	fs.AddGoFlagSet(klogFlags)
	if err := fs.Parse(os.Args[1:]); err != nil {
		fmt.Fprintf(os.Stderr, "kubelet: %v\n", err)
		os.Exit(1)
	}
	if opts.version {
		fmt.Println("Kubernetes " + kubeletVersion())
		return
	}
	defer klog.Flush()

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := run(ctx, opts); err != nil {
		klog.ErrorS(err, "kubelet stand-in stopped")
		klog.Flush()
		os.Exit(1)
	}
	klog.InfoS("kubelet stand-in stopped on signal")
}
