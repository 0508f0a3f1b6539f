package main

import (
	"bytes"
	"context"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net"
	"net/http"
	"reflect"
	"runtime"
	"strings"
	"sync"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	"k8s.io/apimachinery/pkg/util/wait"
	clientset "k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/certificate"
	"k8s.io/client-go/util/connrotation"
	"k8s.io/client-go/util/keyutil"
	"k8s.io/component-helpers/apimachinery/lease"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/pkg/kubelet/certificate/bootstrap"
	"k8s.io/utils/clock"
)

const kubeletPort = 10250

type kubelet struct {
	s        *settings
	opts     *options
	hw       hardware
	client   clientset.Interface
	recorder record.EventRecorder

	mu       sync.Mutex
	podCIDR  string
	lastSent *corev1.NodeStatus
	lastSend time.Time
}

func run(ctx context.Context, opts *options) error {
	s, err := loadSettings(opts)
	if err != nil {
		return err
	}
	for _, w := range s.configWarnings {
		klog.InfoS("Warning: " + w)
	}
	klog.InfoS("Starting kubelet stand-in", "version", kubeletVersion(), "node", s.nodeName, "nodeIP", s.nodeIP.String(),
		"providerID", s.providerID, "clusterDNS", s.clusterDNS, "clusterDomain", s.clusterDomain)
	hw, err := readHardware(opts.simProcDir, opts.rootDir)
	if err != nil {
		return err
	}
	klog.InfoS("Machine", "threads", hw.threads, "memoryBytes", hw.memoryBytes, "storageBytes", hw.storageBytes)

	if opts.kubeconfig == "" {
		return fmt.Errorf("--kubeconfig is required")
	}
	if opts.bootstrapKubeconfig != "" {
		// The kubelet's own TLS bootstrap: a CSR made with the bootstrap token, signed once approved.
		if err := bootstrap.LoadClientCert(ctx, opts.kubeconfig, opts.bootstrapKubeconfig, opts.certDir, types.NodeName(s.nodeName)); err != nil {
			return fmt.Errorf("failed to run Kubelet: unable to load bootstrap kubeconfig: %w", err)
		}
	}
	restConfig, err := clientcmd.BuildConfigFromFlags("", opts.kubeconfig)
	if err != nil {
		return fmt.Errorf("invalid kubeconfig %s: %w", opts.kubeconfig, err)
	}
	restConfig.UserAgent = "kubelet/" + kubeletVersion() + " (linux/" + runtime.GOARCH + ") kubelet-standin"
	restConfig.QPS, restConfig.Burst = 50, 100
	if s.rotateCertificates {
		// As the kubelet does with rotateCertificates: every connection presents the certificate
		// manager's current client certificate, and rotation closes the old connections.
		if restConfig, err = rotatingClientConfig(ctx, restConfig, opts.certDir, s.nodeName); err != nil {
			return err
		}
	}
	client, err := clientset.NewForConfig(restConfig)
	if err != nil {
		return err
	}
	k := &kubelet{s: s, opts: opts, hw: hw, client: client}

	broadcaster := record.NewBroadcaster(record.WithContext(ctx))
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: client.CoreV1().Events("")})
	defer broadcaster.Shutdown()
	k.recorder = broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "kubelet", Host: s.nodeName})

	if s.registerNode {
		if err := k.register(ctx); err != nil {
			return err
		}
	}
	if s.serverTLSBootstrap {
		k.startServingCertificate(ctx)
	}
	go k.leaseLoop(ctx)
	go k.statusLoop(ctx)
	pods := newPodManager(k)
	go pods.run(ctx)
	<-ctx.Done()
	return nil
}

// --- certificates -------------------------------------------------------------------------------

