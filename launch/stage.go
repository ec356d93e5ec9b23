package launch

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"

	"github.com/infera/infera-exec/config"
	"github.com/infera/infera-exec/internal/environ"
	"github.com/infera/infera-exec/internal/fsprobe"
	"github.com/infera/infera-exec/internal/inheritfd"
	"github.com/infera/infera-exec/internal/logging"
	"github.com/infera/infera-exec/internal/lookpath"
	"github.com/infera/infera-exec/internal/sigstart"
	"github.com/infera/infera-exec/report"
)

// Input is what the launch step takes: the decided configuration, the
// worker command, and the worker's environment as composed so far (its
// PATH finds the command).
type Input struct {
	Config  config.Config
	Command []string
	Env     *environ.Env
	DryRun  bool
	Log     *slog.Logger
	// Probe reads the model's size after a worker the OOM killer ended
	// (init mode), with the run's deadline.
	Probe *fsprobe.Prober
	// Root is the image root whose etc/passwd and etc/group name the
	// worker's user (Config.User); "" is /.
	Root string
}

// Outcome is what is (or would be) executed: the report's exec section.
type Outcome struct {
	Command report.Argv `json:"command"` // as given
	Path    string      `json:"path,omitempty"`
	Argv    report.Argv `json:"argv,omitempty"`
	Cwd     string      `json:"cwd"`
	// Env is the worker's full environment, shown by --explain only
	// (--verbose or --json); never in the report file.
	Env    report.Env `json:"env,omitempty"`
	Nofile Nofile     `json:"nofile"`
	// Init is how infera-exec stays as the worker's init ("init", or
	// "init-group" when signals go to the worker's process group); empty:
	// it execs the worker and is gone.
	Init config.InitMode `json:"init,omitempty"`
	// User is the user the worker runs as (--user, INFERA_EXEC_USER);
	// nil: as infera-exec runs.
	User *Drop `json:"user,omitempty"`
	// Edits is what the worker's environment gains:
	// INFERA_ENGINE_READY_TIMEOUT, and HOME of User.
	Edits []environ.Edit `json:"-"`
	// Ended is how the worker ended, once an init's Start returns: the
	// line the init logged (the OOM killer's, a signal's or an exit
	// status's).
	Ended    string `json:"-"`
	oom      OOMWatch
	initOpts config.InitOptions
}

// Run decides how the worker starts, before anything touches the disk, so
// that a typo in the command or the working directory changes nothing:
// the working directory must be a directory, and the command must resolve
// on the composed PATH (relative to that directory) to a file the kernel
// will run (ELF or #!); otherwise the error is a *lookpath.Error (126 or
// 127) or a *config.Error (78). It also raises the soft open-file limit
// to the hard limit (dry: only reads it) and passes the readiness timeout.
func Run(ctx context.Context, in Input) (*Outcome, error) {
	cfg := in.Config
	o := &Outcome{Command: in.Command, Cwd: cfg.Chdir, Init: cfg.Init, initOpts: cfg.InitOptions,
		Edits: []environ.Edit{environ.Set("INFERA_ENGINE_READY_TIMEOUT", strconv.Itoa(cfg.ReadyTimeout))}}
	if cfg.Init != config.InitOff {
		o.oom = OOMWatch{Cgroup: filepath.Join(cfg.Sysfs, "fs", "cgroup"), Probe: in.Probe}
	}
	if err := CheckDir(cfg.Chdir); err != nil {
		return o, &config.Error{Msg: err.Error()}
	}
	drop, err := planDrop(cfg, cmp.Or(in.Root, "/"), os.Geteuid())
	if err != nil {
		return o, err // a *NotRootError (77) or a *config.Error (78)
	}
	if drop != nil {
		o.User = drop
		o.Edits = append(o.Edits, drop.homeEdit())
		in.Log.Info(fmt.Sprintf("user: the worker will run as %s (%s %s), after the steps that need root", drop, drop.From, drop.Spec))
	}
	in.Log.Info(fmt.Sprintf("engine ready timeout %ds (%s)", cfg.ReadyTimeout, cfg.ReadyTimeoutFrom))
	n, err := RaiseNofile(in.DryRun)
	o.Nofile = n
	switch {
	case err != nil:
		// Not a refusal: the worker may still run with fewer files.
		o.Nofile.Err = err.Error()
		in.Log.Warn(fmt.Sprintf("open-file limit left at %d: %v", n.Soft, err))
	case !in.DryRun:
		in.Log.Info(fmt.Sprintf("open files: soft limit %d (= hard)", n.Hard))
	}
	if len(in.Command) == 0 {
		return o, nil
	}
	env := in.Env.Clone()
	env.Apply(o.Edits...)
	path, err := lookpath.Command(in.Command[0], env.Value("PATH"), cfg.Chdir)
	if err != nil {
		return o, lookpath.HintRelative(err, in.Command[0], cfg.Chdir, cfg.StartDir)
	}
	if err := lookpath.Runnable(path); err != nil {
		return o, err
	}
	o.Path, o.Argv = path, in.Command
	return o, nil
}

