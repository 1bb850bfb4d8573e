package main

// What booting a machine leaves in its workload cluster, modelled on the
// in-memory provider's machine backend
// (test/infrastructure/docker/internal/controllers/backends/inmemory):
// the same objects, names, labels and etcd annotations, because that is
// what KCP reads.

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"github.com/blang/semver/v4"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cloudv1 "sigs.k8s.io/cluster-api/test/infrastructure/inmemory/pkg/cloud/api/v1alpha1"
	inmemoryruntime "sigs.k8s.io/cluster-api/test/infrastructure/inmemory/pkg/runtime"
)

// machine is one booted MAAS machine.
type machine struct {
	maas     maasMachine
	owner    owner
	ip       string
	server   *workloadServer
	api      *apiListener // control-plane machines only
	bootedAt time.Time
	down     bool // powered off by MAAS while Deployed; guarded by simulator.mu
}

func (m *machine) state() stateMachine {
	out := stateMachine{
		SystemID:     m.maas.SystemID,
		Hostname:     m.maas.Hostname,
		IP:           m.ip,
		Namespace:    m.owner.Namespace,
		Cluster:      m.owner.Cluster,
		Machine:      m.owner.Machine,
		ControlPlane: m.owner.ControlPlane,
		BootedAt:     m.bootedAt,
	}
	if m.api != nil {
		out.APIServer = m.api.address
	}
	out.Down = m.down
	return out
}

// Names of the static pods kubeadm runs on a control-plane node; KCP finds
// them as `<component>-<node name>` in kube-system.
var staticPods = []string{"etcd", "kube-apiserver", "kube-scheduler", "kube-controller-manager"}

func staticPodName(component, node string) string { return component + "-" + node }

// boot registers the machine in its workload cluster; every step is safe to
// repeat, so a failed boot is simply tried again on the next poll.
func (s *simulator) boot(ctx context.Context, mm maasMachine, o owner) error {
	ws, err := s.workloadServerFor(ctx, o)
	if err != nil {
		return err
	}
	ip := ""
	if len(mm.IPAddresses) > 0 {
		ip = mm.IPAddresses[0]
	}
	m := &machine{maas: mm, owner: o, ip: ip, server: ws}
	if o.ControlPlane {
		if ip == "" {
			return fmt.Errorf("control-plane machine %s has no IP address", mm.Hostname)
		}
		if err := ws.loadCAs(ctx, s.mgmt, o); err != nil {
			return err
		}
		host, err := s.endpointHost(ctx, o.Namespace, o.Cluster)
		if err != nil {
			return err
		}
		if err := s.startControlPlane(ctx, ws, mm.Hostname, ip, o, host); err != nil {
			return err
		}
		api, err := ws.serveAPI(s.log, ip, s.apiPort, host)
		if err != nil {
			return err
		}
		m.api = api
	}
	// Like kubelet: the Node registers once the API server answers.
	if err := createIfMissing(ctx, ws.client, node(mm.Hostname, ip, o)); err != nil {
		if m.api != nil {
			m.api.close()
		}
		return fmt.Errorf("registering Node %s: %w", mm.Hostname, err)
	}
	m.bootedAt = time.Now()
	s.mu.Lock()
	s.booted[mm.SystemID] = m
	s.mu.Unlock()
	s.log.Info("machine booted", "hostname", mm.Hostname, "ip", ip, "cluster", o.clusterKey(),
		"machine", o.Machine, "controlPlane", o.ControlPlane, "apiServer", m.state().APIServer)
	return nil
}

// powerOff: the machine's API server refuses new connections, its Node and
// static pods leave the workload cluster.
func (s *simulator) powerOff(ctx context.Context, m *machine) {
	if m.api != nil {
		m.api.close()
	}
	c := m.server.client
	objects := []client.Object{&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: m.maas.Hostname}}}
	if m.owner.ControlPlane {
		for _, component := range staticPods {
			objects = append(objects, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{
				Namespace: metav1.NamespaceSystem, Name: staticPodName(component, m.maas.Hostname),
			}})
		}
		m.server.removeEtcdMember(staticPodName("etcd", m.maas.Hostname))
	}
	for _, obj := range objects {
		if err := c.Delete(ctx, obj); err != nil && !apierrors.IsNotFound(err) {
			s.log.Error(err, "deleting from the workload cluster", "name", obj.GetName())
		}
	}
	s.mu.Lock()
	delete(s.booted, m.maas.SystemID)
	// A new deployment is a fresh operating system: no fault survives it.
	delete(s.faults, m.maas.SystemID)
	s.mu.Unlock()
	s.log.Info("machine powered off", "hostname", m.maas.Hostname, "ip", m.ip, "cluster", m.owner.clusterKey())
}