// rotatingClientConfig renews the client certificate before it expires, as the kubelet's certificate
// manager does with rotateCertificates: the renewal CSR is made with the node's own current
// certificate (approved through certificatesigningrequests/selfnodeclient), the new pair goes to
// <cert-dir>/kubelet-client-current.pem, and the returned config always dials with the current one.
func rotatingClientConfig(ctx context.Context, base *rest.Config, certDir, nodeName string) (*rest.Config, error) {
	store, err := certificate.NewFileStore("kubelet-client", certDir, certDir, "", "")
	if err != nil {
		return nil, err
	}
	manager, err := certificate.NewManager(&certificate.Config{
		ClientsetFn: func(current *tls.Certificate) (clientset.Interface, error) {
			cfg := rest.AnonymousClientConfig(base)
			if current != nil {
				certPEM, keyPEM, err := pemPair(current)
				if err != nil {
					return nil, err
				}
				cfg.CertData, cfg.KeyData = certPEM, keyPEM
			}
			return clientset.NewForConfig(cfg)
		},
		Template: &x509.CertificateRequest{
			Subject: pkix.Name{CommonName: "system:node:" + nodeName, Organization: []string{"system:nodes"}},
		},
		SignerName:       certificatesv1.KubeAPIServerClientKubeletSignerName,
		GetUsages:        clientUsages,
		CertificateStore: store,
		Name:             "kubelet-client",
	})
	if err != nil {
		return nil, err
	}
	manager.Start()
	go func() { <-ctx.Done(); manager.Stop() }()

	cfg := rest.AnonymousClientConfig(base)
	tlsConfig, err := rest.TLSConfigFor(cfg)
	if err != nil {
		return nil, err
	}
	if tlsConfig == nil {
		return nil, fmt.Errorf("the kubeconfig's server is not https")
	}
	tlsConfig.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
		if current := manager.Current(); current != nil {
			return current, nil
		}
		return &tls.Certificate{}, nil
	}
	dialer := connrotation.NewDialer((&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext)
	cfg.Transport = utilnet.SetTransportDefaults(&http.Transport{
		Proxy:               http.ProxyFromEnvironment,
		TLSHandshakeTimeout: 10 * time.Second,
		TLSClientConfig:     tlsConfig,
		MaxIdleConnsPerHost: 25,
		DialContext:         dialer.DialContext,
	})
	cfg.TLSClientConfig = rest.TLSClientConfig{}
	var last []byte
	if current := manager.Current(); current != nil && current.Leaf != nil {
		last = current.Leaf.Raw
	}
	go wait.Until(func() {
		current := manager.Current()
		if current == nil || current.Leaf == nil || bytes.Equal(current.Leaf.Raw, last) {
			return
		}
		last = current.Leaf.Raw
		klog.InfoS("Certificate rotation detected, shutting down client connections to start using new credentials")
		dialer.CloseAll()
	}, time.Second, ctx.Done())
	return cfg, nil
}

func pemPair(c *tls.Certificate) ([]byte, []byte, error) {
	var certPEM []byte
	for _, der := range c.Certificate {
		certPEM = append(certPEM, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})...)
	}
	keyPEM, err := keyutil.MarshalPrivateKeyToPEM(c.PrivateKey)
	return certPEM, keyPEM, err
}

// startServingCertificate requests the kubelet's serving certificate (kubernetes.io/kubelet-serving)
// as serverTLSBootstrap asks. kube-controller-manager never approves these on its own: the request
// stays Pending until something in the cluster approves it, exactly as with a real kubelet.
func (k *kubelet) startServingCertificate(ctx context.Context) {
	store, err := certificate.NewFileStore("kubelet-server", k.opts.certDir, k.opts.certDir, "", "")
	if err != nil {
		klog.ErrorS(err, "Failed to build the serving certificate store")
		return
	}
	manager, err := certificate.NewManager(&certificate.Config{
		ClientsetFn: func(*tls.Certificate) (clientset.Interface, error) { return k.client, nil },
		GetTemplate: func() *x509.CertificateRequest {
			return &x509.CertificateRequest{
				Subject:     pkix.Name{CommonName: "system:node:" + k.s.nodeName, Organization: []string{"system:nodes"}},
				DNSNames:    []string{k.s.nodeName},
				IPAddresses: []net.IP{k.s.nodeIP},
			}
		},
		SignerName:       certificatesv1.KubeletServingSignerName,
		GetUsages:        servingUsages,
		CertificateStore: store,
		Name:             "kubelet-server",
	})
	if err != nil {
		klog.ErrorS(err, "Failed to start the serving certificate manager")
		return
	}
	manager.Start()
	go func() { <-ctx.Done(); manager.Stop() }()
}

