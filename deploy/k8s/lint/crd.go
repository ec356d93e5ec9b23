package lint

import (
	"encoding/json"
	"fmt"
	"slices"
	"sort"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// The custom resources a deployment of infera uses, modelled as far as
// the pods they make: a LeaderWorkerSet (leaderworkerset.x-k8s.io/v1)
// and the seed's InferaDeployment (infera.amd.com/v1alpha1, whose
// controller turns each service's extraPodSpec into a pod). Their fields
// are those of the resources' own API types; a field this model does not
// name is kept as raw JSON, so decoding stays strict about misspellings
// of the fields it reads.

// LeaderWorkerSet is leaderworkerset.x-k8s.io/v1 LeaderWorkerSet.
type LeaderWorkerSet struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              LeaderWorkerSetSpec `json:"spec"`
	Status            json.RawMessage     `json:"status,omitempty"`
}

type LeaderWorkerSetSpec struct {
	Replicas             *int32               `json:"replicas,omitempty"`
	LeaderWorkerTemplate LeaderWorkerTemplate `json:"leaderWorkerTemplate"`
	RolloutStrategy      json.RawMessage      `json:"rolloutStrategy,omitempty"`
	StartupPolicy        string               `json:"startupPolicy,omitempty"`
	NetworkConfig        json.RawMessage      `json:"networkConfig,omitempty"`
}

type LeaderWorkerTemplate struct {
	LeaderTemplate       *corev1.PodTemplateSpec `json:"leaderTemplate,omitempty"`
	WorkerTemplate       corev1.PodTemplateSpec  `json:"workerTemplate"`
	Size                 *int32                  `json:"size,omitempty"`
	RestartPolicy        string                  `json:"restartPolicy,omitempty"`
	SubGroupPolicy       json.RawMessage         `json:"subGroupPolicy,omitempty"`
	ResizePolicy         json.RawMessage         `json:"resizePolicy,omitempty"`
	VolumeClaimTemplates json.RawMessage         `json:"volumeClaimTemplates,omitempty"`
}

// InferaDeployment is infera.amd.com/v1alpha1 InferaDeployment, as its
// CRD (deploy/operator/api/v1alpha1 of the seed) defines it.
type InferaDeployment struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              InferaDeploymentSpec `json:"spec"`
	Status            json.RawMessage      `json:"status,omitempty"`
}

type InferaDeploymentSpec struct {
	BackendFramework string                   `json:"backendFramework,omitempty"`
	Image            string                   `json:"image,omitempty"`
	DiscoveryBackend string                   `json:"discoveryBackend,omitempty"`
	EtcdEndpoint     string                   `json:"etcdEndpoint,omitempty"`
	NATS             json.RawMessage          `json:"nats,omitempty"`
	GAIE             json.RawMessage          `json:"gaie,omitempty"`
	Envs             []corev1.EnvVar          `json:"envs,omitempty"`
	Services         map[string]InferaService `json:"services"`
}

// InferaService is one of spec.services.
type InferaService struct {
	ComponentType      string            `json:"componentType"` // server, worker
	Role               string            `json:"role,omitempty"`
	Replicas           *int32            `json:"replicas,omitempty"`
	NumberOfNodes      int32             `json:"numberOfNodes,omitempty"`
	SkipReadinessProbe bool              `json:"skipReadinessProbe,omitempty"`
	Image              string            `json:"image,omitempty"`
	Port               int32             `json:"port,omitempty"`
	Resources          json.RawMessage   `json:"resources,omitempty"`
	Args               []string          `json:"args,omitempty"`
	Env                []corev1.EnvVar   `json:"env,omitempty"`
	ExtraPodSpec       *corev1.PodSpec   `json:"extraPodSpec,omitempty"`
	PodLabels          map[string]string `json:"podLabels,omitempty"`
}

// The controller's defaults (deploy/operator/internal/controller of the
// seed: servicePort, mainContainerNames).
const (
	inferaServerPort = 8000
	inferaWorkerPort = 30000
)

