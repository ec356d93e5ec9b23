// Package lint checks Kubernetes manifests that start engines through
// infera-exec: every document decodes strictly into the k8s.io/api type
// of its apiVersion and kind (or a model of a LeaderWorkerSet or an
// InferaDeployment, crd.go), the pod wiring holds together (mounts,
// ports, selectors, RBAC, the init container that fills the payload
// volume), every infera-exec command line in them is accepted by the
// binary's own parser (package cli) and configuration loader (package
// config), and the checks --doctor runs in the pod that a manifest alone
// decides (preflight.Static) pass, with --doctor's words. Lint is the
// entry point; infera-lint (cmd/infera-lint) its command, and the test of
// deploy/k8s's own manifests its first user.
//
// It lives in a module of its own (deploy/k8s) so that k8s.io/api never
// becomes a dependency of the infera-exec binary.
package lint

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io/fs"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	sigsjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"

	"github.com/infera/infera-exec/capability"
	"github.com/infera/infera-exec/config"
	"github.com/infera/infera-exec/internal/environ"
	"github.com/infera/infera-exec/internal/workerargs"
	"github.com/infera/infera-exec/preflight"
)

// The overlay image: FROM scratch, the payload as its root filesystem,
// entrypoint ["/bin/infera-exec", "--install"], cmd ["/overlay"]. A
// container or image volume is taken for it when its repository path ends
// with OverlayRepo, on any registry, with any tag or digest.
const OverlayRepo = "infera/overlay"

// V022OverlayRepo is the repository the seed's manifests pull the
// overlay image from (inferaimage/infera-overlay:v0.2.2 and digests).
const V022OverlayRepo = "inferaimage/infera-overlay"

var (
	OverlayEntrypoint = []string{"/bin/infera-exec", "--install"}
	OverlayCmd        = []string{"/overlay"}
)

// Doc is one decoded YAML document of a manifest file.
type Doc struct {
	File  string
	Index int // 1-based position in the file
	Kind  string
	Name  string
	Obj   any    // *appsv1.Deployment, *corev1.Service, *InferaDeployment, ...
	JSON  []byte // the document as JSON
}

func (d Doc) String() string {
	return fmt.Sprintf("%s: document %d (%s %s)", d.File, d.Index, d.Kind, d.Name)
}

// kinds are the types a manifest may contain, by apiVersion/kind. Any
// other kind is reported (a warning: not checked) rather than passed as
// if it had been.
var kinds = map[string]func() any{
	"apps/v1/Deployment":                              func() any { return &appsv1.Deployment{} },
	"apps/v1/StatefulSet":                             func() any { return &appsv1.StatefulSet{} },
	"apps/v1/DaemonSet":                               func() any { return &appsv1.DaemonSet{} },
	"batch/v1/Job":                                    func() any { return &batchv1.Job{} },
	"v1/Pod":                                          func() any { return &corev1.Pod{} },
	"v1/Service":                                      func() any { return &corev1.Service{} },
	"v1/ServiceAccount":                               func() any { return &corev1.ServiceAccount{} },
	"v1/ConfigMap":                                    func() any { return &corev1.ConfigMap{} },
	"v1/PersistentVolumeClaim":                        func() any { return &corev1.PersistentVolumeClaim{} },
	"rbac.authorization.k8s.io/v1/Role":               func() any { return &rbacv1.Role{} },
	"rbac.authorization.k8s.io/v1/RoleBinding":        func() any { return &rbacv1.RoleBinding{} },
	"rbac.authorization.k8s.io/v1/ClusterRole":        func() any { return &rbacv1.ClusterRole{} },
	"rbac.authorization.k8s.io/v1/ClusterRoleBinding": func() any { return &rbacv1.ClusterRoleBinding{} },
	"leaderworkerset.x-k8s.io/v1/LeaderWorkerSet":     func() any { return &LeaderWorkerSet{} },
	"infera.amd.com/v1alpha1/InferaDeployment":        func() any { return &InferaDeployment{} },
}

var docSep = regexp.MustCompile(`(?m)^---[ \t]*(?:#.*)?$`)

// Decode splits a multi-document YAML file on "---" lines and decodes each
// document strictly into the typed object of its apiVersion and kind:
// duplicate keys, unknown fields and fields in the wrong case are errors,
// as with the API server's strict field validation (kubectl's default).
// Empty and comment-only documents are skipped; a kind the linter does
// not know is a warning.
func Decode(file string, data []byte) ([]Doc, []Finding) {
	var docs []Doc
	var errs []Finding
	for i, part := range docSep.Split(string(data), -1) {
		at := docLoc(Doc{File: file, Index: i + 1})
		bad := func(format string, args ...any) {
			errs = append(errs, at.finding(Error, "decode", fmt.Sprintf(format, args...), "", ""))
		}
		j, err := yaml.YAMLToJSONStrict([]byte(part))
		if err != nil {
			bad("%v", err)
			continue
		}
		if t := bytes.TrimSpace(j); len(t) == 0 || string(t) == "null" {
			continue
		}
		var tm metav1.TypeMeta
		if err := json.Unmarshal(j, &tm); err != nil {
			bad("not an object: %v", err)
			continue
		}
		at.doc.Kind = tm.Kind
		newObj, ok := kinds[tm.APIVersion+"/"+tm.Kind]
		if !ok {
			errs = append(errs, at.finding(Warn, "kind", fmt.Sprintf("unknown kind %q of apiVersion %q: not checked", tm.Kind, tm.APIVersion), "", "infera-lint knows "+knownKinds()))
			continue
		}
		obj := newObj()
		strict, err := sigsjson.UnmarshalStrict(j, obj, sigsjson.DisallowDuplicateFields, sigsjson.DisallowUnknownFields)
		if err != nil {
			bad("%v", err)
			continue
		}
		for _, e := range strict {
			bad("%v", e)
		}
		if len(strict) > 0 {
			continue
		}
		docs = append(docs, Doc{File: file, Index: i + 1, Kind: tm.Kind, Name: obj.(metav1.Object).GetName(), Obj: obj, JSON: j})
	}
	return docs, errs
}