// --- registration -------------------------------------------------------------------------------

func (k *kubelet) initialNode() *corev1.Node {
	labels := map[string]string{
		corev1.LabelHostname:   k.s.nodeName,
		corev1.LabelOSStable:   "linux",
		corev1.LabelArchStable: runtime.GOARCH,
	}
	for key, value := range k.s.labels {
		labels[key] = value
	}
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name:        k.s.nodeName,
			Labels:      labels,
			Annotations: map[string]string{"volumes.kubernetes.io/controller-managed-attach-detach": "true"},
		},
		Spec: corev1.NodeSpec{ProviderID: k.s.providerID, Taints: k.s.taints},
	}
	node.Status = k.nodeStatus(nil)
	return node
}

// register creates the Node, retrying as the kubelet does until the API server takes it. An existing
// Node (a restarted kubelet, a re-join) is kept as it is, except for the kubelet's default labels:
// --node-labels and --register-with-taints apply at registration only, as with the real kubelet.
func (k *kubelet) register(ctx context.Context) error {
	return wait.PollUntilContextCancel(ctx, 2*time.Second, true, func(ctx context.Context) (bool, error) {
		node := k.initialNode()
		created, err := k.client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
		if err == nil {
			klog.InfoS("Successfully registered node", "node", klog.KObj(created))
			k.recorder.Eventf(nodeRef(created), corev1.EventTypeNormal, "RegisteredNode", "Node %s registered by the kubelet", created.Name)
			k.setPodCIDR(created.Spec.PodCIDR)
			return true, nil
		}
		if !apierrors.IsAlreadyExists(err) {
			klog.ErrorS(err, "Unable to register node with API server", "node", k.s.nodeName)
			return false, nil
		}
		existing, err := k.client.CoreV1().Nodes().Get(ctx, k.s.nodeName, metav1.GetOptions{})
		if err != nil {
			klog.ErrorS(err, "Unable to read the existing node", "node", k.s.nodeName)
			return false, nil
		}
		if existing.Spec.ProviderID != "" && k.s.providerID != "" && existing.Spec.ProviderID != k.s.providerID {
			klog.InfoS("Node was previously registered with another providerID; keeping the API's", "node", k.s.nodeName,
				"existing", existing.Spec.ProviderID, "flag", k.s.providerID)
		}
		desired := existing.DeepCopy()
		for _, key := range []string{corev1.LabelHostname, corev1.LabelOSStable, corev1.LabelArchStable} {
			if desired.Labels == nil {
				desired.Labels = map[string]string{}
			}
			desired.Labels[key] = node.Labels[key]
		}
		if !reflect.DeepEqual(desired.Labels, existing.Labels) {
			if _, err := patchNode(ctx, k.client, existing, desired, ""); err != nil {
				klog.ErrorS(err, "Unable to reconcile the default labels", "node", k.s.nodeName)
				return false, nil
			}
		}
		klog.InfoS("Node was previously registered", "node", klog.KObj(existing))
		k.setPodCIDR(existing.Spec.PodCIDR)
		return true, nil
	})
}

func nodeRef(node *corev1.Node) *corev1.ObjectReference {
	return &corev1.ObjectReference{Kind: "Node", Name: node.Name, UID: types.UID(node.Name)}
}

func (k *kubelet) setPodCIDR(cidr string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if cidr != "" && cidr != k.podCIDR {
		klog.InfoS("Updating Pod CIDR", "podCIDR", cidr)
		k.podCIDR = cidr
	}
}

func (k *kubelet) getPodCIDR() string {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.podCIDR
}