var inferaMainContainers = []string{"main", "infera"}

// pod is one pod template a document makes, where it is, and what selects
// it (nil: nothing, or the controller does).
type pod struct {
	at       loc
	tpl      *corev1.PodTemplateSpec
	selector *metav1.LabelSelector
	ownMeta  bool // the template's metadata is the document's to check
}

// pods are the pod templates of a document.
func pods(d Doc) []pod {
	at := docLoc(d)
	switch o := d.Obj.(type) {
	case *batchv1.Job:
		return []pod{{at, &o.Spec.Template, nil, true}}
	case *LeaderWorkerSet:
		var out []pod
		if l := o.Spec.LeaderWorkerTemplate.LeaderTemplate; l != nil {
			lat := at
			lat.service = "leader"
			out = append(out, pod{lat, l, nil, true})
		}
		wat := at
		wat.service = "worker"
		return append(out, pod{wat, &o.Spec.LeaderWorkerTemplate.WorkerTemplate, nil, true})
	case *InferaDeployment:
		return inferaPods(at, o)
	}
	if tpl, sel := podTemplate(d); tpl != nil {
		return []pod{{at, tpl, sel, true}}
	}
	return nil
}

// inferaPods are the pods the controller makes of the services that give
// an extraPodSpec, in service name order, as podTemplateFromExtra makes
// them: the spec as written; on the primary container (main or infera,
// else the first) the service port, and with Kubernetes discovery (any
// discoveryBackend but etcd) POD_NAME, POD_NAMESPACE and POD_IP from the
// downward API unless it sets them; for a worker on one node, a /health
// readiness probe on the port unless it has one or skipReadinessProbe.
// A service without extraPodSpec runs the operator's own command (python3
// -m infera...), not infera-exec: nothing of it is checked here.
func inferaPods(at loc, o *InferaDeployment) []pod {
	names := make([]string, 0, len(o.Spec.Services))
	for n := range o.Spec.Services {
		names = append(names, n)
	}
	sort.Strings(names)
	var out []pod
	for _, n := range names {
		svc := o.Spec.Services[n]
		if svc.ExtraPodSpec == nil {
			continue
		}
		spec := *svc.ExtraPodSpec.DeepCopy()
		port := svc.Port
		if port == 0 {
			port = inferaWorkerPort
			if svc.ComponentType == "server" {
				port = inferaServerPort
			}
		}
		if len(spec.Containers) > 0 {
			idx := slices.IndexFunc(spec.Containers, func(c corev1.Container) bool { return slices.Contains(inferaMainContainers, c.Name) })
			if idx < 0 {
				idx = 0
			}
			c := &spec.Containers[idx]
			if !slices.ContainsFunc(c.Ports, func(p corev1.ContainerPort) bool { return p.ContainerPort == port }) {
				c.Ports = append(c.Ports, corev1.ContainerPort{ContainerPort: port})
			}
			if o.Spec.DiscoveryBackend != "etcd" {
				for _, v := range [][2]string{{"POD_NAME", "metadata.name"}, {"POD_NAMESPACE", "metadata.namespace"}, {"POD_IP", "status.podIP"}} {
					name, fp := v[0], v[1]
					if !slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == name }) {
						c.Env = append(c.Env, corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: fp}}})
					}
				}
			}
			if svc.ComponentType == "worker" && svc.NumberOfNodes <= 1 && !svc.SkipReadinessProbe && c.ReadinessProbe == nil {
				c.ReadinessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/health", Port: intstr.FromInt32(port)}}}
			}
		}
		if o.Spec.DiscoveryBackend != "etcd" && spec.ServiceAccountName == "" {
			spec.ServiceAccountName = fmt.Sprintf("%s-disc", o.Name) // the controller provisions it
		}
		sat := at
		sat.service = n
		out = append(out, pod{sat, &corev1.PodTemplateSpec{Spec: spec}, nil, false})
	}
	return out
}
