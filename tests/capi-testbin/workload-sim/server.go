package main

// One workload cluster: its in-memory resource group, the in-memory API
// server and etcd handlers, and one TLS listener per control-plane machine.

import (
	"bytes"
	"context"
	"crypto"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	inmemoryruntime "sigs.k8s.io/cluster-api/test/infrastructure/inmemory/pkg/runtime"
	inmemoryapi "sigs.k8s.io/cluster-api/test/infrastructure/inmemory/pkg/server/api"
	inmemoryetcd "sigs.k8s.io/cluster-api/test/infrastructure/inmemory/pkg/server/etcd"
	"sigs.k8s.io/cluster-api/util/certs"
	"sigs.k8s.io/cluster-api/util/secret"
)

type workloadServer struct {
	key           string // <namespace>/<cluster>
	resourceGroup string
	client        inmemoryruntime.Client
	// API requests and etcd gRPC calls (HTTP/2, application/grpc) on the
	// same port, as the in-memory provider serves them.
	handler http.Handler

	mu sync.RWMutex
	// The cluster CA and etcd CA, read from the management cluster when
	// the first control-plane machine boots.
	ca, etcdCA *keyPair
	// Serving certificates of the etcd members, by pod name: KCP reaches a
	// member through a port-forward to pod `etcd-<node>` and verifies the
	// certificate against that name (the TLS server name).
	etcdCerts map[string]*tls.Certificate
}

type keyPair struct {
	cert *x509.Certificate
	key  crypto.Signer
}

// workloadServerFor returns the cluster's server, creating its resource
// group with the namespaces every cluster has.
func (s *simulator) workloadServerFor(ctx context.Context, o owner) (*workloadServer, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ws, ok := s.clusters[o.clusterKey()]; ok {
		return ws, nil
	}
	resourceGroup := o.clusterKey()
	s.inmemory.AddResourceGroup(resourceGroup)
	c := s.inmemory.GetResourceGroup(resourceGroup).GetClient()
	for _, name := range []string{metav1.NamespaceDefault, metav1.NamespacePublic, metav1.NamespaceSystem} {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
			Name:   name,
			Labels: map[string]string{"kubernetes.io/metadata.name": name},
		}}
		if err := c.Create(ctx, ns); err != nil && !apierrors.IsAlreadyExists(err) {
			return nil, fmt.Errorf("creating Namespace %s: %w", name, err)
		}
	}
	resolve := func(string) (string, error) { return resourceGroup, nil }
	log := s.log.WithValues("cluster", resourceGroup)
	api := inmemoryapi.NewAPIServerHandler(s.inmemory, log, resolve)
	etcd := inmemoryetcd.NewEtcdServerHandler(s.inmemory, log, resolve)
	ws := &workloadServer{
		key:           resourceGroup,
		resourceGroup: resourceGroup,
		client:        c,
		handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.ProtoMajor == 2 && strings.HasPrefix(r.Header.Get("Content-Type"), "application/grpc") {
				etcd.ServeHTTP(w, r)
				return
			}
			api.ServeHTTP(w, r)
		}),
		etcdCerts: map[string]*tls.Certificate{},
	}
	s.clusters[o.clusterKey()] = ws
	return ws, nil
}

// loadCAs reads `<cluster>-ca` and `<cluster>-etcd` (written by KCP) once.
func (ws *workloadServer) loadCAs(ctx context.Context, mgmt client.Client, o owner) error {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if ws.ca != nil && ws.etcdCA != nil {
		return nil
	}
	cluster := client.ObjectKey{Namespace: o.Namespace, Name: o.Cluster}
	ca, err := readKeyPair(ctx, mgmt, cluster, secret.ClusterCA)
	if err != nil {
		return err
	}
	etcdCA, err := readKeyPair(ctx, mgmt, cluster, secret.EtcdCA)
	if err != nil {
		return err
	}
	ws.ca, ws.etcdCA = ca, etcdCA
	return nil
}

func readKeyPair(ctx context.Context, mgmt client.Client, cluster client.ObjectKey, purpose secret.Purpose) (*keyPair, error) {
	s, err := secret.Get(ctx, mgmt, cluster, purpose)
	if err != nil {
		return nil, fmt.Errorf("reading Secret %s: %w", secret.Name(cluster.Name, purpose), err)
	}
	cert, err := certs.DecodeCertPEM(s.Data[secret.TLSCrtDataName])
	if err != nil || cert == nil {
		return nil, fmt.Errorf("Secret %s: no certificate in %s (%v)", s.Name, secret.TLSCrtDataName, err)
	}
	key, err := certs.DecodePrivateKeyPEM(s.Data[secret.TLSKeyDataName])
	if err != nil || key == nil {
		return nil, fmt.Errorf("Secret %s: no key in %s (%v)", s.Name, secret.TLSKeyDataName, err)
	}
	return &keyPair{cert: cert, key: key}, nil
}