// node is the Node kubelet registers: Ready, no providerID (capmaas sets
// it), the uninitialized taint CABPK's kubeadm configuration asks for
// (Cluster API removes it), and kubeadm's control-plane label and taint.
func node(hostname, ip string, o owner) *corev1.Node {
	condition := func(t corev1.NodeConditionType, status corev1.ConditionStatus, reason string) corev1.NodeCondition {
		return corev1.NodeCondition{Type: t, Status: status, Reason: reason, LastTransitionTime: metav1.Now(), LastHeartbeatTime: metav1.Now()}
	}
	n := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name: hostname,
			Labels: map[string]string{
				"kubernetes.io/hostname": hostname,
				"kubernetes.io/os":       "linux",
				"kubernetes.io/arch":     "amd64",
			},
		},
		Spec: corev1.NodeSpec{Taints: []corev1.Taint{
			{Key: "node.cluster.x-k8s.io/uninitialized", Effect: corev1.TaintEffectNoSchedule},
		}},
		Status: corev1.NodeStatus{
			Conditions: []corev1.NodeCondition{
				condition(corev1.NodeReady, corev1.ConditionTrue, "KubeletReady"),
				condition(corev1.NodeMemoryPressure, corev1.ConditionFalse, "KubeletHasSufficientMemory"),
				condition(corev1.NodeDiskPressure, corev1.ConditionFalse, "KubeletHasNoDiskPressure"),
				condition(corev1.NodePIDPressure, corev1.ConditionFalse, "KubeletHasSufficientPID"),
			},
			Addresses: []corev1.NodeAddress{{Type: corev1.NodeHostName, Address: hostname}},
			NodeInfo: corev1.NodeSystemInfo{
				KubeletVersion:  o.Version,
				OperatingSystem: "linux",
				Architecture:    "amd64",
			},
		},
	}
	if ip != "" {
		n.Status.Addresses = append(n.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: ip})
	}
	if o.ControlPlane {
		n.Labels["node-role.kubernetes.io/control-plane"] = ""
		n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: "node-role.kubernetes.io/control-plane", Effect: corev1.TaintEffectNoSchedule})
	}
	return n
}

// startControlPlane does what `kubeadm init` / `kubeadm join
// --control-plane` leaves behind: the static pods, the etcd member, and on
// the first machine the cluster-wide kubeadm objects.
func (s *simulator) startControlPlane(ctx context.Context, ws *workloadServer, hostname, ip string, o owner, endpointHost string) error {
	c := ws.client
	etcdName := staticPodName("etcd", hostname)
	var etcdPod corev1.Pod
	err := c.Get(ctx, client.ObjectKey{Namespace: metav1.NamespaceSystem, Name: etcdName}, &etcdPod)
	switch {
	case apierrors.IsNotFound(err):
		pod := staticPod("etcd", hostname)
		annotations, err := newEtcdMember(ctx, c)
		if err != nil {
			return err
		}
		pod.Annotations = annotations
		if err := createIfMissing(ctx, c, pod); err != nil {
			return fmt.Errorf("creating Pod %s: %w", etcdName, err)
		}
	case err != nil:
		return fmt.Errorf("reading Pod %s: %w", etcdName, err)
	}
	if err := ws.addEtcdMember(etcdName, ip); err != nil {
		return err
	}
	for _, component := range staticPods[1:] {
		if err := createIfMissing(ctx, c, staticPod(component, hostname)); err != nil {
			return fmt.Errorf("creating Pod %s: %w", staticPodName(component, hostname), err)
		}
	}
	for _, obj := range kubeadmObjects(o.Version, endpointHost) {
		if err := createIfMissing(ctx, c, obj); err != nil {
			return fmt.Errorf("creating %T %s: %w", obj, obj.GetName(), err)
		}
	}
	return nil
}

func staticPod(component, hostname string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: metav1.NamespaceSystem,
			Name:      staticPodName(component, hostname),
			Labels:    map[string]string{"component": component, "tier": "control-plane"},
		},
		Spec: corev1.PodSpec{NodeName: hostname},
		Status: corev1.PodStatus{
			Phase:      corev1.PodRunning,
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}},
		},
	}
}

