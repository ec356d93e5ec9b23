// Package preflight turns the hangs of a misconfigured deployment into a
// refusal with a reason, before the worker starts. The worst failures of
// these deployments do not error: every pod is Ready and the client waits
// until its own timeout. Most can be seen from inside the container in
// milliseconds. Each check says what it saw, why it matters and what to do.
package preflight

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/infera/infera-exec/internal/rdma"
	"github.com/infera/infera-exec/internal/workerargs"
	"github.com/infera/infera-exec/preflight/rules"

	"github.com/infera/infera-exec/internal/fsprobe"
)

// Severity of a failed check: an error refuses the start, a warning is
// logged, info is reported only.
type Severity string

const (
	Error Severity = "error"
	Warn  Severity = "warn"
	Info  Severity = "info"
)

// Status of a check.
type Status string

const (
	Pass    Status = "pass"
	Fail    Status = "fail"
	Skipped Status = "skipped" // disabled by INFERA_PREFLIGHT_SKIP, or nothing to look at
)

// Result is one check's outcome.
type Result struct {
	Name     string   `json:"name"`
	Status   Status   `json:"status"`
	Severity Severity `json:"severity,omitempty"` // of a failure
	Seen     string   `json:"seen"`
	Why      string   `json:"why,omitempty"`
	Do       string   `json:"do,omitempty"`
	// TookMicros is how long the check ran; DeadlinePassed, whether a
	// filesystem it touched did not answer within INFERA_PREFLIGHT_TIMEOUT.
	TookMicros     int64 `json:"took_us"`
	DeadlinePassed bool  `json:"deadline_passed"`
	// A rule's result: the file it came from (builtin:<file> or the
	// payload's), and what each fact it asked for looked at.
	Rule string   `json:"rule,omitempty"`
	Read []string `json:"read,omitempty"`

	// Fix is the fix in a few words, for the text line (Line); Do is
	// the whole of it. Brief, when set, is what the line says was seen,
	// Seen without its inventory.
	Fix   string `json:"-"`
	Brief string `json:"-"`
}

// Line is the finding's text line, at most about logging.TextBound
// characters: the check, what it saw and the fix in a few words; the
// record's detail (Detail), --doctor and the report say why and the
// whole fix.
func (r Result) Line() string {
	seen := r.Seen
	if r.Brief != "" {
		seen = r.Brief
	}
	if r.Fix == "" {
		return fmt.Sprintf("preflight %s: %s", r.Name, seen)
	}
	return fmt.Sprintf("preflight %s: %s; %s", r.Name, seen, r.Fix)
}

// Detail is what Line leaves out: why it matters and the whole fix.
func (r Result) Detail() string { return strings.TrimSpace(r.Why + " " + r.Do) }

// Failed reports whether r failed with severity s.
func (r Result) Failed(s Severity) bool { return r.Status == Fail && r.Severity == s }

// Facts are everything the checks look at; the stage fills them from the
// composed environment and the worker command, tests from fixtures.
type Facts struct {
	Args         workerargs.Args   // the worker command, read once
	Env          map[string]string // the worker's environment
	Given        map[string]string // as the container started infera-exec, before the payload's paths: what the placeholder check reads and counts, in --doctor and a start alike; nil: Env
	Sysfs        string            // /sys, or SYSFS_PATH
	RDMA         *rdma.Inventory   // the run's RDMA devices, read once (rdma.Read); nil: none was read
	ShmDir       string            // /dev/shm
	NofileHard   uint64
	ReadyTimeout int                                           // seconds
	ReadyDefault bool                                          // INFERA_ENGINE_READY_TIMEOUT was not set
	Chdir        string                                        // the worker's working directory (INFERA_EXEC_CHDIR)
	ShmMin       uint64                                        // bytes of /dev/shm below which shm warns
	NofileMin    uint64                                        // hard limit below which nofile warns
	HostLibionic string                                        // where the host provider is mounted (INFERA_HOST_LIBIONIC)
	AllowTCP     bool                                          // INFERA_ALLOW_TCP_KV=1
	ProviderABI  func(ibdev string) (min, max uint32, ok bool) // the provider build the worker will use, per device
	Statfs       func(path string) (FS, error)                 // a seam for tests; nil: the real statfs(2)
	Interfaces   func() ([]Interface, error)                   // a seam for tests; nil: the machine's
	RouteSource  func() (string, error)                        // a seam for tests; nil: RealRouteSource
	// Probe touches paths that may be on a filesystem that does not
	// answer (NFS, FUSE, ...) with a deadline; nil: every path is touched
	// directly (tests of local fixtures).
	Probe *fsprobe.Prober
	// TimeoutError: a filesystem that does not answer is an error, not a
	// warning (INFERA_PREFLIGHT_ON_TIMEOUT=error).
	TimeoutError bool

	// noNode: the facts come from a manifest, not a container on a node
	// (Static): a check that would read the node says the node decides.
	noNode bool

	// The rules (built-in and the payload's), the native tree's
	// capabilities (NativeKnown: a tree was chosen), where the engine
	// package is (nil: not located), and the memory cgroup's directory.
	Rules        []*rules.Rule
	Capabilities []string
	NativeKnown  bool
	Engine       Engine
	CgroupRoot   string

	model *modelAnswer           // the model directory, read once for model-dir and the rules
	cfg   *modelConfig           // its config.json, decoded once
	facts map[string]rules.Value // each fact a rule asked for, read once
	eng   *engineLoc

	// listing is the interfaces and the address the rule picks among
	// them, read once per Facts: the advertise-ip check and AdvertiseIP
	// (the pass's edit) decide from the same listing.
	listing *advListing
	route   *routeAnswer // RouteSource's answer, asked once
}