// --- status -------------------------------------------------------------------------------------

func (k *kubelet) nodeStatus(previous *corev1.NodeStatus) corev1.NodeStatus {
	now := metav1.Now()
	capacity, allocatable := k.hw.capacity(k.s)
	// As the kubelet does: an extended resource someone else advertised (a device plugin, or a PATCH
	// of status.capacity: the program's egress budget) stays, and allocatable follows its capacity.
	if previous != nil {
		for name, quantity := range previous.Capacity {
			if isExtendedResource(name) {
				capacity[name] = quantity.DeepCopy()
				allocatable[name] = quantity.DeepCopy()
			}
		}
	}
	condition := func(t corev1.NodeConditionType, status corev1.ConditionStatus, reason, message string) corev1.NodeCondition {
		c := corev1.NodeCondition{Type: t, Status: status, Reason: reason, Message: message, LastHeartbeatTime: now, LastTransitionTime: now}
		if previous != nil {
			for _, p := range previous.Conditions {
				if p.Type == t && p.Status == status {
					c.LastTransitionTime = p.LastTransitionTime
				}
			}
		}
		return c
	}
	machineID := stableID("machine", k.s.nodeName)
	return corev1.NodeStatus{
		Capacity:    capacity,
		Allocatable: allocatable,
		Conditions: []corev1.NodeCondition{
			condition(corev1.NodeMemoryPressure, corev1.ConditionFalse, "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
			condition(corev1.NodeDiskPressure, corev1.ConditionFalse, "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
			condition(corev1.NodePIDPressure, corev1.ConditionFalse, "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
			condition(corev1.NodeReady, corev1.ConditionTrue, "KubeletReady", "kubelet is posting ready status"),
		},
		Addresses: []corev1.NodeAddress{
			{Type: corev1.NodeInternalIP, Address: k.s.nodeIP.String()},
			{Type: corev1.NodeHostName, Address: k.s.nodeName},
		},
		DaemonEndpoints: corev1.NodeDaemonEndpoints{KubeletEndpoint: corev1.DaemonEndpoint{Port: kubeletPort}},
		NodeInfo: corev1.NodeSystemInfo{
			MachineID:               machineID,
			SystemUUID:              stableID("uuid", k.s.nodeName),
			BootID:                  k.hw.bootID,
			KernelVersion:           k.hw.kernelVersion,
			OSImage:                 k.hw.osImage,
			ContainerRuntimeVersion: "containerd://simulated",
			KubeletVersion:          kubeletVersion(),
			OperatingSystem:         "linux",
			Architecture:            runtime.GOARCH,
		},
	}
}

// isExtendedResource: a resource name with a domain outside kubernetes.io (v1helper.IsExtendedResourceName).
func isExtendedResource(name corev1.ResourceName) bool {
	domain, _, found := strings.Cut(string(name), "/")
	return found && !strings.HasPrefix(string(name), "requests.") &&
		domain != "kubernetes.io" && !strings.HasSuffix(domain, ".kubernetes.io")
}

// statusLoop posts the node status every nodeStatusUpdateFrequency when it changed, and at least
// every nodeStatusReportFrequency otherwise, as the kubelet does once it has a Lease.
func (k *kubelet) statusLoop(ctx context.Context) {
	wait.UntilWithContext(ctx, func(ctx context.Context) {
		node, err := k.client.CoreV1().Nodes().Get(ctx, k.s.nodeName, metav1.GetOptions{})
		if err != nil {
			klog.ErrorS(err, "Error getting the node for a status update", "node", k.s.nodeName)
			return
		}
		k.setPodCIDR(node.Spec.PodCIDR)
		status := k.nodeStatus(&node.Status)
		k.mu.Lock()
		unchanged := k.lastSent != nil && statusEquivalent(k.lastSent, &status) && statusEquivalent(&node.Status, &status)
		due := time.Since(k.lastSend) >= k.s.statusReportEvery
		k.mu.Unlock()
		if unchanged && !due {
			return
		}
		desired := node.DeepCopy()
		desired.Status = status
		if _, err := patchNode(ctx, k.client, node, desired, "status"); err != nil {
			klog.ErrorS(err, "Error updating node status", "node", k.s.nodeName)
			return
		}
		k.mu.Lock()
		k.lastSent, k.lastSend = &status, time.Now()
		k.mu.Unlock()
	}, k.s.statusUpdateEvery)
}

// statusEquivalent ignores heartbeat times, as the kubelet's change detection does.
func statusEquivalent(a, b *corev1.NodeStatus) bool {
	strip := func(s *corev1.NodeStatus) corev1.NodeStatus {
		c := *s.DeepCopy()
		for i := range c.Conditions {
			c.Conditions[i].LastHeartbeatTime = metav1.Time{}
			c.Conditions[i].LastTransitionTime = metav1.Time{}
		}
		c.Images, c.VolumesInUse, c.VolumesAttached, c.Config, c.RuntimeHandlers, c.Features = nil, nil, nil, nil, nil, nil
		return c
	}
	x, y := strip(a), strip(b)
	return reflect.DeepEqual(x.Conditions, y.Conditions) && reflect.DeepEqual(x.Addresses, y.Addresses) &&
		x.Capacity.Cpu().Equal(*y.Capacity.Cpu()) && x.Capacity.Memory().Equal(*y.Capacity.Memory()) &&
		x.Allocatable.Memory().Equal(*y.Allocatable.Memory()) && x.NodeInfo == y.NodeInfo
}

func patchNode(ctx context.Context, client clientset.Interface, old, desired *corev1.Node, subresource string) (*corev1.Node, error) {
	oldJSON, err := json.Marshal(old)
	if err != nil {
		return nil, err
	}
	newJSON, err := json.Marshal(desired)
	if err != nil {
		return nil, err
	}
	patch, err := strategicpatch.CreateTwoWayMergePatch(oldJSON, newJSON, corev1.Node{})
	if err != nil {
		return nil, err
	}
	if subresource == "" {
		return client.CoreV1().Nodes().Patch(ctx, old.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{})
	}
	return client.CoreV1().Nodes().Patch(ctx, old.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, subresource)
}

// --- lease --------------------------------------------------------------------------------------

// leaseLoop renews kube-node-lease/<node> every quarter of its duration, as the kubelet does; the
// node lifecycle controller marks the Node Unknown once renewals stop for its grace period.
func (k *kubelet) leaseLoop(ctx context.Context) {
	renew := time.Duration(float64(k.s.leaseDuration)*0.25*1000) * time.Millisecond
	controller := lease.NewController(clock.RealClock{}, k.client, k.s.nodeName, k.s.leaseDuration, nil, renew,
		k.s.nodeName, corev1.NamespaceNodeLease, k.setLeaseOwner)
	controller.Run(ctx)
}

func (k *kubelet) setLeaseOwner(l *coordinationv1.Lease) error {
	if len(l.OwnerReferences) > 0 {
		return nil
	}
	node, err := k.client.CoreV1().Nodes().Get(context.TODO(), k.s.nodeName, metav1.GetOptions{})
	if err != nil {
		return err
	}
	l.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: node.Name, UID: node.UID}}
	return nil
}

// --- helpers ------------------------------------------------------------------------------------

// The key usages the kubelet asks for: key encipherment only for RSA keys.
func clientUsages(key any) []certificatesv1.KeyUsage {
	return usagesFor(key, certificatesv1.UsageClientAuth)
}

func servingUsages(key any) []certificatesv1.KeyUsage {
	return usagesFor(key, certificatesv1.UsageServerAuth)
}

func usagesFor(key any, purpose certificatesv1.KeyUsage) []certificatesv1.KeyUsage {
	usages := []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature}
	if _, ok := key.(*rsa.PrivateKey); ok {
		usages = append(usages, certificatesv1.UsageKeyEncipherment)
	}
	return append(usages, purpose)
}