// Fields and WriteText render the outcome in the report and --explain.
func (o *Outcome) Fields() []report.Field { return []report.Field{{Key: "exec", Value: o}} }

func (o *Outcome) WriteText(w io.Writer) {
	p := func(format string, a ...any) { fmt.Fprintf(w, format+"\n", a...) }
	p("Exec:")
	p("  cwd    %s", o.Cwd)
	switch {
	case o.Nofile.Hard == 0:
		p("  nofile not read: the pass stopped before the launch step")
	case o.Nofile.Err != "":
		p("  nofile soft %d, hard %d (%s)", o.Nofile.Soft, o.Nofile.Hard, o.Nofile.Err)
	default:
		p("  nofile soft %d, hard %d", o.Nofile.Soft, o.Nofile.Hard)
	}
	if o.Path != "" {
		p("  path   %s", o.Path)
		p("  argv   %s", report.QuoteArgs(report.RedactArgs(o.Argv)))
	} else {
		p("  argv   %s", report.QuoteArgs(report.RedactArgs(o.Command)))
	}
	if o.User != nil {
		p("  user   %s (%s %s)", o.User, o.User.From, o.User.Spec)
	}
	switch o.Init {
	case config.InitOff:
		p("  start  exec: infera-exec is replaced by the worker")
	case config.InitGroup:
		p("  start  init: infera-exec stays as PID 1 (or subreaper), forwards signals to the worker's process group, reaps zombies")
	default:
		p("  start  init: infera-exec stays as PID 1 (or subreaper), forwards signals to the worker, reaps zombies")
	}
	if len(o.Env) > 0 {
		p("  env")
		for _, kv := range report.RedactEnv(o.Env) {
			p("    %s", kv)
		}
	} else {
		p("  env    this environment with the changes above (--verbose or --json: in full)")
	}
}

// Announce logs the start about to happen (the line operators grep for)
// and says how the run ends, for the report.
func (o *Outcome) Announce(log *slog.Logger) report.Result {
	argv := report.QuoteArgs(report.RedactArgs(o.Argv))
	as := ""
	if o.User != nil {
		as = fmt.Sprintf(" as uid %d gid %d", o.User.UID, o.User.GID)
	}
	if o.Init != config.InitOff {
		log.Info(fmt.Sprintf("init: starting %s (%s) in %s%s; infera-exec stays as its %s, forwarding signals and reaping zombies",
			argv, o.Path, o.Cwd, as, InitRole()), "event", "init", "file", o.Path, logging.Headline, true)
		return report.ResultInit
	}
	log.Info(fmt.Sprintf("exec %s (%s) in %s%s", argv, o.Path, o.Cwd, as), "event", "exec", "file", o.Path)
	return report.ResultExec
}

// Start is the irreversible end of the pass: the drop to the worker's
// user (exec mode: of infera-exec itself), chdir, then execve the worker,
// or, in init mode, start it (with the user's credentials) and stay as its
// init. It returns the code infera-exec exits with; an exec that succeeds
// never returns. A drop that fails or does not give exactly what was asked
// is a *DropError (77), and nothing is started.
func (o *Outcome) Start(env []string, log *slog.Logger) (int, error) {
	if o.User != nil && o.Init == config.InitOff {
		if err := o.User.dropSelf(); err != nil {
			return CodeNoPerm, err
		}
		log.Info(fmt.Sprintf("user: now %s, verified (uids, gids, groups, no capabilities)", o.User))
	}
	if err := os.Chdir(o.Cwd); err != nil {
		return 78, &config.Error{Msg: fmt.Sprintf("chdir %s (INFERA_EXEC_CHDIR): %v", o.Cwd, err)}
	}
	inheritfd.Release() // the worker gets what infera-exec was given
	if o.Init != config.InitOff {
		var code int
		self, _ := os.Executable() // the starter; without /proc none, and the worker is forked directly
		code, o.Ended = become(InitSpec{Path: o.Path, Argv: o.Argv, Env: env, Dir: o.Cwd, Group: o.Init == config.InitGroup, OOM: o.oom, User: o.User,
			Given: sigstart.Start(), Self: self, ExitMap: o.initOpts.ExitMap, Rewrite: o.initOpts.Rewrite, ParentDeath: o.initOpts.ParentDeath}, log)
		return code, nil
	}
	return Exec(o.Path, o.Argv, env)
}
