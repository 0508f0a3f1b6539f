package main

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
)

// How a test (or an operator poking a simulated box) fails a container's readiness probe: while the
// file <root-dir>/pods/<pod uid>/containers/<container>/unready exists on the box, every readiness
// probe of that container fails, honouring the probe's period, thresholds and initial delay. Only
// containers that declare a readinessProbe can become unready, as with a real kubelet.
const unreadyMarker = "unready"

// syncPeriod is how often every pod is re-evaluated (probe periods, grace periods) besides events.
const syncPeriod = 500 * time.Millisecond

type containerState struct {
	id           string
	startedAt    metav1.Time
	ready        bool
	probedAt     time.Time
	successes    int32
	failures     int32
	terminatedAt metav1.Time
	exitCode     int32
}

type podState struct {
	uid              types.UID
	ip               string
	startedAt        metav1.Time
	containers       map[string]*containerState
	terminatingSince time.Time
	deleted          bool
}

type podManager struct {
	k        *kubelet
	mu       sync.Mutex
	states   map[types.UID]*podState
	usedIPs  map[string]types.UID
	informer cache.SharedIndexInformer
}

func newPodManager(k *kubelet) *podManager {
	return &podManager{k: k, states: map[types.UID]*podState{}, usedIPs: map[string]types.UID{}}
}

func (m *podManager) run(ctx context.Context) {
	// The Node authorizer lets a node list and watch only the pods bound to it.
	factory := informers.NewSharedInformerFactoryWithOptions(m.k.client, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", m.k.s.nodeName).String()
		}))
	m.informer = factory.Core().V1().Pods().Informer()
	kick := make(chan struct{}, 1)
	poke := func(any) {
		select {
		case kick <- struct{}{}:
		default:
		}
	}
	_, _ = m.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    poke,
		UpdateFunc: func(_, obj any) { poke(obj) },
		DeleteFunc: poke,
	})
	factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), m.informer.HasSynced) {
		return
	}
	// Pods already running on this node (a restarted kubelet) keep their IPs.
	for _, obj := range m.informer.GetStore().List() {
		pod := obj.(*corev1.Pod)
		if pod.Status.PodIP != "" && !pod.Spec.HostNetwork {
			m.usedIPs[pod.Status.PodIP] = pod.UID
		}
	}
	ticker := time.NewTicker(syncPeriod)
	defer ticker.Stop()
	for {
		m.syncAll(ctx)
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		case <-kick:
		}
	}
}

