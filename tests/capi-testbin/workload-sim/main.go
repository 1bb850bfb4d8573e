// Command workload-sim plays the machines of the KCP lab (tests/kcp_lab.rs):
// what cloud-init, kubeadm and kubelet would do on a MAAS machine once MAAS
// has deployed it, on Cluster API's in-memory workload cluster server.
//
// Every poll it reads the MAAS simulator's machines (GET /_sim/state). A
// machine that turned Deployed and belongs to a MaasMachine (matched by
// spec.systemID) "boots":
//
//   - every machine registers its Node, named after its MAAS hostname (as
//     kubelet would with the template's `{{ v1.local_hostname }}`), Ready,
//     without a providerID: capmaas sets that;
//   - a control-plane machine (its Machine has the control-plane label) also
//     starts its static pods the way kubeadm does (etcd, kube-apiserver,
//     kube-scheduler, kube-controller-manager), joins the emulated etcd
//     cluster, and serves the workload API on its own IP at --api-port,
//     with a serving certificate for that IP and the cluster's endpoint
//     name, signed by the cluster CA that KCP generated (`<cluster>-ca`,
//     `<cluster>-etcd` Secrets in the management cluster).
//
// A booted machine that MAAS no longer reports Deployed (released, or gone)
// "powers off": its API server refuses new connections (see
// apiListener.close for why open ones stay), and its Node and static pods
// disappear from the workload cluster.
//
// A Deployed machine whose MAAS power_state turns "off" (a power cycle)
// stops its kubelet (the Node goes Ready=Unknown, its API server refuses
// connections) and starts it again when MAAS reports it on; see health.go
// for the Node faults the tests inject with POST /health.
//
// The workload clusters are the in-memory ones of
// sigs.k8s.io/cluster-api/test/infrastructure/inmemory: one resource group
// per Cluster, served by that package's API server and etcd handlers (the
// ones its WorkloadClustersMux serves). The mux's own listener is not used:
// it serves one port for all control-plane machines with a certificate for
// its own address only, while here each machine answers on its IP:6443 and
// clients reach the cluster through its DNS name.
//
// GET /state on --status-addr lists the booted machines as JSON; POST
// /health sets a Node's Ready condition (health.go).
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sort"
	"sync"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/klog/v2/textlogger"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	cloudv1 "sigs.k8s.io/cluster-api/test/infrastructure/inmemory/pkg/cloud/api/v1alpha1"
	inmemoryruntime "sigs.k8s.io/cluster-api/test/infrastructure/inmemory/pkg/runtime"
)

func main() {
	maasURL := flag.String("maas-sim", "", "base URL of the MAAS simulator (its /_sim/state is polled)")
	apiPort := flag.Int("api-port", 6443, "port of the workload API server on each control-plane machine's IP")
	statusAddr := flag.String("status-addr", "127.0.0.1:0", "address of the GET /state endpoint")
	poll := flag.Duration("poll", 250*time.Millisecond, "how often MAAS is read")
	verbosity := flag.Int("v", 1, "log verbosity (4 logs every workload API request)")
	flag.Parse()
	// --kubeconfig (the management cluster) is controller-runtime's flag.
	if kubeconfig := flag.Lookup("kubeconfig"); kubeconfig == nil || kubeconfig.Value.String() == "" || *maasURL == "" {
		fmt.Fprintln(os.Stderr, "usage: workload-sim --kubeconfig FILE --maas-sim URL [--api-port 6443] [--status-addr ADDR]")
		os.Exit(2)
	}

	log := textlogger.NewLogger(textlogger.NewConfig(textlogger.Verbosity(*verbosity)))
	ctrl.SetLogger(log)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx = ctrl.LoggerInto(ctx, log)

	sim, err := newSimulator(ctx, log, *maasURL, *apiPort)
	if err != nil {
		log.Error(err, "starting")
		os.Exit(1)
	}
	listener, err := net.Listen("tcp", *statusAddr)
	if err != nil {
		log.Error(err, "listening for /state", "address", *statusAddr)
		os.Exit(1)
	}
	fmt.Printf("GET http://%s/state lists the booted machines\n", listener.Addr())
	mux := http.NewServeMux()
	mux.HandleFunc("GET /state", sim.serveState)
	mux.HandleFunc("POST /health", sim.serveHealth)
	status := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = status.Serve(listener) }()

	ticker := time.NewTicker(*poll)
	defer ticker.Stop()
	for {
		sim.step(ctx)
		select {
		case <-ctx.Done():
			sim.powerOffAll(context.Background())
			_ = status.Close()
			return
		case <-ticker.C:
		}
	}
}

// simulator holds the booted machines and the workload clusters.
type simulator struct {
	log      logr.Logger
	mgmt     client.Client
	maas     *maasClient
	inmemory inmemoryruntime.Manager
	apiPort  int

	mu       sync.Mutex
	booted   map[string]*machine        // by MAAS system_id
	clusters map[string]*workloadServer // by "<namespace>/<cluster>"
	// Machines seen Deployed that could not boot yet, with the reason
	// (logged once per reason).
	waiting map[string]string
	// Node faults set through POST /health, by MAAS system_id.
	faults map[string]fault
}