// newEtcdMember returns the annotations of a new member of the emulated
// etcd cluster: the cluster's ID (a new one for the first member), a
// unique member ID, and leadership when the cluster has no leader yet.
func newEtcdMember(ctx context.Context, c inmemoryruntime.Client) (map[string]string, error) {
	var pods corev1.PodList
	if err := c.List(ctx, &pods, client.InNamespace(metav1.NamespaceSystem),
		client.MatchingLabels{"component": "etcd", "tier": "control-plane"}); err != nil {
		return nil, fmt.Errorf("listing etcd members: %w", err)
	}
	clusterID := ""
	members := map[string]bool{}
	hasLeader := false
	for _, pod := range pods.Items {
		if _, removed := pod.Annotations[cloudv1.EtcdMemberRemoved]; removed {
			continue
		}
		if clusterID == "" {
			clusterID = pod.Annotations[cloudv1.EtcdClusterIDAnnotationName]
		}
		members[pod.Annotations[cloudv1.EtcdMemberIDAnnotationName]] = true
		if pod.Annotations[cloudv1.EtcdLeaderFromAnnotationName] != "" {
			hasLeader = true
		}
	}
	if clusterID == "" {
		clusterID = strconv.FormatUint(uint64(rand.Uint32N(1<<31-1)+1), 10)
	}
	memberID := ""
	for memberID == "" || members[memberID] {
		memberID = strconv.FormatUint(uint64(rand.Uint32N(1<<31-1)+1), 10)
	}
	annotations := map[string]string{
		cloudv1.EtcdClusterIDAnnotationName: clusterID,
		cloudv1.EtcdMemberIDAnnotationName:  memberID,
	}
	if !hasLeader {
		annotations[cloudv1.EtcdLeaderFromAnnotationName] = time.Now().Format(time.RFC3339)
	}
	return annotations, nil
}

// kubeadmObjects are the cluster-wide objects `kubeadm init` creates that
// KCP reads or updates: the kubeadm-config ClusterConfiguration (in the
// kubeadm API version of that Kubernetes release), kubeadm's RBAC, the
// kube-proxy DaemonSet and CoreDNS.
func kubeadmObjects(version, endpointHost string) []client.Object {
	apiVersion := "kubeadm.k8s.io/v1beta3"
	if v, err := semver.ParseTolerant(version); err == nil && v.GTE(semver.MustParse("1.31.0")) {
		apiVersion = "kubeadm.k8s.io/v1beta4"
	}
	clusterConfiguration := strings.Join([]string{
		"apiVersion: " + apiVersion,
		"kind: ClusterConfiguration",
		"kubernetesVersion: " + version,
		"controlPlaneEndpoint: " + endpointHost + ":6443",
		"",
	}, "\n")
	labels := map[string]string{"component": "kube-proxy"}
	return []client.Object{
		&rbacv1.ClusterRole{
			ObjectMeta: metav1.ObjectMeta{Name: "kubeadm:get-nodes"},
			Rules:      []rbacv1.PolicyRule{{Verbs: []string{"get"}, APIGroups: []string{""}, Resources: []string{"nodes"}}},
		},
		&rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "kubeadm:get-nodes"},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "kubeadm:get-nodes"},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.GroupKind, Name: "system:bootstrappers:kubeadm:default-node-token"}},
		},
		&corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceSystem, Name: "kubeadm-config"},
			Data:       map[string]string{"ClusterConfiguration": clusterConfiguration},
		},
		&appsv1.DaemonSet{
			ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceSystem, Name: "kube-proxy", Labels: labels},
			Spec: appsv1.DaemonSetSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
				Containers: []corev1.Container{{Name: "kube-proxy", Image: "registry.k8s.io/kube-proxy:" + version}},
			}}},
		},
		&corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceSystem, Name: "coredns"},
			Data:       map[string]string{"Corefile": ".:53 {\n    forward . /etc/resolv.conf\n}\n"},
		},
		&appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceSystem, Name: "coredns"},
			Spec: appsv1.DeploymentSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
				Containers: []corev1.Container{{Name: "coredns", Image: "registry.k8s.io/coredns/coredns:v1.10.1"}},
			}}},
		},
	}
}

func createIfMissing(ctx context.Context, c inmemoryruntime.Client, obj client.Object) error {
	if err := c.Create(ctx, obj); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	return nil
}