func (m *podManager) syncAll(ctx context.Context) {
	seen := map[types.UID]bool{}
	for _, obj := range m.informer.GetStore().List() {
		pod := obj.(*corev1.Pod)
		seen[pod.UID] = true
		if err := m.sync(ctx, pod.DeepCopy()); err != nil {
			klog.ErrorS(err, "Error syncing pod, skipping", "pod", klog.KObj(pod), "podUID", pod.UID)
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for uid, st := range m.states {
		if !seen[uid] {
			m.forget(uid, st)
		}
	}
}

func (m *podManager) forget(uid types.UID, st *podState) {
	if st.ip != "" && m.usedIPs[st.ip] == uid {
		delete(m.usedIPs, st.ip)
	}
	delete(m.states, uid)
	// The kubelet removes the directories of pods that no longer exist.
	_ = os.RemoveAll(filepath.Join(m.k.opts.rootDir, "pods", string(uid)))
}

func (m *podManager) sync(ctx context.Context, pod *corev1.Pod) error {
	m.mu.Lock()
	st := m.states[pod.UID]
	m.mu.Unlock()
	terminal := pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed
	if st != nil && st.deleted {
		return nil
	}
	if pod.DeletionTimestamp != nil {
		return m.terminate(ctx, pod, st)
	}
	if terminal {
		return nil
	}
	if st == nil {
		var err error
		if st, err = m.admit(ctx, pod); err != nil || st == nil {
			return err
		}
	}
	return m.patchStatus(ctx, pod, m.runningStatus(pod, st))
}

// admit starts a pod: its IP, its directories on the box, its DNS configuration.
func (m *podManager) admit(ctx context.Context, pod *corev1.Pod) (*podState, error) {
	if !pod.Spec.HostNetwork && pod.Status.PodIP == "" && m.k.getPodCIDR() == "" {
		// The controller manager allocates the node's podCIDR just after registration.
		if node, err := m.k.client.CoreV1().Nodes().Get(ctx, m.k.s.nodeName, metav1.GetOptions{}); err == nil {
			m.k.setPodCIDR(node.Spec.PodCIDR)
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	st := &podState{uid: pod.UID, startedAt: metav1.Now(), containers: map[string]*containerState{}}
	if pod.Status.StartTime != nil {
		st.startedAt = *pod.Status.StartTime
	}
	if pod.Spec.HostNetwork {
		st.ip = m.k.s.nodeIP.String()
	} else if pod.Status.PodIP != "" {
		st.ip = pod.Status.PodIP
		m.usedIPs[st.ip] = pod.UID
	} else {
		ip, err := m.allocateIP(pod.UID)
		if err != nil {
			klog.InfoS("No pod IP yet", "pod", klog.KObj(pod), "reason", err.Error())
			return nil, nil
		}
		st.ip = ip
	}
	dir := filepath.Join(m.k.opts.rootDir, "pods", string(pod.UID))
	for _, c := range allContainers(pod) {
		if err := os.MkdirAll(filepath.Join(dir, "containers", c.Name), 0o750); err != nil {
			return nil, err
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "etc-hosts"), []byte(m.etcHosts(pod, st.ip)), 0o644); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, "resolv.conf"), []byte(m.resolvConf(pod)), 0o644); err != nil {
		return nil, err
	}
	m.states[pod.UID] = st
	klog.InfoS("Pod started", "pod", klog.KObj(pod), "podUID", pod.UID, "podIP", st.ip)
	return st, nil
}

// allocateIP hands out the next free address of the node's podCIDR (allocated by the controller
// manager), as host-local IPAM would. Called with m.mu held.
func (m *podManager) allocateIP(uid types.UID) (string, error) {
	cidr := m.k.getPodCIDR()
	if cidr == "" {
		return "", fmt.Errorf("the node has no spec.podCIDR yet")
	}
	_, network, err := net.ParseCIDR(cidr)
	if err != nil || network.IP.To4() == nil {
		return "", fmt.Errorf("podCIDR %q is not an IPv4 CIDR", cidr)
	}
	ones, bits := network.Mask.Size()
	base := binary.BigEndian.Uint32(network.IP.To4())
	size := uint32(1) << uint(bits-ones)
	for offset := uint32(2); offset < size-1; offset++ { // .1 is the gateway, the last the broadcast
		ip := make(net.IP, 4)
		binary.BigEndian.PutUint32(ip, base+offset)
		if _, used := m.usedIPs[ip.String()]; !used {
			m.usedIPs[ip.String()] = uid
			return ip.String(), nil
		}
	}
	return "", fmt.Errorf("podCIDR %s is exhausted", cidr)
}

func (m *podManager) etcHosts(pod *corev1.Pod, ip string) string {
	hostname := pod.Name
	if pod.Spec.Hostname != "" {
		hostname = pod.Spec.Hostname
	}
	var b strings.Builder
	b.WriteString("# Kubernetes-managed hosts file.\n127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n")
	if !pod.Spec.HostNetwork {
		fqdn := hostname
		if pod.Spec.Subdomain != "" && m.k.s.clusterDomain != "" {
			fqdn = fmt.Sprintf("%s.%s.%s.svc.%s\t%s", hostname, pod.Spec.Subdomain, pod.Namespace, m.k.s.clusterDomain, hostname)
		}
		fmt.Fprintf(&b, "%s\t%s\n", ip, fqdn)
	}
	return b.String()
}

// resolvConf is the DNS configuration the kubelet hands the runtime for the pod, by its dnsPolicy.
// ClusterFirst with no clusterDNS falls back to the node's resolv.conf with the kubelet's warning.
func (m *podManager) resolvConf(pod *corev1.Pod) string {
	policy := pod.Spec.DNSPolicy
	if policy == "" {
		policy = corev1.DNSClusterFirst
	}
	if policy == corev1.DNSClusterFirst && pod.Spec.HostNetwork {
		policy = corev1.DNSDefault
	}
	if policy == corev1.DNSClusterFirstWithHostNet {
		policy = corev1.DNSClusterFirst
	}
	hostResolv, _ := os.ReadFile("/etc/resolv.conf")
	var b strings.Builder
	switch policy {
	case corev1.DNSClusterFirst:
		if len(m.k.s.clusterDNS) == 0 {
			msg := fmt.Sprintf("kubelet does not have ClusterDNS IP configured and cannot create Pod using %q policy. Falling back to %q policy.", corev1.DNSClusterFirst, corev1.DNSDefault)
			m.k.recorder.Eventf(pod, corev1.EventTypeWarning, "MissingClusterDNS", "pod: %q. %s", pod.Namespace+"/"+pod.Name, msg)
			return string(hostResolv)
		}
		for _, ns := range m.k.s.clusterDNS {
			fmt.Fprintf(&b, "nameserver %s\n", ns)
		}
		if d := m.k.s.clusterDomain; d != "" {
			fmt.Fprintf(&b, "search %s.svc.%s svc.%s %s\n", pod.Namespace, d, d, d)
		}
		b.WriteString("options ndots:5\n")
	case corev1.DNSNone:
		if cfg := pod.Spec.DNSConfig; cfg != nil {
			for _, ns := range cfg.Nameservers {
				fmt.Fprintf(&b, "nameserver %s\n", ns)
			}
			if len(cfg.Searches) > 0 {
				fmt.Fprintf(&b, "search %s\n", strings.Join(cfg.Searches, " "))
			}
		}
	default:
		return string(hostResolv)
	}
	return b.String()
}

// --- running --------------------------------------------------------------------------------------

func allContainers(pod *corev1.Pod) []corev1.Container {
	return append(append([]corev1.Container{}, pod.Spec.InitContainers...), pod.Spec.Containers...)
}

func isSidecar(c corev1.Container) bool {
	return c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways
}

func (m *podManager) container(pod *corev1.Pod, st *podState, c corev1.Container) *containerState {
	m.mu.Lock()
	defer m.mu.Unlock()
	cs := st.containers[c.Name]
	if cs == nil {
		sum := sha256.Sum256([]byte(string(pod.UID) + "/" + c.Name))
		cs = &containerState{id: "containerd://" + hex.EncodeToString(sum[:]), startedAt: metav1.Now()}
		cs.ready = c.ReadinessProbe == nil
		st.containers[c.Name] = cs
	}
	return cs
}

// probe runs the container's readiness probe when its period is due: it fails while the unready
// marker exists, and the result flips readiness after failureThreshold / successThreshold results.
func (m *podManager) probe(pod *corev1.Pod, c corev1.Container, cs *containerState) {
	p := c.ReadinessProbe
	if p == nil {
		return
	}
	now := time.Now()
	if now.Before(cs.startedAt.Add(time.Duration(p.InitialDelaySeconds) * time.Second)) {
		return
	}
	period := time.Duration(max(p.PeriodSeconds, 1)) * time.Second
	if !cs.probedAt.IsZero() && now.Sub(cs.probedAt) < period {
		return
	}
	cs.probedAt = now
	_, err := os.Stat(filepath.Join(m.k.opts.rootDir, "pods", string(pod.UID), "containers", c.Name, unreadyMarker))
	if err == nil {
		cs.successes, cs.failures = 0, cs.failures+1
		if cs.failures >= max(p.FailureThreshold, 1) && cs.ready {
			cs.ready = false
			m.k.recorder.Eventf(pod, corev1.EventTypeWarning, "Unhealthy", "Readiness probe failed: %s exists", unreadyMarker)
		}
		return
	}
	cs.failures, cs.successes = 0, cs.successes+1
	if cs.successes >= max(p.SuccessThreshold, 1) {
		cs.ready = true
	}
}

func imageID(image string) string {
	if at := strings.Index(image, "@"); at >= 0 {
		return image
	}
	sum := sha256.Sum256([]byte(image))
	return image + "@sha256:" + hex.EncodeToString(sum[:])
}

func (m *podManager) runningStatus(pod *corev1.Pod, st *podState) corev1.PodStatus {
	status := *pod.Status.DeepCopy()
	status.Phase = corev1.PodRunning
	status.HostIP = m.k.s.nodeIP.String()
	status.HostIPs = []corev1.HostIP{{IP: status.HostIP}}
	status.PodIP = st.ip
	status.PodIPs = []corev1.PodIP{{IP: st.ip}}
	status.StartTime = &st.startedAt
	status.Reason, status.Message = "", ""
	status.ObservedGeneration = pod.Generation

	allReady := true
	status.InitContainerStatuses = nil
	for _, c := range pod.Spec.InitContainers {
		cs := m.container(pod, st, c)
		s := corev1.ContainerStatus{Name: c.Name, Image: c.Image, ImageID: imageID(c.Image), ContainerID: cs.id}
		if isSidecar(c) {
			m.probe(pod, c, cs)
			s.State = corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: cs.startedAt}}
			s.Ready, s.Started = cs.ready, ptr.To(true)
			allReady = allReady && cs.ready
		} else {
			s.State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
				ExitCode: 0, Reason: "Completed", StartedAt: st.startedAt, FinishedAt: cs.startedAt, ContainerID: cs.id}}
			s.Ready, s.Started = true, ptr.To(false)
		}
		status.InitContainerStatuses = append(status.InitContainerStatuses, s)
	}
	status.ContainerStatuses = nil
	for _, c := range pod.Spec.Containers {
		cs := m.container(pod, st, c)
		m.probe(pod, c, cs)
		allReady = allReady && cs.ready
		status.ContainerStatuses = append(status.ContainerStatuses, corev1.ContainerStatus{
			Name: c.Name, Image: c.Image, ImageID: imageID(c.Image), ContainerID: cs.id,
			State:   corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: cs.startedAt}},
			Ready:   cs.ready,
			Started: ptr.To(true),
		})
	}

	gatesReady, gateMessage := true, ""
	for _, gate := range pod.Spec.ReadinessGates {
		found := false
		for _, c := range pod.Status.Conditions {
			if c.Type == gate.ConditionType && c.Status == corev1.ConditionTrue {
				found = true
			}
		}
		if !found {
			gatesReady = false
			gateMessage = fmt.Sprintf("corresponding condition of pod readiness gate %q does not exist or is not True", gate.ConditionType)
		}
	}
	setCondition(&status, corev1.PodReadyToStartContainers, corev1.ConditionTrue, "", "")
	setCondition(&status, corev1.PodInitialized, corev1.ConditionTrue, "", "")
	if allReady {
		setCondition(&status, corev1.ContainersReady, corev1.ConditionTrue, "", "")
	} else {
		setCondition(&status, corev1.ContainersReady, corev1.ConditionFalse, "ContainersNotReady", "containers with unready status")
	}
	switch {
	case !allReady:
		setCondition(&status, corev1.PodReady, corev1.ConditionFalse, "ContainersNotReady", "containers with unready status")
	case !gatesReady:
		setCondition(&status, corev1.PodReady, corev1.ConditionFalse, "ReadinessGatesNotReady", gateMessage)
	default:
		setCondition(&status, corev1.PodReady, corev1.ConditionTrue, "", "")
	}
	return status
}