func newSimulator(ctx context.Context, log logr.Logger, maasURL string, apiPort int) (*simulator, error) {
	restConfig, err := ctrl.GetConfig()
	if err != nil {
		return nil, fmt.Errorf("reading the management cluster's kubeconfig: %w", err)
	}
	restConfig.UserAgent = "workload-sim"
	restConfig.Timeout = 10 * time.Second
	mgmtScheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(mgmtScheme); err != nil {
		return nil, err
	}
	if err := clusterv1.AddToScheme(mgmtScheme); err != nil {
		return nil, err
	}
	mgmt, err := client.New(restConfig, client.Options{Scheme: mgmtScheme})
	if err != nil {
		return nil, fmt.Errorf("management cluster client: %w", err)
	}

	// The workload clusters' scheme, as the in-memory provider registers it.
	workloadScheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{
		cloudv1.AddToScheme, corev1.AddToScheme, appsv1.AddToScheme, rbacv1.AddToScheme,
	} {
		if err := add(workloadScheme); err != nil {
			return nil, err
		}
	}
	inmemory := inmemoryruntime.NewManager(workloadScheme)
	if err := inmemory.Start(ctx); err != nil {
		return nil, fmt.Errorf("starting the in-memory runtime: %w", err)
	}
	return &simulator{
		log:      log,
		mgmt:     mgmt,
		maas:     newMaasClient(maasURL),
		inmemory: inmemory,
		apiPort:  apiPort,
		booted:   map[string]*machine{},
		clusters: map[string]*workloadServer{},
		waiting:  map[string]string{},
		faults:   map[string]fault{},
	}, nil
}

// step compares MAAS with what is booted: boots what turned Deployed,
// powers off what left that state.
func (s *simulator) step(ctx context.Context) {
	maasMachines, err := s.maas.machines(ctx)
	if err != nil {
		s.log.Error(err, "reading the MAAS simulator")
		return
	}
	deployed := map[string]maasMachine{}
	for _, m := range maasMachines {
		if m.StatusName == "Deployed" {
			deployed[m.SystemID] = m
		}
	}
	for id, m := range s.bootedMachines() {
		mm, ok := deployed[id]
		switch {
		case !ok:
			s.powerOff(ctx, m)
		case mm.PowerState == "off" && !s.isDown(id):
			s.stopKubelet(ctx, m)
		case mm.PowerState == "on" && s.isDown(id):
			s.startKubelet(ctx, m)
		}
	}
	var toBoot []maasMachine
	for id, m := range deployed {
		if !s.isBooted(id) && m.PowerState != "off" {
			toBoot = append(toBoot, m)
		}
	}
	if len(toBoot) == 0 {
		return
	}
	// Only now read the management cluster: most polls change nothing.
	owners, err := s.ownersBySystemID(ctx)
	if err != nil {
		s.log.Error(err, "reading MaasMachines and Machines")
		return
	}
	sort.Slice(toBoot, func(i, j int) bool { return toBoot[i].Hostname < toBoot[j].Hostname })
	for _, m := range toBoot {
		owner, ok := owners[m.SystemID]
		if !ok {
			s.wait(m, "no MaasMachine has this systemID (yet)")
			continue
		}
		if err := s.boot(ctx, m, owner); err != nil {
			s.wait(m, err.Error())
			continue
		}
		delete(s.waiting, m.SystemID)
	}
}

func (s *simulator) wait(m maasMachine, why string) {
	if s.waiting[m.SystemID] != why {
		s.log.Info("Deployed machine not booted yet", "hostname", m.Hostname, "systemID", m.SystemID, "reason", why)
		s.waiting[m.SystemID] = why
	}
}

func (s *simulator) bootedMachines() map[string]*machine {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]*machine, len(s.booted))
	for k, v := range s.booted {
		out[k] = v
	}
	return out
}

func (s *simulator) isBooted(systemID string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.booted[systemID]
	return ok
}

func (s *simulator) powerOffAll(ctx context.Context) {
	for _, m := range s.bootedMachines() {
		s.powerOff(ctx, m)
	}
}

// stateMachine is one booted machine in GET /state.
type stateMachine struct {
	SystemID     string    `json:"systemID"`
	Hostname     string    `json:"hostname"`
	IP           string    `json:"ip"`
	Namespace    string    `json:"namespace"`
	Cluster      string    `json:"cluster"`
	Machine      string    `json:"machine"`
	ControlPlane bool      `json:"controlPlane"`
	APIServer    string    `json:"apiServer,omitempty"`
	BootedAt     time.Time `json:"bootedAt"`
	// Powered off by MAAS while Deployed (a power cycle): kubelet stopped.
	Down bool `json:"down,omitempty"`
}

func (s *simulator) serveState(w http.ResponseWriter, _ *http.Request) {
	s.mu.Lock()
	out := struct {
		Machines []stateMachine `json:"machines"`
	}{Machines: []stateMachine{}}
	for _, m := range s.booted {
		out.Machines = append(out.Machines, m.state())
	}
	s.mu.Unlock()
	sort.Slice(out.Machines, func(i, j int) bool { return out.Machines[i].Hostname < out.Machines[j].Hostname })
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(out)
}
