package deploy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"
)

// The Kubernetes manifests of deploy/k8s are checked twice: every document
// must decode strictly into the API type of its kind (no unknown kind, no
// unknown or mis-cased field), and the objects must fit together and fit
// the binary (the StatefulSet's Service is headless, selectors select the
// pods, ports line up, every RAFTLOG_* variable is one `raftlog serve`
// reads, the data volume is where the data directory is, ...).

const k8sDir = "k8s"

// kustomization is the part of kustomize's Kustomization used here.
type kustomization struct {
	APIVersion string   `json:"apiVersion"`
	Kind       string   `json:"kind"`
	Namespace  string   `json:"namespace,omitempty"`
	Resources  []string `json:"resources"`
}

// manifests are the decoded documents of a manifest directory.
type manifests struct {
	files          []string // the YAML files, sorted
	statefulSets   []*appsv1.StatefulSet
	services       []*corev1.Service
	pdbs           []*policyv1.PodDisruptionBudget
	kustomizations map[string]*kustomization // by file
}

// kinds maps apiVersion and kind to a new object of the type decoded.
var kinds = map[string]func() any{
	"apps/v1 StatefulSet":                           func() any { return new(appsv1.StatefulSet) },
	"v1 Service":                                    func() any { return new(corev1.Service) },
	"policy/v1 PodDisruptionBudget":                 func() any { return new(policyv1.PodDisruptionBudget) },
	"kustomize.config.k8s.io/v1beta1 Kustomization": func() any { return new(kustomization) },
}

func readManifestDir(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{}
	for _, e := range ents {
		if e.IsDir() || (!strings.HasSuffix(e.Name(), ".yaml") && !strings.HasSuffix(e.Name(), ".yml")) {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		files[e.Name()] = b
	}
	if len(files) == 0 {
		t.Fatalf("no YAML files in %s", dir)
	}
	return files
}

var docSeparator = regexp.MustCompile(`(?m)^---[ \t]*$`)

// decodeManifests decodes every document of every file strictly.
func decodeManifests(files map[string][]byte) (*manifests, error) {
	m := &manifests{kustomizations: map[string]*kustomization{}}
	for name := range files {
		m.files = append(m.files, name)
	}
	slices.Sort(m.files)
	var errs []error
	for _, name := range m.files {
		for i, doc := range docSeparator.Split(string(files[name]), -1) {
			obj, err := decodeDocument([]byte(doc))
			if err != nil {
				errs = append(errs, fmt.Errorf("%s document %d: %w", name, i+1, err))
				continue
			}
			switch o := obj.(type) {
			case nil: // only comments
			case *appsv1.StatefulSet:
				m.statefulSets = append(m.statefulSets, o)
			case *corev1.Service:
				m.services = append(m.services, o)
			case *policyv1.PodDisruptionBudget:
				m.pdbs = append(m.pdbs, o)
			case *kustomization:
				m.kustomizations[name] = o
			}
		}
	}
	return m, errors.Join(errs...)
}

// decodeDocument decodes one YAML document into the type of its kind; nil
// for a document holding nothing.
func decodeDocument(doc []byte) (any, error) {
	js, err := yaml.YAMLToJSONStrict(doc)
	if err != nil {
		return nil, err
	}
	if bytes.Equal(bytes.TrimSpace(js), []byte("null")) {
		return nil, nil
	}
	var tm metav1.TypeMeta
	if err := json.Unmarshal(js, &tm); err != nil {
		return nil, err
	}
	newObj, ok := kinds[tm.APIVersion+" "+tm.Kind]
	if !ok {
		return nil, fmt.Errorf("unknown kind %q of apiVersion %q", tm.Kind, tm.APIVersion)
	}
	obj := newObj()
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.DisallowUnknownFields()
	if err := dec.Decode(obj); err != nil {
		return nil, fmt.Errorf("%s: %w", tm.Kind, err)
	}
	if dec.More() {
		return nil, fmt.Errorf("%s: data after the object", tm.Kind)
	}
	// encoding/json matches field names regardless of case; the API
	// server does not. Every key must come back from a round trip through
	// the type as it was written.
	back, err := json.Marshal(obj)
	if err != nil {
		return nil, err
	}
	var orig, round any
	if err := json.Unmarshal(js, &orig); err != nil {
		return nil, err
	}
	if err := json.Unmarshal(back, &round); err != nil {
		return nil, err
	}
	if err := sameKeys(tm.Kind, orig, round); err != nil {
		return nil, err
	}
	return obj, nil
}

// sameKeys reports a key of orig that round lacks, unless its value is an
// empty one (which the round trip may omit).
func sameKeys(path string, orig, round any) error {
	switch o := orig.(type) {
	case map[string]any:
		r, _ := round.(map[string]any)
		for k, v := range o {
			rv, ok := r[k]
			if !ok {
				if isEmpty(v) {
					continue
				}
				return fmt.Errorf("%s: unknown field %q (field names are case-sensitive)", path, k)
			}
			if err := sameKeys(path+"."+k, v, rv); err != nil {
				return err
			}
		}
	case []any:
		r, _ := round.([]any)
		for i, v := range o {
			if i >= len(r) {
				return fmt.Errorf("%s[%d]: lost in a round trip", path, i)
			}
			if err := sameKeys(fmt.Sprintf("%s[%d]", path, i), v, r[i]); err != nil {
				return err
			}
		}
	}
	return nil
}

func isEmpty(v any) bool {
	if v == nil {
		return true
	}
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.Map, reflect.Slice, reflect.String:
		return rv.Len() == 0
	}
	return rv.IsZero()
}

