package main

// Node health for the remediation tests: what a sick kubelet, a power
// cycle and a reboot do to a Node's Ready condition.
//
//   POST /health {"hostname": "worker-3", "ready": "False", "rebootHeals": true}
//
// sets the Node's Ready condition now ("False": the kubelet reports
// NotReady; "Unknown": it stopped posting; "True": healthy again, the fault
// cleared) and remembers the fault. When MAAS powers the machine off while
// it stays Deployed (a power cycle), its kubelet stops: Ready turns Unknown
// and a control plane's API server refuses connections. When MAAS powers it
// on again, the kubelet reports Ready=True if the fault was one a reboot
// heals (`rebootHeals`), else the fault's status again. A release clears the
// fault: the next deployment is a fresh operating system.

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// fault is a Node problem set through POST /health.
type fault struct {
	ready       corev1.ConditionStatus // False or Unknown
	rebootHeals bool
}

type healthRequest struct {
	Hostname    string `json:"hostname"`
	Ready       string `json:"ready"`
	RebootHeals bool   `json:"rebootHeals"`
}

func (s *simulator) serveHealth(w http.ResponseWriter, r *http.Request) {
	var req healthRequest
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 4096)).Decode(&req); err != nil {
		http.Error(w, "invalid JSON: "+err.Error(), http.StatusBadRequest)
		return
	}
	ready := corev1.ConditionStatus(req.Ready)
	if ready != corev1.ConditionTrue && ready != corev1.ConditionFalse && ready != corev1.ConditionUnknown {
		http.Error(w, fmt.Sprintf("ready must be True, False or Unknown, not %q", req.Ready), http.StatusBadRequest)
		return
	}
	m := s.bootedByHostname(req.Hostname)
	if m == nil {
		http.Error(w, fmt.Sprintf("no booted machine %q", req.Hostname), http.StatusNotFound)
		return
	}
	s.mu.Lock()
	if ready == corev1.ConditionTrue {
		delete(s.faults, m.maas.SystemID)
	} else {
		s.faults[m.maas.SystemID] = fault{ready: ready, rebootHeals: req.RebootHeals}
	}
	down := m.down
	s.mu.Unlock()
	if !down {
		if err := s.setNodeReady(r.Context(), m, ready); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
	}
	s.log.Info("node health set", "hostname", req.Hostname, "ready", ready, "rebootHeals", req.RebootHeals)
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write([]byte("{}\n"))
}

func (s *simulator) bootedByHostname(hostname string) *machine {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, m := range s.booted {
		if m.maas.Hostname == hostname {
			return m
		}
	}
	return nil
}

func (s *simulator) isDown(systemID string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	m, ok := s.booted[systemID]
	return ok && m.down
}

// stopKubelet: MAAS powered the machine off but it stays Deployed.
func (s *simulator) stopKubelet(ctx context.Context, m *machine) {
	s.mu.Lock()
	m.down = true
	api := m.api
	m.api = nil
	s.mu.Unlock()
	if api != nil {
		api.close()
	}
	if err := s.setNodeReady(ctx, m, corev1.ConditionUnknown); err != nil {
		s.log.Error(err, "marking the Node of a powered-off machine", "hostname", m.maas.Hostname)
	}
	s.log.Info("machine powered off while deployed: kubelet stopped", "hostname", m.maas.Hostname)
}

// startKubelet: MAAS powered the machine on again; the kubelet reports
// Ready unless the fault survives the reboot.
func (s *simulator) startKubelet(ctx context.Context, m *machine) {
	if m.owner.ControlPlane {
		host, err := s.endpointHost(ctx, m.owner.Namespace, m.owner.Cluster)
		if err == nil {
			var api *apiListener
			api, err = m.server.serveAPI(s.log, m.ip, s.apiPort, host)
			if err == nil {
				s.mu.Lock()
				m.api = api
				s.mu.Unlock()
			}
		}
		if err != nil {
			s.log.Error(err, "restarting the API server", "hostname", m.maas.Hostname)
			return // tried again on the next poll
		}
	}
	s.mu.Lock()
	f, sick := s.faults[m.maas.SystemID]
	if sick && f.rebootHeals {
		delete(s.faults, m.maas.SystemID)
		sick = false
	}
	s.mu.Unlock()
	ready := corev1.ConditionTrue
	if sick {
		ready = f.ready
	}
	if err := s.setNodeReady(ctx, m, ready); err != nil {
		s.log.Error(err, "marking the Node of a powered-on machine", "hostname", m.maas.Hostname)
		return // tried again on the next poll
	}
	s.mu.Lock()
	m.down = false
	s.mu.Unlock()
	s.log.Info("machine powered on again: kubelet started", "hostname", m.maas.Hostname, "ready", ready)
}

// setNodeReady sets the Node's Ready condition as kubelet (True, False) or
// the node lifecycle controller (Unknown) would.
func (s *simulator) setNodeReady(ctx context.Context, m *machine, status corev1.ConditionStatus) error {
	reason, message := "KubeletReady", "kubelet is posting ready status"
	switch status {
	case corev1.ConditionFalse:
		reason, message = "KubeletNotReady", "container runtime network not ready"
	case corev1.ConditionUnknown:
		reason, message = "NodeStatusUnknown", "Kubelet stopped posting node status."
	}
	c := m.server.client
	var err error
	// The Node is also written by Cluster API and capmaas: retry conflicts.
	for attempt := 0; attempt < 5; attempt++ {
		var node corev1.Node
		if err = c.Get(ctx, client.ObjectKey{Name: m.maas.Hostname}, &node); err != nil {
			return fmt.Errorf("reading Node %s: %w", m.maas.Hostname, err)
		}
		now := metav1.Now()
		found := false
		for i := range node.Status.Conditions {
			cond := &node.Status.Conditions[i]
			if cond.Type != corev1.NodeReady {
				continue
			}
			found = true
			if cond.Status != status {
				cond.LastTransitionTime = now
			}
			cond.Status, cond.Reason, cond.Message, cond.LastHeartbeatTime = status, reason, message, now
		}
		if !found {
			node.Status.Conditions = append(node.Status.Conditions, corev1.NodeCondition{
				Type: corev1.NodeReady, Status: status, Reason: reason, Message: message,
				LastTransitionTime: now, LastHeartbeatTime: now,
			})
		}
		if err = c.Update(ctx, &node); err == nil {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("updating Node %s: %w", m.maas.Hostname, err)
}
