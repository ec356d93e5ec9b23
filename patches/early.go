package patches

import (
	"context"
	"path/filepath"
	"slices"
	"sort"
	"time"

	"github.com/infera/infera-exec/patches/patchdef"
)

// Early is the engine probe started ahead of the patch step (StartEarly):
// on a first start the interpreter's answer takes most of the step, and
// nothing in the steps between (RDMA provider, preflight) waits for it, so
// it runs beside them. Run takes its answer only when everything that
// decides the answer is what the patch step itself would use (the
// interpreter, the working directory, the names asked for, the variables
// that change where Python imports from: engineLocator.settings); otherwise the
// answer is dropped and Run locates afresh.
type Early struct {
	payloadRoot string
	set         *patchdef.Set // the definitions it loaded, for Run
	scripts     []legacyScript
	names       []string
	settings    string
	cancel      context.CancelFunc
	done        chan struct{}
	loc         *Location
	err         error
}

// StartEarly begins locating the engine packages with the environment
// as it is now; nil when the patch step will not locate anything (skipped,
// no interpreter, definitions that do not load: Run says why). Stop must
// be called when the pass ends without Run taking the answer.
func StartEarly(ctx context.Context, in Input) *Early {
	if in.Config.SkipEnginePatches || in.Python == "" || pythonPathAnswers(in) != nil {
		return nil
	}
	set, err := loadSet(in.Config.PayloadRoot)
	if err != nil {
		return nil
	}
	scripts := payloadScripts(set, in.Config.PayloadRoot)
	names := probeNames(set, scripts)
	if len(names) == 0 {
		return nil
	}
	in.Env = in.Env.Clone() // the pass goes on editing its own
	l := locator(in, set.Distributions(names))
	ctx, cancel := context.WithCancel(ctx)
	e := &Early{payloadRoot: in.Config.PayloadRoot, set: set, scripts: scripts, names: names, settings: l.settings(names), cancel: cancel, done: make(chan struct{})}
	start := time.Now()
	loc, why := l.resolve(names, e.settings, start)
	if loc == nil {
		if loc, _ = l.fromCache(names, e.settings, start); loc != nil {
			loc.Located = "by the interpreter (answer cached): " + why
		}
	}
	if loc != nil {
		// Certain without Python, or a restart: the answer is at hand,
		// and a goroutine would only cost a thread's wake-ups.
		e.loc = loc
		close(e.done)
		return e
	}
	go func() {
		defer close(e.done)
		e.loc, e.err = l.probe(ctx, names, e.settings, start)
		if e.loc != nil {
			e.loc.Located = "by the interpreter: " + why
		}
	}()
	return e
}

// Stop ends the probe if it still runs and waits for it (its interpreter
// is killed and reaped); safe on nil and after the answer was taken.
func (e *Early) Stop() {
	if e == nil {
		return
	}
	e.cancel()
	<-e.done
}

// scriptsAndNames are the payload's v0.2.2 scripts and the packages to
// locate, from what StartEarly found when it read the same payload.
func (e *Early) scriptsAndNames(set *patchdef.Set, payloadRoot string) ([]legacyScript, []string) {
	if e != nil && e.payloadRoot == payloadRoot && e.set == set {
		return e.scripts, e.names
	}
	scripts := payloadScripts(set, payloadRoot)
	return scripts, probeNames(set, scripts)
}

// loadSet is LoadSet, from what StartEarly loaded when it read the same
// payload: the definitions are read once per start.
func (e *Early) loadSet(payloadRoot string) (*patchdef.Set, error) {
	if e != nil && e.payloadRoot == payloadRoot {
		return e.set, nil
	}
	return loadSet(payloadRoot)
}

// answer is the early answer when it was asked with settings; ok false
// means locate afresh.
func (e *Early) answer(settings string) (*Location, error, bool) {
	if e == nil {
		return nil, nil, false
	}
	if e.settings != settings {
		e.Stop()
		return nil, nil, false
	}
	<-e.done
	e.cancel()
	return e.loc, e.err, true
}

// probeNames are the packages the definitions and the payload's patch
// scripts are about, sorted.
func probeNames(set *patchdef.Set, scripts []legacyScript) []string {
	names := set.Packages()
	for _, s := range scripts {
		if !slices.Contains(names, s.Package) {
			names = append(names, s.Package)
		}
	}
	sort.Strings(names)
	return names
}

// payloadScripts are the payload's legacy patch scripts that no
// definition supersedes.
func payloadScripts(set *patchdef.Set, payloadRoot string) []legacyScript {
	return superseded(legacyScripts(filepath.Join(payloadRoot, "patches")), set)
}