func knownKinds() string {
	var ks []string
	for k := range kinds {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return strings.Join(ks, ", ")
}

// Placeholders reports template placeholders such as <NODE> left in a file,
// comments included, as infera-exec's placeholders check sees them.
func Placeholders(file string, data []byte) []string {
	var out []string
	for n, line := range strings.Split(string(data), "\n") {
		for _, m := range preflight.Placeholders(line) {
			out = append(out, fmt.Sprintf("%s:%d: template placeholder %s left in", file, n+1, m))
		}
	}
	return out
}

// Context is what the checks need from outside the manifests.
type Context struct {
	PatchIDs map[string]bool // engine patch ids INFERA_REQUIRE_PATCHES may name
}

// Stats counts what was checked, so that a test can tell a clean result
// from one where nothing matched.
type Stats struct {
	Engines    int // containers that exec a worker through infera-exec
	Installers int // init containers running the overlay image's --install
	ImageVols  int // engines whose payload is an image volume
}

type workload struct {
	doc    Doc
	labels map[string]string
	spec   *corev1.PodSpec
}

// Check verifies the documents of one file: each document's metadata,
// each pod it makes, and the wiring between them (Services to pods,
// bindings to roles and accounts).
func Check(docs []Doc, ctx Context) ([]Finding, Stats) {
	c := &checker{ctx: ctx}
	var workloads []workload
	for _, d := range docs {
		c.meta(docLoc(d), "metadata", d.Obj.(metav1.Object), d.Kind)
		for _, p := range pods(d) {
			if p.ownMeta && d.Kind != "Pod" {
				c.meta(p.at, "spec.template.metadata", p.tpl, "")
			}
			if p.selector != nil || (d.Kind != "Pod" && p.ownMeta && d.Kind != "Job" && d.Kind != "LeaderWorkerSet") {
				c.selector(d, p.selector, p.tpl.Labels)
			}
			if p.ownMeta {
				workloads = append(workloads, workload{d, p.tpl.Labels, &p.tpl.Spec})
			}
			c.podSpec(p.at, &p.tpl.Spec)
		}
	}
	for _, d := range docs {
		switch o := d.Obj.(type) {
		case *corev1.Service:
			c.service(d, o, workloads)
		case *rbacv1.RoleBinding:
			c.roleBinding(d, o, docs)
		}
	}
	for _, w := range workloads {
		if sa := w.spec.ServiceAccountName; sa != "" && sa != "default" && !hasDoc(docs, "ServiceAccount", sa) {
			c.add(docLoc(w.doc), "serviceAccountName %q is not declared in this file", sa)
		}
	}
	return c.findings, c.stats
}

type checker struct {
	ctx      Context
	findings []Finding
	stats    Stats
}

// add records a finding of the manifest's own checks: an error, its
// text saying what to do where it can.
func (c *checker) add(where loc, format string, args ...any) {
	c.report(where, Error, "manifest", fmt.Sprintf(format, args...), "", "")
}

// report records one finding at where.
func (c *checker) report(where loc, sev Severity, check, seen, why, fix string) {
	c.findings = append(c.findings, where.finding(sev, check, seen, why, fix))
}

// meta checks names, labels and annotations as the API server would.
// kind is empty for a pod template, whose name is not used.
func (c *checker) meta(where loc, at string, m metav1.Object, kind string) {
	fp := field.NewPath(at)
	switch {
	case kind == "":
	case m.GetName() == "":
		c.add(where, "%s.name is empty", at)
	case kind == "Service":
		c.invalid(where, at+".name", m.GetName(), validation.IsDNS1035Label(m.GetName()))
	default:
		c.invalid(where, at+".name", m.GetName(), validation.IsDNS1123Subdomain(m.GetName()))
	}
	for _, e := range metav1validation.ValidateLabels(m.GetLabels(), fp.Child("labels")) {
		c.add(where, "%v", e)
	}
	for _, e := range apivalidation.ValidateAnnotations(m.GetAnnotations(), fp.Child("annotations")) {
		c.add(where, "%v", e)
	}
}

func (c *checker) invalid(where loc, what, value string, msgs []string) {
	for _, m := range msgs {
		c.add(where, "%s %q: %s", what, value, m)
	}
}

func podTemplate(d Doc) (*corev1.PodTemplateSpec, *metav1.LabelSelector) {
	switch o := d.Obj.(type) {
	case *appsv1.Deployment:
		return &o.Spec.Template, o.Spec.Selector
	case *appsv1.StatefulSet:
		return &o.Spec.Template, o.Spec.Selector
	case *appsv1.DaemonSet:
		return &o.Spec.Template, o.Spec.Selector
	case *corev1.Pod:
		return &corev1.PodTemplateSpec{ObjectMeta: o.ObjectMeta, Spec: o.Spec}, nil
	}
	return nil, nil
}

func hasDoc(docs []Doc, kind, name string) bool {
	return slices.ContainsFunc(docs, func(d Doc) bool { return d.Kind == kind && d.Name == name })
}

// selector: the API server rejects a workload whose selector does not
// select its own pod template.
func (c *checker) selector(d Doc, sel *metav1.LabelSelector, podLabels map[string]string) {
	if sel == nil {
		c.add(docLoc(d), "spec.selector is missing")
		return
	}
	s, err := metav1.LabelSelectorAsSelector(sel)
	switch {
	case err != nil:
		c.add(docLoc(d), "spec.selector: %v", err)
	case s.Empty():
		c.add(docLoc(d), "spec.selector is empty")
	case !s.Matches(labels.Set(podLabels)):
		c.add(docLoc(d), "spec.selector %s does not select the pod template's labels %v", s, podLabels)
	}
}

func (c *checker) service(d Doc, svc *corev1.Service, workloads []workload) {
	if len(svc.Spec.Selector) == 0 {
		return // endpoints managed elsewhere
	}
	sel := labels.SelectorFromSet(svc.Spec.Selector)
	var pods []workload
	for _, w := range workloads {
		if sel.Matches(labels.Set(w.labels)) {
			pods = append(pods, w)
		}
	}
	if len(pods) == 0 {
		c.add(docLoc(d), "selector %s selects no pod template in this file", sel)
		return
	}
	for _, p := range svc.Spec.Ports {
		for _, w := range pods {
			if !podHasPort(w.spec, p.TargetPort, p.Port) {
				c.add(docLoc(d), "port %q: targetPort %s is not a container port of %s", p.Name, p.TargetPort.String(), w.doc)
			}
		}
	}
}

func podHasPort(spec *corev1.PodSpec, target intstr.IntOrString, port int32) bool {
	for _, ctr := range spec.Containers {
		for _, cp := range ctr.Ports {
			switch {
			case target.Type == intstr.String && target.StrVal != "":
				if cp.Name == target.StrVal {
					return true
				}
			case target.IntVal != 0:
				if cp.ContainerPort == target.IntVal {
					return true
				}
			default: // unset: the Service port itself
				if cp.ContainerPort == port {
					return true
				}
			}
		}
	}
	return false
}

func (c *checker) roleBinding(d Doc, rb *rbacv1.RoleBinding, docs []Doc) {
	if rb.RoleRef.Kind == "Role" && !hasDoc(docs, "Role", rb.RoleRef.Name) {
		c.add(docLoc(d), "roleRef names Role %q, which is not declared in this file", rb.RoleRef.Name)
	}
	for _, s := range rb.Subjects {
		if s.Kind == "ServiceAccount" && s.Namespace == "" && !hasDoc(docs, "ServiceAccount", s.Name) {
			c.add(docLoc(d), "subject ServiceAccount %q is not declared in this file", s.Name)
		}
	}
}

// downward are the fields the downward API offers to env, with a sample
// value each for expanding $(VAR) references.
var downward = map[string]string{
	"metadata.name":           "pod-0",
	"metadata.namespace":      "infera",
	"metadata.uid":            "00000000-0000-0000-0000-000000000000",
	"spec.nodeName":           "node-0",
	"spec.serviceAccountName": "default",
	"status.hostIP":           "192.0.2.1",
	"status.hostIPs":          "192.0.2.1",
	"status.podIP":            "192.0.2.10",
	"status.podIPs":           "192.0.2.10",
}

var downwardMapRE = regexp.MustCompile(`^metadata\.(labels|annotations)\['[^']+'\]$`)

func (c *checker) podSpec(where loc, spec *corev1.PodSpec) {
	vols := map[string]*corev1.Volume{}
	for i := range spec.Volumes {
		v := &spec.Volumes[i]
		if vols[v.Name] != nil {
			c.add(where, "volume %q declared twice", v.Name)
		}
		vols[v.Name] = v
		c.invalid(where, "volume name", v.Name, validation.IsDNS1123Label(v.Name))
		if n := sources(v.VolumeSource); n != 1 {
			c.add(where, "volume %q has %d sources; a volume has exactly one", v.Name, n)
		}
	}
	names := map[string]bool{}
	installs := map[string]string{} // emptyDir volume -> install destination
	all := append(slices.Clone(spec.InitContainers), spec.Containers...)
	for i := range all {
		ctr := &all[i]
		isInit := i < len(spec.InitContainers)
		cw := where.in(ctr.Name, isInit)
		if names[ctr.Name] {
			c.add(cw, "container name used twice in the pod")
		}
		names[ctr.Name] = true
		c.invalid(cw, "container name", ctr.Name, validation.IsDNS1123Label(ctr.Name))
		c.container(cw, spec, ctr, isInit, vols, installs)
	}
}

// sources counts the volume sources set in a VolumeSource.
func sources(vs corev1.VolumeSource) int {
	b, _ := json.Marshal(vs)
	var m map[string]json.RawMessage
	_ = json.Unmarshal(b, &m)
	return len(m)
}

func (c *checker) container(where loc, spec *corev1.PodSpec, ctr *corev1.Container, isInit bool, vols map[string]*corev1.Volume, installs map[string]string) {
	if ctr.Image == "" {
		c.add(where, "no image")
	} else if ph := imagePlaceholders(ctr.Image); len(ph) > 0 {
		c.add(where, "image %q still holds the placeholder %s: replace it before applying", ctr.Image, strings.Join(ph, " and "))
	} else if !hasTagOrDigest(ctr.Image) {
		c.add(where, "image %q has no tag or digest; pin one", ctr.Image)
	}
	paths := map[string]bool{}
	for _, m := range ctr.VolumeMounts {
		if vols[m.Name] == nil {
			c.add(where, "volumeMount %q at %s names no volume of the pod", m.Name, m.MountPath)
		}
		if paths[m.MountPath] {
			c.add(where, "two volumeMounts at %s", m.MountPath)
		}
		paths[m.MountPath] = true
	}
	ports := map[string]bool{}
	for _, p := range ctr.Ports {
		if p.Name != "" {
			c.invalid(where, "port name", p.Name, validation.IsValidPortName(p.Name))
			if ports[p.Name] {
				c.add(where, "port name %q used twice", p.Name)
			}
			ports[p.Name] = true
		}
	}
	for what, pr := range map[string]*corev1.Probe{"startupProbe": ctr.StartupProbe, "readinessProbe": ctr.ReadinessProbe, "livenessProbe": ctr.LivenessProbe} {
		if pr == nil {
			continue
		}
		var port *intstr.IntOrString
		if pr.HTTPGet != nil {
			port = &pr.HTTPGet.Port
		} else if pr.TCPSocket != nil {
			port = &pr.TCPSocket.Port
		}
		if port != nil && port.Type == intstr.String && !ports[port.StrVal] {
			c.add(where, "%s uses port %q, which the container does not name", what, port.StrVal)
		}
	}

	// The environment as the kubelet builds it: in order, $(VAR) expanded
	// from the variables before it; then command and args expanded with all
	// of them.
	env := map[string]string{}
	var kv []string
	for _, e := range ctr.Env {
		c.invalid(where, "env name", e.Name, validation.IsEnvVarName(e.Name))
		var val string
		switch {
		case e.ValueFrom == nil:
			var undef []string
			val, undef = expand(e.Value, env)
			for _, u := range undef {
				c.add(where, "env %s refers to $(%s), which is not defined before it; the kubelet would leave the text as it is", e.Name, u)
			}
		case e.ValueFrom.FieldRef != nil:
			fp := e.ValueFrom.FieldRef.FieldPath
			v, ok := downward[fp]
			if !ok && downwardMapRE.MatchString(fp) {
				v, ok = "value", true
			}
			if !ok {
				c.add(where, "env %s: fieldRef %q is not a field the downward API offers", e.Name, fp)
			}
			val = v
		default:
			val = "from-" + e.Name
		}
		env[e.Name] = val
		kv = append(kv, e.Name+"="+val)
	}
	expandAll := func(what string, list []string) []string {
		out := make([]string, len(list))
		for i, s := range list {
			var undef []string
			out[i], undef = expand(s, env)
			for _, u := range undef {
				if len(ctr.EnvFrom) == 0 {
					c.add(where, "%s refers to $(%s), which the container's env does not define; the kubelet would pass the text as it is", what, u)
				}
			}
		}
		return out
	}
	command := expandAll("command", ctr.Command)
	args := expandAll("args", ctr.Args)

	overlay := isOverlayImage(ctr.Image)
	if overlay && len(command) == 0 {
		command = OverlayEntrypoint
		if len(args) == 0 {
			args = OverlayCmd
		}
	}
	argv := append(slices.Clone(command), args...)
	if dest, ok := copyInstall(argv); ok {
		if !isInit {
			c.add(where, "%q in a regular container copies the payload and exits: the pod would restart it forever; run it as an init container", argv)
			return
		}
		c.installInto(where, ctr, "cp -a /payload/. "+dest, dest, vols, installs)
		return
	}
	runsShim := len(argv) > 0 && isShimPath(argv[0])
	mentions := slices.ContainsFunc(append(slices.Clone(ctr.Command), ctr.Args...), func(s string) bool { return strings.Contains(s, "infera-exec") })
	switch {
	case overlay && !runsShim:
		c.add(where, "runs the overlay image but not its infera-exec (command %q)", argv)
		return
	case !runsShim && mentions:
		c.add(where, "mentions infera-exec but does not run it as the command (%q); a shell wrapper or an args-only command line cannot be checked: start command with the path of infera-exec", argv)
		return
	case !runsShim:
		return
	}

	opts, err := config.ParseArgs(argv[1:])
	if err != nil {
		c.add(where, "infera-exec would refuse its command line %q: %v", argv, err)
		return
	}
	if overlay || opts.Install != "" {
		c.installer(where, ctr, isInit, opts, vols, installs)
		return
	}
	switch {
	case opts.Help || opts.Version || opts.Check != "":
		c.add(where, "infera-exec runs no worker with %q: the container would exit at once", argv[1:])
		return
	case opts.Explain:
		if !isInit {
			c.add(where, "--explain in a regular container prints the plan and exits: the pod would restart it forever")
		}
		return // a preflight init container: nothing more to check
	case len(opts.Command) == 0:
		c.add(where, "no worker command after the infera-exec options")
		return
	case isInit:
		c.add(where, "an init container runs a worker (%q): it would never finish, and the pod never start", opts.Command)
		return
	}
	c.engine(where, spec, ctr, argv, opts, kv, vols, installs)
}

func (c *checker) installer(where loc, ctr *corev1.Container, isInit bool, opts config.Options, vols map[string]*corev1.Volume, installs map[string]string) {
	if !isInit {
		c.add(where, "--install in a regular container copies the payload and exits: the pod would restart it forever; run it as an init container")
		return
	}
	if opts.Install == "" {
		c.add(where, "runs the overlay image without --install")
		return
	}
	dest := opts.Install
	if !path.IsAbs(dest) {
		c.add(where, "--install %s is not an absolute path", dest)
		return
	}
	c.installInto(where, ctr, "--install "+path.Clean(dest), path.Clean(dest), vols, installs)
}

// v022Copy is the init container line of v0.2.2's manifests, which the
// overlay image still runs (its payload is also at /payload, with a
// static busybox): sh -c "cp -a /payload/. DEST/".
var v022Copy = regexp.MustCompile(`^cp -a /payload/\. (/[^\s;&|]*?)/?$`)

// copyInstall is the destination of a v0.2.2 init container line.
func copyInstall(argv []string) (string, bool) {
	if len(argv) != 3 || (argv[0] != "sh" && argv[0] != "/bin/sh" && argv[0] != "/usr/bin/sh") || argv[1] != "-c" {
		return "", false
	}
	m := v022Copy.FindStringSubmatch(strings.TrimSpace(argv[2]))
	if m == nil {
		return "", false
	}
	return path.Clean(m[1]), true
}

// installInto checks an init container that fills dest with the payload
// (what says how: --install DEST, or v0.2.2's cp line): dest must be a
// writable emptyDir mount of it, which an engine container then runs
// from.
func (c *checker) installInto(where loc, ctr *corev1.Container, what, dest string, vols map[string]*corev1.Volume, installs map[string]string) {
	c.stats.Installers++
	c.termination(where, ctr, config.DefaultTerminationLog)
	for _, m := range ctr.VolumeMounts {
		if path.Clean(m.MountPath) != dest || m.SubPath != "" || m.SubPathExpr != "" {
			continue
		}
		v := vols[m.Name]
		switch {
		case v == nil:
		case v.EmptyDir == nil:
			c.add(where, "%s: volume %q there is not an emptyDir", what, m.Name)
		case m.ReadOnly:
			c.add(where, "%s: the mount is read-only", what)
		default:
			installs[m.Name] = dest
		}
		return
	}
	c.add(where, "%s: no volume is mounted there, so the copy would vanish with the init container", what)
}

// termination holds a container that runs infera-exec to the kubelet's
// termination message: FallbackToLogsOnError, so that kubectl describe
// shows infera-exec's refusal (written to the termination log) or, when
// the worker fails without a message, the log's last lines; and the
// file the kubelet reads (terminationMessagePath) must be the one
// infera-exec writes (INFERA_EXEC_TERMINATION_LOG).
func (c *checker) termination(where loc, ctr *corev1.Container, writes string) {
	if ctr.TerminationMessagePolicy != corev1.TerminationMessageFallbackToLogsOnError {
		c.report(where, Warn, "termination-message", "terminationMessagePolicy is not FallbackToLogsOnError",
			"kubectl describe then shows neither the reason infera-exec wrote to the termination log nor the log's end when the worker fails",
			"set terminationMessagePolicy: FallbackToLogsOnError on the container")
	}
	reads := ctr.TerminationMessagePath
	if reads == "" {
		reads = corev1.TerminationMessagePathDefault
	}
	if writes != reads {
		c.add(where, "terminationMessagePath %s, but infera-exec writes %s: set INFERA_EXEC_TERMINATION_LOG=%s", reads, writes, reads)
	}
}

func (c *checker) engine(where loc, spec *corev1.PodSpec, ctr *corev1.Container, argv []string, opts config.Options, kv []string, vols map[string]*corev1.Volume, installs map[string]string) {
	c.stats.Engines++
	if !path.IsAbs(argv[0]) {
		c.add(where, "run infera-exec by its absolute path in the payload (e.g. /overlay/bin/infera-exec): the payload root is found from it")
		return
	}
	cfg, warns, err := config.Load(environ.New(kv), argv[0], "/", opts.Flags)
	if err != nil {
		c.add(where, "infera-exec would refuse its environment: %v", err)
		return
	}
	for _, w := range warns {
		c.add(where, "infera-exec would warn: %s", w)
	}
	c.termination(where, ctr, cfg.TerminationLog)

	// The payload root must be the overlay: an emptyDir the overlay init
	// container installed into at the same path, or the overlay image
	// mounted as an image volume.
	root := cfg.PayloadRoot
	var mount *corev1.VolumeMount
	for i, m := range ctr.VolumeMounts {
		if path.Clean(m.MountPath) == root && m.SubPath == "" && m.SubPathExpr == "" {
			mount = &ctr.VolumeMounts[i]
		}
	}
	if mount == nil {
		c.add(where, "the payload root %s (%s) is not a volume mount of this container", root, cfg.PayloadRootFrom)
	} else if v := vols[mount.Name]; v != nil {
		switch {
		case v.Image != nil:
			c.stats.ImageVols++
			if ph := imagePlaceholders(v.Image.Reference); len(ph) > 0 {
				c.add(where, "image volume %q: reference %q still holds the placeholder %s: replace it before applying", mount.Name, v.Image.Reference, strings.Join(ph, " and "))
			} else if !isOverlayImage(v.Image.Reference) {
				c.add(where, "image volume %q at the payload root is %q, not the overlay image (%s)", mount.Name, v.Image.Reference, OverlayRepo)
			} else if !hasTagOrDigest(v.Image.Reference) {
				c.add(where, "image volume %q: reference %q has no tag or digest", mount.Name, v.Image.Reference)
			}
		case v.EmptyDir != nil:
			dest, ok := installs[mount.Name]
			switch {
			case !ok:
				c.add(where, "emptyDir %q at the payload root %s is filled by no init container running the overlay image's --install (or v0.2.2's cp -a /payload/. %s/)", mount.Name, root, root)
			case dest != root:
				c.add(where, "the init container installs the payload into %s, but this container runs it from %s", dest, root)
			}
		default:
			c.add(where, "the payload root %s is volume %q, which is neither an emptyDir filled by the overlay init container nor an image volume of the overlay image", root, mount.Name)
		}
		if !mount.ReadOnly {
			c.add(where, "mount the payload (%s) read-only in the engine container", root)
		}
	}

	// What the worker's own arguments need must be required, or the pod
	// starts without it and fails at the first transfer.
	req := cfg.RequireNative
	for _, n := range req.Names {
		if config.Capabilities[n] == "" {
			c.add(where, "INFERA_REQUIRE_NATIVE names %q, which is no capability infera-exec knows (%s)%s; unless the payload's tree declares it, the start is refused",
				n, strings.Join(config.KnownCapabilities(), ", "), config.SuggestCapability(n))
		}
	}
	implied := capability.Implied(workerargs.Parse(opts.Command), environ.New(kv))
	for _, im := range implied {
		if !im.Optional && !req.All && !req.Auto && !slices.Contains(req.Names, im.Capability) {
			c.add(where, "the worker's arguments (%s) need %s, but INFERA_REQUIRE_NATIVE=%q does not require it", im.Source, im.Capability, req.Raw)
		}
	}
	if slices.Contains(req.Names, "mooncake") || slices.ContainsFunc(implied, func(i capability.Implication) bool { return i.Capability == "mooncake" }) {
		c.rdma(where, spec, ctr, cfg, vols)
	}

	for _, id := range cfg.RequirePatches {
		if !c.ctx.PatchIDs[id] {
			c.add(where, "INFERA_REQUIRE_PATCHES names %q, which is no built-in patch: infera-exec would refuse to start (78)", id)
		}
	}
	for _, id := range cfg.SkipPatches {
		switch {
		case !c.ctx.PatchIDs[id]:
			c.add(where, "INFERA_SKIP_PATCHES names %q, which is no built-in patch: infera-exec would refuse to start (78)", id)
		case slices.Contains(cfg.RequirePatches, id):
			c.add(where, "INFERA_SKIP_PATCHES and INFERA_REQUIRE_PATCHES both name %q: infera-exec would refuse to start (78)", id)
		}
	}

	// The checks infera-exec runs in the pod that the manifest alone
	// decides, with the words --doctor prints there.
	env := map[string]string{}
	for _, e := range kv {
		k, v, _ := strings.Cut(e, "=")
		env[k] = v
	}
	for _, r := range preflight.Static(opts.Command, env) {
		if r.Status == preflight.Fail && (r.Severity == preflight.Error || r.Severity == preflight.Warn) {
			c.report(where, Severity(r.Severity), r.Name, r.Seen, r.Why, r.Do)
		}
	}
	args := workerargs.Parse(opts.Command)
	c.modelVolume(where, ctr, args, vols)
	c.memory(where, ctr)
	if args.Engine != workerargs.VLLM && args.Engine != workerargs.SGLang {
		return // a router or server: no weights to load, no probe window to keep
	}
	if spec.EnableServiceLinks == nil || *spec.EnableServiceLinks {
		c.report(where, Warn, "service-links", "enableServiceLinks is not false: the kubelet puts NAME_PORT, NAME_SERVICE_HOST and more of every Service in the namespace into the worker's environment",
			"A Service named vllm or sglang becomes VLLM_PORT=tcp://10.0.0.1:8000 (or SGLANG_PORT), which the engine reads as its own setting and fails to parse; and a namespace with many Services slows every start.",
			"Set enableServiceLinks: false in the pod spec; the engine finds its peers through the router or DNS, not these variables.")
	}

	// Probes: ready on /health, and the kubelet must wait longer than the
	// worker does, by a margin, so that the worker's own timeout reports
	// (in its log and the pod's status) before the kubelet kills it.
	if p := ctr.ReadinessProbe; p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/health" {
		c.report(where, Warn, "probes", "no readinessProbe on /health",
			"Until the engine answers /health it cannot serve; without the probe a Service sends requests to a pod still loading.",
			"add readinessProbe: {httpGet: {path: /health, port: PORT}}")
	}
	if p := ctr.StartupProbe; p == nil {
		c.report(where, Warn, "probes", "no startupProbe",
			"Loading a model takes minutes; a liveness probe without a startup probe before it ends the container mid-load.",
			"add a startupProbe on /health allowing INFERA_ENGINE_READY_TIMEOUT and a margin")
	} else if w, want := probeWindow(p), cfg.ReadyTimeout+probeMargin(cfg.ReadyTimeout); w < want {
		c.report(where, Warn, "startup-probe",
			fmt.Sprintf("startupProbe allows %d s but the worker waits up to %d s for the engine (%s)", w, cfg.ReadyTimeout, cfg.ReadyTimeoutFrom),
			"A load that takes longer than the probe allows is ended by the kubelet, without the worker's own message saying how far it got; the pod restarts and loads again.",
			fmt.Sprintf("allow at least %d s (failureThreshold x periodSeconds), so the worker's own timeout reports before the kubelet kills it, or lower INFERA_ENGINE_READY_TIMEOUT to what the probe allows", want))
	}

	// PyTorch and RCCL need more than the runtime's 64 MiB /dev/shm.
	if !mountedFrom(ctr, vols, "/dev/shm", func(v *corev1.Volume) bool {
		return v.EmptyDir != nil && v.EmptyDir.Medium == corev1.StorageMediumMemory
	}) {
		c.add(where, "no memory emptyDir at /dev/shm")
	}
}