func setCondition(status *corev1.PodStatus, t corev1.PodConditionType, s corev1.ConditionStatus, reason, message string) {
	for i := range status.Conditions {
		c := &status.Conditions[i]
		if c.Type == t {
			if c.Status != s {
				c.LastTransitionTime = metav1.Now()
			}
			c.Status, c.Reason, c.Message = s, reason, message
			c.ObservedGeneration = status.ObservedGeneration
			return
		}
	}
	status.Conditions = append(status.Conditions, corev1.PodCondition{
		Type: t, Status: s, Reason: reason, Message: message, LastTransitionTime: metav1.Now(),
		ObservedGeneration: status.ObservedGeneration})
}

// patchStatus sends the difference as a strategic merge patch with a UID precondition, as the
// kubelet's status manager does, through the node's own credentials.
func (m *podManager) patchStatus(ctx context.Context, pod *corev1.Pod, status corev1.PodStatus) error {
	if reflect.DeepEqual(normalized(pod.Status), normalized(status)) {
		return nil
	}
	oldJSON, err := json.Marshal(corev1.Pod{ObjectMeta: metav1.ObjectMeta{UID: pod.UID}, Status: pod.Status})
	if err != nil {
		return err
	}
	newJSON, err := json.Marshal(corev1.Pod{ObjectMeta: metav1.ObjectMeta{UID: pod.UID}, Status: status})
	if err != nil {
		return err
	}
	patch, err := strategicpatch.CreateTwoWayMergePatch(oldJSON, newJSON, corev1.Pod{})
	if err != nil {
		return err
	}
	patch, err = withUIDPrecondition(patch, pod.UID)
	if err != nil {
		return err
	}
	_, err = m.k.client.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status")
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil // gone or replaced: the next sync sees the new object
	}
	return err
}

