package patches

import "fmt"

// Engine is where the engine package name (vllm, sglang) resolves for the
// worker, for the preflight rules that read the engine's own files (its
// model registry): the early probe's answer, waited for, when there is
// one (the patch step takes the same answer unless something that decides
// it changed), else the offline search of the image's interpreters
// (EngineOffline). from says which, or why nothing was found.
func (e *Early) Engine(name string) (dir, version, from string) {
	if e == nil {
		return EngineOffline(name)
	}
	<-e.done
	if e.err != nil || e.loc == nil {
		return "", "", fmt.Sprintf("the engine probe failed: %v", e.err)
	}
	p, ok := e.loc.Packages[name]
	if !ok {
		return EngineOffline(name)
	}
	if !p.Found {
		return "", "", p.Why
	}
	return p.Dir, p.Version, "located by " + e.loc.Interpreter
}

// EngineOffline finds name as the image's interpreters would import it,
// without running Python (LocateOffline of /), with its version from the
// distribution of the same name.
func EngineOffline(name string) (dir, version, from string) {
	loc, err := LocateOffline("/", []string{name})
	if err != nil {
		return "", "", err.Error()
	}
	loc.fillVersions(map[string]string{name: name}, "/")
	p := loc.Packages[name]
	if !p.Found {
		return "", "", p.Why
	}
	return p.Dir, p.Version, "located offline"
}