// modelVolume: a model named by an absolute path (--model /models/X) is
// on a volume of the container; the stock engine image holds no weights.
// A hub name (org/model) is left alone.
func (c *checker) modelVolume(where loc, ctr *corev1.Container, args workerargs.Args, vols map[string]*corev1.Volume) {
	m := args.Model
	if m == "" || !path.IsAbs(m) {
		return
	}
	m = path.Clean(m)
	for _, vm := range ctr.VolumeMounts {
		mp := path.Clean(vm.MountPath)
		if (m == mp || strings.HasPrefix(m, mp+"/")) && vols[vm.Name] != nil {
			return
		}
	}
	c.report(where, Error, "model-volume",
		fmt.Sprintf("the model %s (%s) is on no volume mount of this container", m, args.ModelFrom),
		"The stock engine image holds no weights: the worker fails at load time, after the pod was scheduled and the image pulled.",
		fmt.Sprintf("mount the volume that holds the weights (a PVC, or a hostPath on the node) at %s or a directory above it", path.Dir(m)))
}

// memory: the API server refuses a memory request above the limit; a
// request below it lets the node promise the difference to other pods,
// and under memory pressure the engine, using more than it requested, is
// the first the kernel's OOM killer ends (Burstable QoS).
func (c *checker) memory(where loc, ctr *corev1.Container) {
	req, hasReq := ctr.Resources.Requests[corev1.ResourceMemory]
	lim, hasLim := ctr.Resources.Limits[corev1.ResourceMemory]
	if !hasLim || !hasReq {
		return // a request without a limit is the request itself; neither: the namespace's defaults
	}
	switch req.Cmp(lim) {
	case 1:
		c.report(where, Error, "memory", fmt.Sprintf("requests.memory %s is above limits.memory %s", req.String(), lim.String()),
			"The API server refuses the pod.", "set requests.memory to at most limits.memory, for an engine equal to it")
	case -1:
		c.report(where, Warn, "memory", fmt.Sprintf("requests.memory %s is below limits.memory %s", req.String(), lim.String()),
			"The node may promise the difference to other pods; under memory pressure the engine, above its request, is the first the OOM killer ends, mid-load or mid-request.",
			"set requests.memory equal to limits.memory")
	}
}