// reference is what the manifests must agree with outside deploy/k8s.
type reference struct {
	// serveEnv: the variables `raftlog serve` reads.
	serveEnv map[string]bool
	// uid, gid: the image's USER.
	uid, gid int64
}

var (
	flagTableRow = regexp.MustCompile("(?m)^\\| `--[a-z0-9-]+` \\| `(RAFTLOG_[A-Z0-9_]+)` \\|")
	dockerUser   = regexp.MustCompile(`(?m)^USER\s+(\d+)(?::(\d+))?\s*$`)
	envRef       = regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)
)

// loadReference reads the serve variables from docs/operations.md's
// generated flag table (cmd/raftlog's tests keep it equal to the flag set)
// and the user from the Dockerfile.
func loadReference(t *testing.T) reference {
	t.Helper()
	ops, err := os.ReadFile(filepath.Join("..", "docs", "operations.md"))
	if err != nil {
		t.Fatal(err)
	}
	ref := reference{serveEnv: map[string]bool{}}
	for _, m := range flagTableRow.FindAllStringSubmatch(string(ops), -1) {
		ref.serveEnv[m[1]] = true
	}
	for _, want := range []string{"RAFTLOG_NODE_ID", "RAFTLOG_DATA_DIR", "RAFTLOG_JOIN"} {
		if !ref.serveEnv[want] {
			t.Fatalf("the flag table of docs/operations.md does not list %s (%d variables read)", want, len(ref.serveEnv))
		}
	}
	df, err := os.ReadFile("Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	m := dockerUser.FindStringSubmatch(string(df))
	if m == nil {
		t.Fatal("the Dockerfile has no numeric USER")
	}
	ref.uid, _ = strconv.ParseInt(m[1], 10, 64)
	ref.gid = ref.uid
	if m[2] != "" {
		ref.gid, _ = strconv.ParseInt(m[2], 10, 64)
	}
	return ref
}

// checker gathers the problems of a set of manifests.
type checker struct {
	m    *manifests
	ref  reference
	errs []error
}

func (c *checker) errorf(format string, args ...any) {
	c.errs = append(c.errs, fmt.Errorf(format, args...))
}

// checkManifests checks that the objects fit together and fit the binary.
func checkManifests(m *manifests, ref reference) error {
	c := &checker{m: m, ref: ref}
	c.kustomizations()
	if len(m.statefulSets) != 1 {
		c.errorf("%d StatefulSets, want 1", len(m.statefulSets))
		return errors.Join(c.errs...)
	}
	ss := m.statefulSets[0]
	c.statefulSet(ss)
	c.services(ss)
	c.pdbs(ss)
	return errors.Join(c.errs...)
}

func (c *checker) kustomizations() {
	for file, k := range c.m.kustomizations {
		var want []string
		for _, f := range c.m.files {
			if _, ok := c.m.kustomizations[f]; !ok {
				want = append(want, f)
			}
		}
		have := slices.Clone(k.Resources)
		slices.Sort(have)
		if !slices.Equal(have, want) {
			c.errorf("%s: resources %v, want the other files %v", file, k.Resources, want)
		}
	}
}

// selects reports whether sel selects pods labelled lbl.
func selects(sel *metav1.LabelSelector, lbl map[string]string) (bool, error) {
	if sel == nil {
		return false, errors.New("no selector")
	}
	s, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil {
		return false, err
	}
	if s.Empty() {
		return false, errors.New("empty selector (selects everything)")
	}
	return s.Matches(labels.Set(lbl)), nil
}

func (c *checker) headless(ss *appsv1.StatefulSet) *corev1.Service {
	for _, s := range c.m.services {
		if s.Name == ss.Spec.ServiceName {
			return s
		}
	}
	return nil
}

func (c *checker) statefulSet(ss *appsv1.StatefulSet) {
	spec := &ss.Spec
	pod := &spec.Template.Spec
	podLabels := spec.Template.Labels
	if ok, err := selects(spec.Selector, podLabels); err != nil || !ok {
		c.errorf("StatefulSet %s: its selector does not select its pods (%v)", ss.Name, err)
	}
	if spec.PodManagementPolicy != appsv1.ParallelPodManagement {
		c.errorf("StatefulSet %s: podManagementPolicy %q, want Parallel (no node is ready before the cluster forms)", ss.Name, spec.PodManagementPolicy)
	}
	replicas := int32(1)
	if spec.Replicas != nil {
		replicas = *spec.Replicas
	}
	if replicas < 3 {
		c.errorf("StatefulSet %s: %d replicas, want at least 3", ss.Name, replicas)
	}
	if s := c.headless(ss); s == nil {
		c.errorf("StatefulSet %s: serviceName %q names no Service", ss.Name, spec.ServiceName)
	} else if s.Spec.ClusterIP != corev1.ClusterIPNone || !s.Spec.PublishNotReadyAddresses {
		c.errorf("StatefulSet %s: its Service %s must be headless (clusterIP None) and publish not-ready addresses", ss.Name, s.Name)
	}
	if g := pod.TerminationGracePeriodSeconds; g == nil || *g < 30 {
		c.errorf("StatefulSet %s: terminationGracePeriodSeconds %v, want at least 30 (the leadership handoff)", ss.Name, g)
	}
	if pod.EnableServiceLinks == nil || *pod.EnableServiceLinks {
		c.errorf("StatefulSet %s: enableServiceLinks must be false (the Service raftlog would add RAFTLOG_* variables)", ss.Name)
	}
	if len(pod.Containers) != 1 {
		c.errorf("StatefulSet %s: %d containers, want 1", ss.Name, len(pod.Containers))
		return
	}
	ct := &pod.Containers[0]
	if len(ct.Command) < 2 || ct.Command[0] != "/raftlog" || ct.Command[1] != "serve" {
		c.errorf("container %s: command %q, want /raftlog serve (the image has no shell)", ct.Name, ct.Command)
	}
	c.security(pod, ct)
	c.env(ss, replicas, ct)
	c.probes(ct)
	c.volumes(ss, ct)
}

func (c *checker) security(pod *corev1.PodSpec, ct *corev1.Container) {
	psc := pod.SecurityContext
	if psc == nil {
		psc = &corev1.PodSecurityContext{}
	}
	csc := ct.SecurityContext
	if csc == nil {
		csc = &corev1.SecurityContext{}
	}
	nonRoot := csc.RunAsNonRoot
	if nonRoot == nil {
		nonRoot = psc.RunAsNonRoot
	}
	if nonRoot == nil || !*nonRoot {
		c.errorf("container %s: runAsNonRoot is not set", ct.Name)
	}
	uid, gid := csc.RunAsUser, csc.RunAsGroup
	if uid == nil {
		uid = psc.RunAsUser
	}
	if gid == nil {
		gid = psc.RunAsGroup
	}
	if uid == nil || *uid != c.ref.uid || gid == nil || *gid != c.ref.gid {
		c.errorf("container %s: runs as %v:%v, the image's USER is %d:%d", ct.Name, deref(uid), deref(gid), c.ref.uid, c.ref.gid)
	}
	if psc.FSGroup == nil || *psc.FSGroup != c.ref.gid {
		c.errorf("pod: fsGroup %v, want %d so the volume is writable", deref(psc.FSGroup), c.ref.gid)
	}
	if csc.AllowPrivilegeEscalation == nil || *csc.AllowPrivilegeEscalation {
		c.errorf("container %s: allowPrivilegeEscalation is not false", ct.Name)
	}
}

func deref(p *int64) any {
	if p == nil {
		return "unset"
	}
	return *p
}

// containerPort resolves a Service's targetPort or a probe's port.
func containerPort(ct *corev1.Container, p intstr.IntOrString, proto corev1.Protocol) (corev1.ContainerPort, bool) {
	if proto == "" {
		proto = corev1.ProtocolTCP
	}
	for _, cp := range ct.Ports {
		cpProto := cp.Protocol
		if cpProto == "" {
			cpProto = corev1.ProtocolTCP
		}
		if cpProto != proto {
			continue
		}
		if p.Type == intstr.String && cp.Name == p.StrVal || p.Type == intstr.Int && cp.ContainerPort == p.IntVal {
			return cp, true
		}
	}
	return corev1.ContainerPort{}, false
}

// namedPort is the TCP container port called name, 0 when none.
func namedPort(ct *corev1.Container, name string) int32 {
	cp, ok := containerPort(ct, intstr.FromString(name), corev1.ProtocolTCP)
	if !ok {
		return 0
	}
	return cp.ContainerPort
}

// listeners maps the serve variables of listen addresses to the name of
// the container port each must match.
var listeners = map[string]string{
	"RAFTLOG_KAFKA_ADDR":  "kafka",
	"RAFTLOG_RAFT_ADDR":   "raft",
	"RAFTLOG_GOSSIP_ADDR": "gossip",
	"RAFTLOG_HTTP_ADDR":   "http",
}

// expand resolves $(NAME) references as the kubelet does: to variables
// defined earlier in the list, a reference to anything else stays as it
// is.
func expand(s string, defined map[string]string) string {
	return envRef.ReplaceAllStringFunc(s, func(ref string) string {
		if v, ok := defined[ref[2:len(ref)-1]]; ok {
			return v
		}
		return ref
	})
}

// podEnv is the environment of pod ordinal i, with the downward API
// filled in as the kubelet would (POD_IP made up).
func podEnv(ss *appsv1.StatefulSet, ct *corev1.Container, ordinal int) map[string]string {
	env := map[string]string{}
	name := fmt.Sprintf("%s-%d", ss.Name, ordinal)
	for _, e := range ct.Env {
		switch {
		case e.ValueFrom == nil:
			env[e.Name] = expand(e.Value, env)
		case e.ValueFrom.FieldRef != nil:
			switch e.ValueFrom.FieldRef.FieldPath {
			case "metadata.name":
				env[e.Name] = name
			case "metadata.namespace":
				env[e.Name] = "ns"
			case "status.podIP":
				env[e.Name] = fmt.Sprintf("10.0.0.%d", ordinal+1)
			case "metadata.labels['" + appsv1.PodIndexLabel + "']":
				env[e.Name] = strconv.Itoa(ordinal)
			}
		}
	}
	return env
}

func (c *checker) env(ss *appsv1.StatefulSet, replicas int32, ct *corev1.Container) {
	defined := map[string]bool{}
	referenced := map[string]bool{}
	for _, e := range ct.Env {
		if defined[e.Name] {
			c.errorf("env %s: set twice", e.Name)
		}
		for _, m := range envRef.FindAllStringSubmatch(e.Value, -1) {
			if !defined[m[1]] {
				c.errorf("env %s: refers to $(%s), which is not set before it (left unexpanded)", e.Name, m[1])
			}
			referenced[m[1]] = true
		}
		defined[e.Name] = true
		if strings.HasPrefix(e.Name, "RAFTLOG_") && !c.ref.serveEnv[e.Name] {
			c.errorf("env %s: raftlog serve reads no such variable", e.Name)
		}
		if e.ValueFrom != nil && (e.ValueFrom.FieldRef == nil || e.Value != "") {
			c.errorf("env %s: only downward API field references are expected", e.Name)
		}
	}
	for _, e := range ct.Env {
		if !strings.HasPrefix(e.Name, "RAFTLOG_") && !referenced[e.Name] {
			c.errorf("env %s: neither read by raftlog serve nor used by a RAFTLOG_* value", e.Name)
		}
	}
	var nodeID *corev1.EnvVar
	for i := range ct.Env {
		if ct.Env[i].Name == "RAFTLOG_NODE_ID" {
			nodeID = &ct.Env[i]
		}
	}
	if nodeID == nil || nodeID.ValueFrom == nil || nodeID.ValueFrom.FieldRef == nil ||
		nodeID.ValueFrom.FieldRef.FieldPath != "metadata.labels['"+appsv1.PodIndexLabel+"']" {
		c.errorf("env RAFTLOG_NODE_ID: must come from the pod's %s label", appsv1.PodIndexLabel)
	}

	peers := ss.Spec.ServiceName
	for i := 0; i < int(replicas); i++ {
		env := podEnv(ss, ct, i)
		self := fmt.Sprintf("%s-%d.%s.", ss.Name, i, peers)
		for v, port := range listeners {
			want := namedPort(ct, port)
			_, p, err := net.SplitHostPort(env[v])
			if want == 0 || err != nil || p != strconv.Itoa(int(want)) {
				c.errorf("pod %d: %s=%q does not listen on the container port %s (%d)", i, v, env[v], port, want)
			}
		}
		for v, port := range map[string]string{"RAFTLOG_ADVERTISED_KAFKA_ADDR": "kafka", "RAFTLOG_ADVERTISED_RAFT_ADDR": "raft"} {
			h, p, err := net.SplitHostPort(env[v])
			if err != nil || !strings.HasPrefix(h+".", self) || p != strconv.Itoa(int(namedPort(ct, port))) {
				c.errorf("pod %d: %s=%q is not the pod's own name under %s on the %s port", i, v, env[v], peers, port)
			}
		}
		if h, p, err := net.SplitHostPort(env["RAFTLOG_ADVERTISED_GOSSIP_ADDR"]); env["RAFTLOG_ADVERTISED_GOSSIP_ADDR"] != "" &&
			(err != nil || net.ParseIP(h) == nil || p != strconv.Itoa(int(namedPort(ct, "gossip")))) {
			c.errorf("pod %d: RAFTLOG_ADVERTISED_GOSSIP_ADDR=%q is not an IP address and the gossip port (memberlist advertises IPs)", i, env["RAFTLOG_ADVERTISED_GOSSIP_ADDR"])
		}
		voters, err := strconv.Atoi(env["RAFTLOG_CONTROLLER_VOTERS"])
		if err != nil || voters < 1 || voters > int(replicas) {
			c.errorf("pod %d: RAFTLOG_CONTROLLER_VOTERS=%q, want 1..%d", i, env["RAFTLOG_CONTROLLER_VOTERS"], replicas)
		}
		if n, err := strconv.Atoi(env["RAFTLOG_EXPECT_NODES"]); err != nil || n < voters || n > int(replicas) {
			c.errorf("pod %d: RAFTLOG_EXPECT_NODES=%q, want %d..%d", i, env["RAFTLOG_EXPECT_NODES"], voters, replicas)
		}
		seeds := map[int]bool{}
		for _, s := range strings.Split(env["RAFTLOG_JOIN"], ",") {
			h, p, err := net.SplitHostPort(s)
			if err != nil || p != strconv.Itoa(int(namedPort(ct, "gossip"))) {
				c.errorf("pod %d: join address %q is not on the gossip port", i, s)
				continue
			}
			var ord int
			var rest string
			if n, _ := fmt.Sscanf(h, ss.Name+"-%d%s", &ord, &rest); n != 2 || ord < 0 || ord >= int(replicas) || !strings.HasPrefix(rest, "."+peers+".") {
				c.errorf("pod %d: join address %q names no pod of %s under %s", i, s, ss.Name, peers)
				continue
			}
			seeds[ord] = true
		}
		for v := 0; v < voters; v++ {
			if !seeds[v] {
				c.errorf("pod %d: RAFTLOG_JOIN lacks node %d, a controller voter", i, v)
			}
		}
	}
}

func (c *checker) probes(ct *corev1.Container) {
	http := namedPort(ct, "http")
	check := func(kind string, p *corev1.Probe, path string) {
		if p == nil || p.HTTPGet == nil {
			c.errorf("container %s: no HTTP %s probe", ct.Name, kind)
			return
		}
		cp, ok := containerPort(ct, p.HTTPGet.Port, corev1.ProtocolTCP)
		if p.HTTPGet.Path != path || !ok || cp.ContainerPort != http {
			c.errorf("container %s: %s probe GET %s on port %s, want %s on the HTTP port %d", ct.Name, kind, p.HTTPGet.Path, p.HTTPGet.Port.String(), path, http)
		}
	}
	check("readiness", ct.ReadinessProbe, "/readyz")
	check("liveness", ct.LivenessProbe, "/healthz")
	if ct.StartupProbe != nil {
		check("startup", ct.StartupProbe, "/healthz")
	}
}

func (c *checker) volumes(ss *appsv1.StatefulSet, ct *corev1.Container) {
	dataDir := podEnv(ss, ct, 0)["RAFTLOG_DATA_DIR"]
	found := false
	for _, vm := range ct.VolumeMounts {
		claimed := slices.ContainsFunc(ss.Spec.VolumeClaimTemplates, func(p corev1.PersistentVolumeClaim) bool { return p.Name == vm.Name })
		inPod := slices.ContainsFunc(ss.Spec.Template.Spec.Volumes, func(v corev1.Volume) bool { return v.Name == vm.Name })
		if !claimed && !inPod {
			c.errorf("container %s: volume mount %s names no volumeClaimTemplate or volume", ct.Name, vm.Name)
		}
		if claimed && vm.MountPath == dataDir && !vm.ReadOnly {
			found = true
		}
	}
	if !found {
		c.errorf("container %s: RAFTLOG_DATA_DIR=%q is not the mount of a volumeClaimTemplate", ct.Name, dataDir)
	}
	for _, p := range ss.Spec.VolumeClaimTemplates {
		if _, ok := p.Spec.Resources.Requests[corev1.ResourceStorage]; !ok {
			c.errorf("volumeClaimTemplate %s: no storage request", p.Name)
		}
	}
}

func (c *checker) services(ss *appsv1.StatefulSet) {
	ct := &ss.Spec.Template.Spec.Containers[0]
	bootstrap := false
	for _, s := range c.m.services {
		if len(s.Spec.Selector) == 0 {
			c.errorf("Service %s: no selector", s.Name)
		} else if ok, _ := selects(&metav1.LabelSelector{MatchLabels: s.Spec.Selector}, ss.Spec.Template.Labels); !ok {
			c.errorf("Service %s: its selector %v does not select the pods of %s", s.Name, s.Spec.Selector, ss.Name)
		}
		for _, p := range s.Spec.Ports {
			tp := p.TargetPort
			if tp.Type == intstr.Int && tp.IntVal == 0 {
				tp = intstr.FromInt32(p.Port)
			}
			proto := p.Protocol
			if proto == "" {
				proto = corev1.ProtocolTCP
			}
			cp, ok := containerPort(ct, tp, proto)
			if !ok {
				c.errorf("Service %s port %s: targetPort %s (%s) is no container port", s.Name, p.Name, tp.String(), proto)
				continue
			}
			if s.Spec.ClusterIP != corev1.ClusterIPNone && cp.ContainerPort == namedPort(ct, "kafka") {
				bootstrap = true
			}
		}
	}
	if !bootstrap {
		c.errorf("no client Service (not headless) exposes the Kafka port")
	}
}

func (c *checker) pdbs(ss *appsv1.StatefulSet) {
	if len(c.m.pdbs) == 0 {
		c.errorf("no PodDisruptionBudget")
	}
	for _, p := range c.m.pdbs {
		if ok, err := selects(p.Spec.Selector, ss.Spec.Template.Labels); err != nil || !ok {
			c.errorf("PodDisruptionBudget %s: does not select the pods of %s (%v)", p.Name, ss.Name, err)
		}
		if mu := p.Spec.MaxUnavailable; mu == nil || mu.Type != intstr.Int || mu.IntVal != 1 || p.Spec.MinAvailable != nil {
			c.errorf("PodDisruptionBudget %s: want maxUnavailable 1 and no minAvailable", p.Name)
		}
	}
}

// TestK8sManifests decodes and checks deploy/k8s.
func TestK8sManifests(t *testing.T) {
	ref := loadReference(t)
	files := readManifestDir(t, k8sDir)
	m, err := decodeManifests(files)
	if err != nil {
		t.Fatal(err)
	}
	if len(m.services) < 2 || len(m.pdbs) != 1 || len(m.kustomizations) != 1 {
		t.Fatalf("%d Services, %d PodDisruptionBudgets, %d kustomizations", len(m.services), len(m.pdbs), len(m.kustomizations))
	}
	if err := checkManifests(m, ref); err != nil {
		t.Fatal(err)
	}
}

// TestK8sManifestsRefuse feeds mutated copies of deploy/k8s: each must be
// refused, for the reason given.
func TestK8sManifestsRefuse(t *testing.T) {
	ref := loadReference(t)
	pristine := readManifestDir(t, k8sDir)
	for _, tc := range []struct {
		name, file, old, new, want string
	}{
		{"typo'd field", "statefulset.yaml", "readinessProbe:", "readinesProbe:", `unknown field "readinesProbe"`},
		{"mis-cased field", "statefulset.yaml", "serviceName:", "servicename:", `unknown field "servicename"`},
		{"unknown kind", "pdb.yaml", "kind: PodDisruptionBudget", "kind: PodDisruptionBudgets", "unknown kind"},
		{"wrong apiVersion", "pdb.yaml", "apiVersion: policy/v1", "apiVersion: policy/v1beta1", "unknown kind"},
		{"duplicate key", "pdb.yaml", "  maxUnavailable: 1\n", "  maxUnavailable: 1\n  maxUnavailable: 1\n", "maxUnavailable"},
		{"serviceName not headless", "statefulset.yaml", "serviceName: raftlog-peers", "serviceName: raftlog", "must be headless"},
		{"not-ready pods unpublished", "services.yaml", "publishNotReadyAddresses: true", "publishNotReadyAddresses: false", "must be headless"},
		{"readiness path", "statefulset.yaml", "path: /readyz", "path: /ready", "readiness probe GET /ready"},
		{"unknown variable", "statefulset.yaml", "name: RAFTLOG_EXPECT_NODES", "name: RAFTLOG_EXPECTED_NODES", "reads no such variable"},
		{"node id from elsewhere", "statefulset.yaml", "metadata.labels['apps.kubernetes.io/pod-index']", "metadata.name", "RAFTLOG_NODE_ID: must come"},
		{"unset reference", "statefulset.yaml", "$(POD_NAME).raftlog-peers.$(POD_NAMESPACE).svc:9092", "$(POD_HOSTNAME).raftlog-peers.$(POD_NAMESPACE).svc:9092", "$(POD_HOSTNAME)"},
		{"listener off its port", "statefulset.yaml", "value: 0.0.0.0:9392", "value: 0.0.0.0:9393", "RAFTLOG_HTTP_ADDR"},
		{"target port", "services.yaml", "targetPort: raft", "targetPort: rafts", "targetPort rafts"},
		{"Service selector", "services.yaml", "  selector:\n    app.kubernetes.io/name: raftlog\n", "  selector:\n    app.kubernetes.io/name: raftlog-client\n", "does not select"},
		{"no client Service", "services.yaml", "component: bootstrap\nspec:\n", "component: bootstrap\nspec:\n  clusterIP: None\n", "no client Service"},
		{"PDB", "pdb.yaml", "maxUnavailable: 1", "maxUnavailable: 2", "maxUnavailable 1"},
		{"data mount", "statefulset.yaml", "mountPath: /data", "mountPath: /var/lib/raftlog", "RAFTLOG_DATA_DIR"},
		{"claim name", "statefulset.yaml", "        name: data\n      spec:", "        name: log\n      spec:", "names no volumeClaimTemplate"},
		{"user", "statefulset.yaml", "runAsUser: 65532", "runAsUser: 1000", "the image's USER"},
		{"service links", "statefulset.yaml", "enableServiceLinks: false", "enableServiceLinks: true", "enableServiceLinks"},
		{"ordered start", "statefulset.yaml", "podManagementPolicy: Parallel", "podManagementPolicy: OrderedReady", "Parallel"},
		{"join", "statefulset.yaml", "raftlog-2.raftlog-peers.$(POD_NAMESPACE).svc:9292", "raftlog-3.raftlog-peers.$(POD_NAMESPACE).svc:9292", "names no pod"},
		{"kustomization", "kustomization.yaml", "  - pdb.yaml\n", "", "want the other files"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			files := map[string][]byte{}
			for k, v := range pristine {
				files[k] = v
			}
			orig := string(files[tc.file])
			mutated := strings.Replace(orig, tc.old, tc.new, 1)
			if mutated == orig {
				t.Fatalf("%s has no %q to replace", tc.file, tc.old)
			}
			files[tc.file] = []byte(mutated)
			m, err := decodeManifests(files)
			if err == nil {
				err = checkManifests(m, ref)
			}
			if err == nil {
				t.Fatal("accepted")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("refused, but not for %q:\n%v", tc.want, err)
			}
			t.Logf("refused: %v", err)
		})
	}
}
