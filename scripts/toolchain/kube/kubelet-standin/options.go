package main

import (
	"flag"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/component-base/version"
	"k8s.io/klog/v2"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
	"sigs.k8s.io/yaml"
)

// options are the kubelet's own command-line flags, the ones a unit file passes. Flags the real
// kubelet has and the stand-in has no use for are accepted and ignored, so a unit written for a real
// kubelet starts the stand-in unchanged; a flag the kubelet does not know fails as it would.
type options struct {
	bootstrapKubeconfig string
	kubeconfig          string
	config              string
	certDir             string
	rootDir             string
	hostnameOverride    string
	nodeIP              string
	nodeLabels          map[string]string
	registerWithTaints  []string
	providerID          string
	runtimeEndpoint     string
	registerNode        bool
	version             bool
	// simulator-only: where the box's /proc is (cpuinfo, meminfo); /proc on a box.
	simProcDir string
}

func defaultOptions() *options {
	return &options{
		certDir:      "/var/lib/kubelet/pki",
		rootDir:      "/var/lib/kubelet",
		registerNode: true,
		simProcDir:   "/proc",
		nodeLabels:   map[string]string{},
	}
}

func (o *options) addFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.bootstrapKubeconfig, "bootstrap-kubeconfig", o.bootstrapKubeconfig, "kubeconfig with the bootstrap token, used to obtain the client certificate when --kubeconfig does not exist")
	fs.StringVar(&o.kubeconfig, "kubeconfig", o.kubeconfig, "kubeconfig of the node's own identity (written after TLS bootstrap)")
	fs.StringVar(&o.config, "config", o.config, "KubeletConfiguration file")
	fs.StringVar(&o.certDir, "cert-dir", o.certDir, "directory of the client (and serving) certificates")
	fs.StringVar(&o.rootDir, "root-dir", o.rootDir, "the kubelet's state directory (pods/<uid>/ live here)")
	fs.StringVar(&o.hostnameOverride, "hostname-override", o.hostnameOverride, "the Node name")
	fs.StringVar(&o.nodeIP, "node-ip", o.nodeIP, "the node's InternalIP")
	fs.StringToStringVar(&o.nodeLabels, "node-labels", o.nodeLabels, "labels to register the Node with")
	fs.StringSliceVar(&o.registerWithTaints, "register-with-taints", o.registerWithTaints, "taints to register the Node with (key=value:Effect)")
	fs.StringVar(&o.providerID, "provider-id", o.providerID, "the Node's spec.providerID")
	fs.StringVar(&o.runtimeEndpoint, "container-runtime-endpoint", o.runtimeEndpoint, "CRI endpoint (recorded, no runtime is dialled)")
	fs.BoolVar(&o.registerNode, "register-node", o.registerNode, "register the Node with the API server")
	fs.BoolVar(&o.version, "version", false, "print the version and exit")
	fs.StringVar(&o.simProcDir, "sim-proc-dir", o.simProcDir, "simulator only: the /proc whose cpuinfo and meminfo give the box's hardware")
	// Real kubelet flags a unit may carry that change nothing the API can see.
	for _, name := range []string{"pod-infra-container-image", "cgroup-driver", "runtime-cgroups", "kubelet-cgroups", "image-service-endpoint", "node-status-max-images"} {
		fs.String(name, "", "accepted and ignored (no container runtime behind the stand-in)")
	}
}

// newKlogFlags exposes klog's -v and friends as the kubelet does.
func newKlogFlags() *flag.FlagSet {
	fs := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(fs)
	return fs
}

func kubeletVersion() string { return version.Get().GitVersion }

// settings is what the stand-in runs with: flags over the KubeletConfiguration over its defaults.
type settings struct {
	nodeName           string
	nodeIP             net.IP
	labels             map[string]string
	taints             []corev1.Taint
	providerID         string
	clusterDNS         []string
	clusterDomain      string
	maxPods            int64
	reserved           corev1.ResourceList // kubeReserved + systemReserved
	evictionMemory     resource.Quantity   // evictionHard memory.available, absolute
	evictionNodefsPct  float64             // evictionHard nodefs.available, a fraction
	leaseDuration      int32
	statusUpdateEvery  time.Duration
	statusReportEvery  time.Duration
	rotateCertificates bool
	serverTLSBootstrap bool
	registerNode       bool
	staticPodPath      string
	configWarnings     []string
}