// rdma checks what a Mooncake (RDMA) worker needs from its pod.
func (c *checker) rdma(where loc, spec *corev1.PodSpec, ctr *corev1.Container, cfg config.Config, vols map[string]*corev1.Volume) {
	if !spec.HostNetwork {
		c.report(where, Error, "host-network", "a Mooncake worker without hostNetwork: true",
			"The RDMA NICs and their addresses are the host's; the pod network cannot reach them, so Mooncake has no path to its peer while the engine looks healthy.",
			"set hostNetwork: true and dnsPolicy: ClusterFirstWithHostNet in the pod spec")
	}
	sc := ctr.SecurityContext
	privileged := sc != nil && sc.Privileged != nil && *sc.Privileged
	ipcLock := privileged || (sc != nil && sc.Capabilities != nil && slices.Contains(sc.Capabilities.Add, "IPC_LOCK"))
	if !ipcLock {
		c.add(where, "a Mooncake worker needs the IPC_LOCK capability to pin memory for RDMA")
	}
	dir := path.Dir(cfg.HostLibionic)
	hostPath := func(v *corev1.Volume) bool { return v.HostPath != nil }
	if !mountedFrom(ctr, vols, dir, hostPath) && !mountedFrom(ctr, vols, path.Clean(cfg.HostLibionic), hostPath) {
		c.report(where, Error, "libionic", fmt.Sprintf("no hostPath volume at %s or its directory %s (INFERA_HOST_LIBIONIC)", cfg.HostLibionic, dir),
			"The image's own RDMA provider then stays; when it does not match the host's ionic driver, libibverbs finds no device and the KV transfer falls back to a path that cannot cross nodes.",
			fmt.Sprintf("mount the host's libionic.so (hostPath, type File) at %s, or a host directory holding it at %s", cfg.HostLibionic, dir))
	}
	devPlugin := false
	for name := range ctr.Resources.Limits {
		if strings.HasPrefix(string(name), "rdma/") {
			devPlugin = true
		}
	}
	hostDev := mountedFrom(ctr, vols, "/dev/infiniband", func(v *corev1.Volume) bool { return v.HostPath != nil })
	switch {
	case devPlugin, privileged: // a privileged container sees the host's devices
	case hostDev:
		c.add(where, "/dev/infiniband from a hostPath is not in the container's device cgroup: set privileged, or use an RDMA device plugin resource")
	case !hostDev:
		c.add(where, "no RDMA devices: request an rdma/* device plugin resource or mount /dev/infiniband from the host")
	}
}