// issue signs a certificate for config with the given CA.
func issue(ca *keyPair, config *certs.Config) (*tls.Certificate, error) {
	key, err := certs.NewPrivateKey()
	if err != nil {
		return nil, err
	}
	cert, err := config.NewSignedCert(key, ca.cert, ca.key)
	if err != nil {
		return nil, err
	}
	pair, err := tls.X509KeyPair(certs.EncodeCertPEM(cert), certs.EncodePrivateKeyPEM(key))
	if err != nil {
		return nil, err
	}
	return &pair, nil
}

// addEtcdMember issues the member's serving certificate (the in-memory
// provider's names: the pod name, localhost, the machine's IP).
func (ws *workloadServer) addEtcdMember(podName, ip string) error {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if _, ok := ws.etcdCerts[podName]; ok {
		return nil
	}
	cert, err := issue(ws.etcdCA, &certs.Config{
		CommonName: podName,
		AltNames: certs.AltNames{
			DNSNames: []string{"localhost", podName},
			IPs:      []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback, net.ParseIP(ip)},
		},
		Usages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	})
	if err != nil {
		return fmt.Errorf("etcd serving certificate for %s: %w", podName, err)
	}
	ws.etcdCerts[podName] = cert
	return nil
}

func (ws *workloadServer) removeEtcdMember(podName string) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	delete(ws.etcdCerts, podName)
}

func (ws *workloadServer) etcdCert(serverName string) *tls.Certificate {
	ws.mu.RLock()
	defer ws.mu.RUnlock()
	return ws.etcdCerts[serverName]
}

// apiListener is one control-plane machine's API server endpoint.
type apiListener struct {
	address  string
	listener net.Listener
}

// serveAPI starts the machine's API server on ip:port with a serving
// certificate for the IP and the cluster's endpoint name (as kubeadm's
// apiserver certificate has the controlPlaneEndpoint in its SANs).
func (ws *workloadServer) serveAPI(log logr.Logger, ip string, port int, endpointHost string) (*apiListener, error) {
	ws.mu.RLock()
	ca := ws.ca
	ws.mu.RUnlock()
	names := []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"}
	if endpointHost != "" {
		names = append(names, endpointHost)
	}
	apiCert, err := issue(ca, &certs.Config{
		CommonName: "kube-apiserver",
		AltNames: certs.AltNames{
			DNSNames: names,
			IPs:      []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback, net.ParseIP(ip)},
		},
		Usages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	})
	if err != nil {
		return nil, fmt.Errorf("API server serving certificate: %w", err)
	}
	address := net.JoinHostPort(ip, fmt.Sprint(port))
	l, err := net.Listen("tcp", address)
	if err != nil {
		return nil, fmt.Errorf("listening on %s: %w", address, err)
	}
	server := &http.Server{
		Handler:           ws.handler,
		ReadHeaderTimeout: 30 * time.Second,
		ErrorLog:          serverErrorLog,
		TLSConfig: &tls.Config{
			MinVersion: tls.VersionTLS12,
			GetCertificate: func(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
				if cert := ws.etcdCert(hello.ServerName); cert != nil {
					return cert, nil
				}
				return apiCert, nil
			},
		},
	}
	go func() {
		if err := server.ServeTLS(l, "", ""); err != nil && !errors.Is(err, http.ErrServerClosed) && !errors.Is(err, net.ErrClosed) {
			log.Error(err, "API server stopped", "address", address)
		}
	}()
	return &apiListener{address: address, listener: l}, nil
}

// serverErrorLog is net/http's log of the API servers without the
// "superfluous response.WriteHeader" lines the in-memory API handler causes
// on every error answer it writes (go-restful writes the header twice).
var serverErrorLog = log.New(filteredWriter{os.Stderr}, "", log.LstdFlags)

type filteredWriter struct{ w io.Writer }

func (f filteredWriter) Write(p []byte) (int, error) {
	if bytes.Contains(p, []byte("superfluous response.WriteHeader")) {
		return len(p), nil
	}
	return f.w.Write(p)
}

// close refuses new connections, as a powered-off machine does. Connections
// already open stay: the in-memory API server cannot replay deletions to a
// client that re-watches after its connection broke (it only resends objects
// newer than the client's resourceVersion), so cutting the managers'
// long-lived connections would leave their caches stale for good (a Node
// deleted meanwhile stays in KCP's cache), which a real API server's watch
// cache prevents. New connections, what the API probes open every call,
// see the machine gone.
func (a *apiListener) close() {
	_ = a.listener.Close()
}