func loadSettings(o *options) (*settings, error) {
	cfg := &kubeletv1beta1.KubeletConfiguration{}
	var warnings []string
	if o.config != "" {
		data, err := os.ReadFile(o.config)
		if err != nil {
			return nil, fmt.Errorf("failed to load kubelet config file %s: %w", o.config, err)
		}
		// The kubelet decodes strictly and, on an unknown or duplicate field, falls back to a
		// lenient decode with a warning; a document that does not decode at all is fatal.
		if err := yaml.UnmarshalStrict(data, cfg); err != nil {
			warnings = append(warnings, fmt.Sprintf("strict decoding of %s failed: %v", o.config, err))
			cfg = &kubeletv1beta1.KubeletConfiguration{}
			if err := yaml.Unmarshal(data, cfg); err != nil {
				return nil, fmt.Errorf("failed to decode kubelet config file %s: %w", o.config, err)
			}
		}
		if cfg.Kind != "KubeletConfiguration" || cfg.APIVersion != "kubelet.config.k8s.io/v1beta1" {
			return nil, fmt.Errorf("%s: kind %q apiVersion %q is not kubelet.config.k8s.io/v1beta1 KubeletConfiguration", o.config, cfg.Kind, cfg.APIVersion)
		}
	}

	s := &settings{configWarnings: warnings, registerNode: o.registerNode}
	s.nodeName = strings.ToLower(strings.TrimSpace(o.hostnameOverride))
	if s.nodeName == "" {
		host, err := os.Hostname()
		if err != nil {
			return nil, fmt.Errorf("no --hostname-override and no hostname: %w", err)
		}
		s.nodeName = strings.ToLower(host)
	}
	if o.nodeIP == "" {
		return nil, fmt.Errorf("--node-ip is required by the stand-in (it has no interfaces of its own to pick from)")
	}
	if s.nodeIP = net.ParseIP(o.nodeIP); s.nodeIP == nil {
		return nil, fmt.Errorf("--node-ip %q is not an IP address", o.nodeIP)
	}
	s.labels = o.nodeLabels

	taintSpecs := o.registerWithTaints
	for _, t := range cfg.RegisterWithTaints {
		taintSpecs = append(taintSpecs, t.ToString())
	}
	for _, spec := range taintSpecs {
		t, err := parseTaint(spec)
		if err != nil {
			return nil, fmt.Errorf("--register-with-taints: %w", err)
		}
		s.taints = append(s.taints, t)
	}

	s.providerID = o.providerID
	if s.providerID == "" {
		s.providerID = cfg.ProviderID
	}
	s.clusterDNS = cfg.ClusterDNS
	for _, ip := range s.clusterDNS {
		if net.ParseIP(ip) == nil {
			return nil, fmt.Errorf("clusterDNS: %q is not an IP address", ip)
		}
	}
	s.clusterDomain = cfg.ClusterDomain
	s.maxPods = 110
	if cfg.MaxPods > 0 {
		s.maxPods = int64(cfg.MaxPods)
	}
	s.reserved = corev1.ResourceList{}
	for _, m := range []map[string]string{cfg.KubeReserved, cfg.SystemReserved} {
		for name, value := range m {
			q, err := resource.ParseQuantity(value)
			if err != nil {
				return nil, fmt.Errorf("reserved %s=%q: %w", name, value, err)
			}
			sum := s.reserved[corev1.ResourceName(name)]
			sum.Add(q)
			s.reserved[corev1.ResourceName(name)] = sum
		}
	}
	eviction := map[string]string{"memory.available": "100Mi", "nodefs.available": "10%"}
	if cfg.EvictionHard != nil {
		eviction = cfg.EvictionHard
	}
	s.evictionMemory = resource.MustParse("0")
	if v, ok := eviction["memory.available"]; ok && !strings.HasSuffix(v, "%") {
		q, err := resource.ParseQuantity(v)
		if err != nil {
			return nil, fmt.Errorf("evictionHard memory.available=%q: %w", v, err)
		}
		s.evictionMemory = q
	}
	if v, ok := eviction["nodefs.available"]; ok && strings.HasSuffix(v, "%") {
		var pct float64
		if _, err := fmt.Sscanf(strings.TrimSuffix(v, "%"), "%g", &pct); err != nil {
			return nil, fmt.Errorf("evictionHard nodefs.available=%q: %w", v, err)
		}
		s.evictionNodefsPct = pct / 100
	}
	s.leaseDuration = 40
	if cfg.NodeLeaseDurationSeconds > 0 {
		s.leaseDuration = cfg.NodeLeaseDurationSeconds
	}
	s.statusUpdateEvery = 10 * time.Second
	if cfg.NodeStatusUpdateFrequency.Duration > 0 {
		s.statusUpdateEvery = cfg.NodeStatusUpdateFrequency.Duration
	}
	s.statusReportEvery = 5 * time.Minute
	if cfg.NodeStatusReportFrequency.Duration > 0 {
		s.statusReportEvery = cfg.NodeStatusReportFrequency.Duration
	}
	s.rotateCertificates = cfg.RotateCertificates
	s.serverTLSBootstrap = cfg.ServerTLSBootstrap
	if cfg.RegisterNode != nil {
		s.registerNode = s.registerNode && *cfg.RegisterNode
	}
	s.staticPodPath = cfg.StaticPodPath
	return s, nil
}

// parseTaint reads key[=value]:Effect, as --register-with-taints takes it.
func parseTaint(spec string) (corev1.Taint, error) {
	keyValue, effect, ok := strings.Cut(spec, ":")
	if !ok {
		return corev1.Taint{}, fmt.Errorf("invalid taint spec %q: no effect", spec)
	}
	switch corev1.TaintEffect(effect) {
	case corev1.TaintEffectNoSchedule, corev1.TaintEffectPreferNoSchedule, corev1.TaintEffectNoExecute:
	default:
		return corev1.Taint{}, fmt.Errorf("invalid taint effect %q in %q", effect, spec)
	}
	key, value, _ := strings.Cut(keyValue, "=")
	if key == "" {
		return corev1.Taint{}, fmt.Errorf("invalid taint spec %q: empty key", spec)
	}
	return corev1.Taint{Key: key, Value: value, Effect: corev1.TaintEffect(effect)}, nil
}