func mountedFrom(ctr *corev1.Container, vols map[string]*corev1.Volume, at string, ok func(*corev1.Volume) bool) bool {
	for _, m := range ctr.VolumeMounts {
		if path.Clean(m.MountPath) == at && m.SubPath == "" {
			if v := vols[m.Name]; v != nil && ok(v) {
				return true
			}
		}
	}
	return false
}

// probeMargin is how much longer than the worker's readiness timeout the
// startup probe must allow: 5 %, at least two minutes.
func probeMargin(ready int) int { return max(120, ready/20) }

// placeholderWord is a word of a template the operator replaces: REGISTRY,
// OVERLAY_TAG.
var placeholderWord = regexp.MustCompile(`^[A-Z][A-Z0-9_]*$`)

// imagePlaceholders are the template words left in an image reference:
// an upper-case first path component (REGISTRY/...) or tag (:VLLM_TAG).
// Registries, repositories and tags as they really are contain lower-case
// letters or digits.
func imagePlaceholders(ref string) []string {
	var out []string
	if first, _, ok := strings.Cut(ref, "/"); ok && placeholderWord.MatchString(first) {
		out = append(out, first)
	}
	if repo := repository(ref); repo != ref && !strings.Contains(ref, "@") {
		if tag := ref[len(repo)+1:]; placeholderWord.MatchString(tag) {
			out = append(out, tag)
		}
	}
	return out
}