func withUIDPrecondition(patch []byte, uid types.UID) ([]byte, error) {
	var doc map[string]any
	if err := json.Unmarshal(patch, &doc); err != nil {
		return nil, err
	}
	meta, _ := doc["metadata"].(map[string]any)
	if meta == nil {
		meta = map[string]any{}
	}
	meta["uid"] = string(uid)
	doc["metadata"] = meta
	return json.Marshal(doc)
}

// normalized drops what the API rounds (times to the second) so an unchanged status is not re-sent.
func normalized(s corev1.PodStatus) string {
	data, _ := json.Marshal(s)
	var doc any
	_ = json.Unmarshal(data, &doc)
	data, _ = json.Marshal(doc)
	return string(data)
}

// --- termination ------------------------------------------------------------------------------------

var sleepCommand = regexp.MustCompile(`(?:^|[\s;&|(])sleep\s+([0-9]+)(?:s)?(?:$|[\s;&|)])`)

// preStopSeconds is how long the container's preStop hook takes: a sleep action's seconds, or the
// N of a `sleep N` its exec command runs (the stand-in runs no commands); 0 for anything else.
func preStopSeconds(c corev1.Container) int64 {
	if c.Lifecycle == nil || c.Lifecycle.PreStop == nil {
		return 0
	}
	h := c.Lifecycle.PreStop
	if h.Sleep != nil {
		return h.Sleep.Seconds
	}
	if h.Exec != nil {
		if match := sleepCommand.FindStringSubmatch(strings.Join(h.Exec.Command, " ")); match != nil {
			n, _ := strconv.ParseInt(match[1], 10, 64)
			return n
		}
	}
	return 0
}