// Check is a named check.
type Check struct {
	Name string
	What string // one line describing the check (docs/preflight.md has the full table)
	Fix  string // its fix in a few words, for the text line (Result.Line)
	Run  func(in *Facts) Result
}

// Checks are all checks, in the order they run and are reported: the
// command's own text first, then what it names (the model directory, the
// addresses), then the node's resources.
var Checks = []Check{
	{
		Name: "placeholders",
		Fix:  "substitute them in the manifest",
		What: "template placeholders such as <MODEL_DIR> left in the command or environment",
		Run:  checkPlaceholders,
	},
	{
		Name: "model-dir",
		Fix:  "check the model volume and the path in the command",
		What: "the model directory exists, holds readable weights, and loads within the readiness timeout from its filesystem",
		Run:  checkModelDir,
	},
	{
		Name: "advertise",
		Fix:  "advertise this pod's routable address ($(POD_IP))",
		What: "a prefill/decode worker advertises an address its peer on another node can reach",
		Run:  checkAdvertise,
	},
	{
		Name: "advertise-ip",
		What: "choose " + AdvertiseVar + ": a private IPv4 address of a physical interface",
		Run:  checkAdvertiseIP,
	},
	{
		Name: "rdma",
		What: "a prefill/decode worker sees RDMA devices, /dev/infiniband, and a provider that supports their kernel ABI",
		Run:  checkRDMA,
	},
	{
		Name: "shm",
		Fix:  "mount a memory emptyDir at /dev/shm (--shm-size=16g with Docker)",
		What: "/dev/shm is large enough for NCCL/RCCL and the engines' IPC, and not mounted noexec",
		Run:  checkShm,
	},
	{
		Name: "nofile",
		Fix:  "raise the runtime's nofile limit (--ulimit nofile=1048576)",
		What: "the open-file hard limit is high enough for a router with many in-flight requests",
		Run:  checkNofile,
	},
}

// Names lists the check names.
func Names() []string {
	var out []string
	for _, c := range Checks {
		out = append(out, c.Name)
	}
	return out
}

// runChecks runs every check not named in skip (INFERA_PREFLIGHT_SKIP). Unknown
// names in skip are returned so the caller can warn about a misspelling.
func runChecks(in *Facts, skipList []string) (results []Result, unknown []string) {
	skip := map[string]bool{}
	for _, n := range skipList {
		skip[n] = true
	}
	known := map[string]bool{}
	for _, c := range Checks {
		known[c.Name] = true
		if skip[c.Name] {
			results = append(results, Result{Name: c.Name, Status: Skipped, Seen: "disabled by INFERA_PREFLIGHT_SKIP"})
			continue
		}
		start, passed := time.Now(), in.Probe.Passed()
		r := c.Run(in)
		r.Name = c.Name
		if r.Fix == "" && r.Status == Fail {
			r.Fix = c.Fix
		}
		r.TookMicros = time.Since(start).Microseconds()
		r.DeadlinePassed = in.Probe.Passed() > passed
		results = append(results, r)
	}
	for n := range skip {
		if !known[n] {
			unknown = append(unknown, n)
		}
	}
	sort.Strings(unknown)
	return results, unknown
}

func pass(seen string) Result { return Result{Status: Pass, Seen: seen} }

func skipped(seen string) Result { return Result{Status: Skipped, Seen: seen} }

func fail(sev Severity, seen, why, do string) Result {
	return Result{Status: Fail, Severity: sev, Seen: seen, Why: why, Do: do}
}

// FS is what statfs says of a filesystem.
type FS struct {
	Magic   int64  `json:"magic"`
	Type    string `json:"type"`    // nfs, cifs, fuse, ceph, lustre, overlay, tmpfs, ext4, xfs, ...
	Network bool   `json:"network"` // reads cross a network: slow for multi-terabyte checkpoints
	Size    uint64 `json:"size"`    // bytes: blocks times block size
	Noexec  bool   `json:"noexec"`  // mounted noexec
}

// Interface is a network interface with its addresses.
type Interface struct {
	Name     string
	Addrs    []string // IP addresses, without prefix length
	Up       bool
	Loopback bool
}

// answers is nil when path's filesystem is local or answered a stat
// within the deadline; else the deadline that passed. Once a mount has
// not answered, later paths on it are refused at once.
func answers(in *Facts, path string) *fsprobe.DeadlineError {
	_, err := in.Probe.Answers(path)
	var d *fsprobe.DeadlineError
	if errors.As(err, &d) {
		return d
	}
	return nil
}

// unanswered is the result of a check whose filesystem did not answer: a
// warning, so the worker still starts (it may wait on the same mount, but
// then the log says which), or an error when the operator asked for one.
func unanswered(in *Facts, what string, d *fsprobe.DeadlineError) Result {
	sev := Warn
	if in.TimeoutError {
		sev = Error
	}
	r := fail(sev, what+" "+d.Error(),
		"A filesystem whose server or daemon stopped answering blocks every "+
			"access: the worker would hang on it without a message.",
		d.Fix()+fmt.Sprintf(" The deadline is INFERA_PREFLIGHT_TIMEOUT (%s); INFERA_PREFLIGHT_ON_TIMEOUT=error refuses the start instead.", d.After))
	r.Fix = "check the mount " + d.Mount.Point + " and its server"
	return r
}