// probeWindow is how long the kubelet lets a probe fail before it gives up
// (Kubernetes defaults: period 10 s, failure threshold 3).
func probeWindow(p *corev1.Probe) int {
	period, failures := p.PeriodSeconds, p.FailureThreshold
	if period == 0 {
		period = 10
	}
	if failures == 0 {
		failures = 3
	}
	return int(p.InitialDelaySeconds + period*failures)
}

// expand substitutes $(VAR) as the kubelet does: a defined variable is
// replaced, an undefined one is left as it is (and reported), $$ is a
// literal $.
func expand(s string, vals map[string]string) (string, []string) {
	var b strings.Builder
	var undef []string
	for i := 0; i < len(s); i++ {
		if s[i] != '$' || i+1 == len(s) {
			b.WriteByte(s[i])
			continue
		}
		switch s[i+1] {
		case '$':
			b.WriteByte('$')
			i++
		case '(':
			end := strings.IndexByte(s[i+2:], ')')
			if end < 0 {
				b.WriteString(s[i:])
				return b.String(), undef
			}
			name := s[i+2 : i+2+end]
			if v, ok := vals[name]; ok {
				b.WriteString(v)
			} else {
				b.WriteString(s[i : i+3+end])
				undef = append(undef, name)
			}
			i += 2 + end
		default:
			b.WriteByte('$')
		}
	}
	return b.String(), undef
}

// repository returns an image reference without its tag or digest.
func repository(ref string) string {
	if i := strings.IndexByte(ref, '@'); i >= 0 {
		ref = ref[:i]
	}
	if i := strings.LastIndexByte(ref, ':'); i > strings.LastIndexByte(ref, '/') {
		ref = ref[:i]
	}
	return ref
}

func hasTagOrDigest(ref string) bool { return repository(ref) != ref }

func isOverlayImage(ref string) bool {
	r := repository(ref)
	for _, o := range []string{OverlayRepo, V022OverlayRepo} {
		if r == o || strings.HasSuffix(r, "/"+o) {
			return true
		}
	}
	return false
}

// ManifestFiles lists the *.yaml and *.yml files anywhere under dir.
func ManifestFiles(dir string) ([]string, error) {
	var out []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && (strings.HasSuffix(p, ".yaml") || strings.HasSuffix(p, ".yml")) {
			out = append(out, p)
		}
		return nil
	})
	return out, err
}