// terminate runs a deleted pod's shutdown as the kubelet does: each container runs its preStop hook
// and then stops on SIGTERM, or is killed when the grace period ends; readiness probes keep running
// meanwhile. Once every container has stopped, the node writes the terminal status and deletes the
// pod for good (grace 0, UID precondition).
func (m *podManager) terminate(ctx context.Context, pod *corev1.Pod, st *podState) error {
	if st == nil {
		// Never started here (deleted before it ran, or before this kubelet started): nothing to stop.
		m.mu.Lock()
		st = &podState{uid: pod.UID, startedAt: metav1.Now(), containers: map[string]*containerState{}, terminatingSince: time.Now()}
		m.states[pod.UID] = st
		m.mu.Unlock()
	} else if st.terminatingSince.IsZero() {
		st.terminatingSince = time.Now()
		klog.InfoS("Killing pod", "pod", klog.KObj(pod), "gracePeriod", gracePeriod(pod))
	}
	grace := time.Duration(gracePeriod(pod)) * time.Second
	elapsed := time.Since(st.terminatingSince)
	status := pod.Status.DeepCopy()
	if len(st.containers) > 0 && pod.Status.Phase == corev1.PodRunning {
		running := m.runningStatus(pod, st)
		status = &running
	}
	done := true
	for i := range status.ContainerStatuses {
		cs := &status.ContainerStatuses[i]
		state := st.containers[cs.Name]
		if state == nil || cs.State.Running == nil {
			continue
		}
		var spec corev1.Container
		for _, c := range pod.Spec.Containers {
			if c.Name == cs.Name {
				spec = c
			}
		}
		hook := time.Duration(preStopSeconds(spec)) * time.Second
		stopAt := min(hook, grace)
		if elapsed < stopAt {
			done = false
			continue
		}
		if state.terminatedAt.IsZero() {
			state.terminatedAt = metav1.Now()
			if hook >= grace && hook > 0 {
				state.exitCode = 137 // still in its preStop hook when the grace period ended: SIGKILL
			}
		}
	}
	if !done {
		return m.patchStatus(ctx, pod, *status)
	}
	final := m.terminalStatus(pod, st, *status)
	if err := m.patchStatus(ctx, pod, final); err != nil {
		return err
	}
	err := m.k.client.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{
		GracePeriodSeconds: ptr.To[int64](0),
		Preconditions:      &metav1.Preconditions{UID: &pod.UID},
	})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return err
	}
	klog.InfoS("Pod deleted", "pod", klog.KObj(pod), "podUID", pod.UID, "after", time.Since(st.terminatingSince).Round(time.Millisecond))
	m.mu.Lock()
	st.deleted = true
	m.mu.Unlock()
	return nil
}

