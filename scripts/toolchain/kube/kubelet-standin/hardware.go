package main

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// hardware is what cAdvisor would report: CPU threads from cpuinfo, memory from meminfo, and the
// filesystem under the kubelet's root dir for ephemeral storage. On a simulated box /proc/cpuinfo
// and /proc/meminfo describe the box's own hardware (vendorsim binds them over /proc, as lxcfs does).
type hardware struct {
	threads       int64
	memoryBytes   int64
	storageBytes  int64
	kernelVersion string
	osImage       string
	bootID        string
}

func readHardware(procDir, rootDir string) (hardware, error) {
	var hw hardware
	cpuinfo, err := os.Open(filepath.Join(procDir, "cpuinfo"))
	if err != nil {
		return hw, fmt.Errorf("reading the CPU count: %w", err)
	}
	defer cpuinfo.Close()
	scanner := bufio.NewScanner(cpuinfo)
	for scanner.Scan() {
		if key, _, ok := strings.Cut(scanner.Text(), ":"); ok && strings.TrimSpace(key) == "processor" {
			hw.threads++
		}
	}
	if hw.threads == 0 {
		return hw, fmt.Errorf("%s lists no processor", cpuinfo.Name())
	}
	meminfo, err := os.ReadFile(filepath.Join(procDir, "meminfo"))
	if err != nil {
		return hw, fmt.Errorf("reading the memory size: %w", err)
	}
	for _, line := range strings.Split(string(meminfo), "\n") {
		fields := strings.Fields(line)
		if len(fields) >= 2 && fields[0] == "MemTotal:" {
			kib, err := strconv.ParseInt(fields[1], 10, 64)
			if err != nil {
				return hw, fmt.Errorf("meminfo MemTotal %q: %w", fields[1], err)
			}
			hw.memoryBytes = kib * 1024
		}
	}
	if hw.memoryBytes == 0 {
		return hw, fmt.Errorf("%s/meminfo has no MemTotal", procDir)
	}
	var st unix.Statfs_t
	if err := os.MkdirAll(rootDir, 0o755); err != nil {
		return hw, err
	}
	if err := unix.Statfs(rootDir, &st); err != nil {
		return hw, fmt.Errorf("statfs %s: %w", rootDir, err)
	}
	hw.storageBytes = int64(st.Blocks) * st.Bsize
	var uts unix.Utsname
	if err := unix.Uname(&uts); err == nil {
		hw.kernelVersion = unix.ByteSliceToString(uts.Release[:])
	}
	hw.osImage = "Linux"
	if data, err := os.ReadFile("/etc/os-release"); err == nil {
		for _, line := range strings.Split(string(data), "\n") {
			if v, ok := strings.CutPrefix(line, "PRETTY_NAME="); ok {
				hw.osImage = strings.Trim(v, `"`)
			}
		}
	}
	if data, err := os.ReadFile(filepath.Join(procDir, "sys/kernel/random/boot_id")); err == nil {
		hw.bootID = strings.TrimSpace(string(data))
	}
	return hw, nil
}

// capacity and allocatable as the kubelet computes them: allocatable is capacity less kubeReserved,
// systemReserved and the hard eviction thresholds.
func (hw hardware) capacity(s *settings) (corev1.ResourceList, corev1.ResourceList) {
	capacity := corev1.ResourceList{
		corev1.ResourceCPU:              *resource.NewQuantity(hw.threads, resource.DecimalSI),
		corev1.ResourceMemory:           *resource.NewQuantity(hw.memoryBytes, resource.BinarySI),
		corev1.ResourceEphemeralStorage: *resource.NewQuantity(hw.storageBytes, resource.BinarySI),
		corev1.ResourcePods:             *resource.NewQuantity(s.maxPods, resource.DecimalSI),
		"hugepages-1Gi":                 resource.MustParse("0"),
		"hugepages-2Mi":                 resource.MustParse("0"),
	}
	allocatable := corev1.ResourceList{}
	for name, q := range capacity {
		a := q.DeepCopy()
		if r, ok := s.reserved[name]; ok {
			a.Sub(r)
		}
		switch name {
		case corev1.ResourceMemory:
			a.Sub(s.evictionMemory)
		case corev1.ResourceEphemeralStorage:
			a.Sub(*resource.NewQuantity(int64(float64(hw.storageBytes)*s.evictionNodefsPct), resource.BinarySI))
		}
		if a.Sign() < 0 {
			a = resource.MustParse("0")
		}
		allocatable[name] = a
	}
	return capacity, allocatable
}

// stableID derives a machine-id-like value from the node's identity, so a box keeps its IDs across
// stand-in restarts and two boxes never share them.
func stableID(parts ...string) string {
	sum := sha256.Sum256([]byte(strings.Join(parts, "\x00")))
	return hex.EncodeToString(sum[:16])
}
