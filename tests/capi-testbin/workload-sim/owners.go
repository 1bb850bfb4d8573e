package main

// Where a MAAS machine belongs: read from the MAAS simulator's test state and
// from the management cluster's MaasMachines and Machines.

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
)

// maasMachine is what workload-sim needs of one machine in /_sim/state.
type maasMachine struct {
	SystemID    string   `json:"system_id"`
	Hostname    string   `json:"hostname"`
	StatusName  string   `json:"status_name"`
	PowerState  string   `json:"power_state"`
	IPAddresses []string `json:"ip_addresses"`
}

type maasClient struct {
	stateURL string
	http     *http.Client
}

func newMaasClient(base string) *maasClient {
	return &maasClient{
		stateURL: strings.TrimSuffix(strings.TrimSuffix(base, "/"), "/MAAS") + "/_sim/state",
		http:     &http.Client{Timeout: 5 * time.Second},
	}
}

func (c *maasClient) machines(ctx context.Context) ([]maasMachine, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.stateURL, nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: HTTP %d", c.stateURL, resp.StatusCode)
	}
	var state struct {
		Machines []maasMachine `json:"machines"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&state); err != nil {
		return nil, fmt.Errorf("decoding %s: %w", c.stateURL, err)
	}
	return state.Machines, nil
}

// owner is the Cluster API side of a MAAS machine.
type owner struct {
	Namespace    string
	MaasMachine  string
	Machine      string
	Cluster      string
	ControlPlane bool
	// The Machine's Kubernetes version, reported by the Node as kubelet's.
	Version string
}

func (o owner) clusterKey() string { return o.Namespace + "/" + o.Cluster }

var maasMachineList = schema.GroupVersionKind{
	Group: "infrastructure.cluster.x-k8s.io", Version: "v1beta1", Kind: "MaasMachineList",
}

// ownersBySystemID joins every MaasMachine that has a spec.systemID with
// the Machine whose infrastructureRef names it.
func (s *simulator) ownersBySystemID(ctx context.Context) (map[string]owner, error) {
	var machines clusterv1.MachineList
	if err := s.mgmt.List(ctx, &machines); err != nil {
		return nil, fmt.Errorf("listing Machines: %w", err)
	}
	byInfra := map[string]*clusterv1.Machine{}
	for i := range machines.Items {
		m := &machines.Items[i]
		if m.Spec.InfrastructureRef.Kind == "MaasMachine" {
			byInfra[m.Namespace+"/"+m.Spec.InfrastructureRef.Name] = m
		}
	}

	maasMachines := &unstructured.UnstructuredList{}
	maasMachines.SetGroupVersionKind(maasMachineList)
	if err := s.mgmt.List(ctx, maasMachines); err != nil {
		return nil, fmt.Errorf("listing MaasMachines: %w", err)
	}
	out := map[string]owner{}
	for _, mm := range maasMachines.Items {
		systemID, _, _ := unstructured.NestedString(mm.Object, "spec", "systemID")
		if systemID == "" {
			continue
		}
		m, ok := byInfra[mm.GetNamespace()+"/"+mm.GetName()]
		if !ok {
			continue
		}
		_, controlPlane := m.Labels[clusterv1.MachineControlPlaneLabel]
		out[systemID] = owner{
			Namespace:    m.Namespace,
			MaasMachine:  mm.GetName(),
			Machine:      m.Name,
			Cluster:      m.Spec.ClusterName,
			ControlPlane: controlPlane,
			Version:      m.Spec.Version,
		}
	}
	return out, nil
}

// endpointHost is the Cluster's spec.controlPlaneEndpoint.host (the API
// server DNS name capmaas manages), empty while unset.
func (s *simulator) endpointHost(ctx context.Context, namespace, cluster string) (string, error) {
	var c clusterv1.Cluster
	if err := s.mgmt.Get(ctx, client.ObjectKey{Namespace: namespace, Name: cluster}, &c); err != nil {
		return "", fmt.Errorf("reading Cluster %s/%s: %w", namespace, cluster, err)
	}
	return c.Spec.ControlPlaneEndpoint.Host, nil
}