func gracePeriod(pod *corev1.Pod) int64 {
	if pod.DeletionGracePeriodSeconds != nil {
		return *pod.DeletionGracePeriodSeconds
	}
	if pod.Spec.TerminationGracePeriodSeconds != nil {
		return *pod.Spec.TerminationGracePeriodSeconds
	}
	return corev1.DefaultTerminationGracePeriodSeconds
}

func (m *podManager) terminalStatus(pod *corev1.Pod, st *podState, status corev1.PodStatus) corev1.PodStatus {
	failed := false
	for i := range status.ContainerStatuses {
		cs := &status.ContainerStatuses[i]
		state := st.containers[cs.Name]
		if state == nil {
			continue
		}
		reason := "Completed"
		if state.exitCode != 0 {
			reason, failed = "Error", true
		}
		finished := state.terminatedAt
		if finished.IsZero() {
			finished = metav1.Now()
		}
		cs.State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
			ExitCode: state.exitCode, Reason: reason, StartedAt: state.startedAt, FinishedAt: finished, ContainerID: state.id}}
		cs.Ready, cs.Started = false, ptr.To(false)
	}
	status.Phase = corev1.PodSucceeded
	if failed {
		status.Phase = corev1.PodFailed
	}
	setCondition(&status, corev1.PodReadyToStartContainers, corev1.ConditionFalse, "", "")
	setCondition(&status, corev1.ContainersReady, corev1.ConditionFalse, "PodCompleted", "")
	setCondition(&status, corev1.PodReady, corev1.ConditionFalse, "PodCompleted", "")
	return status
}
