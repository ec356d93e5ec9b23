package preflight

import "github.com/infera/infera-exec/internal/workerargs"

// StaticNames are the checks that can be decided from a manifest alone:
// they read the worker's command line and environment and nothing of a
// node. infera-lint (deploy/k8s/lint) runs them on every container a
// manifest starts through infera-exec, so a finding there has the words
// --doctor prints in the pod.
var StaticNames = []string{"placeholders", "advertise"}

// Static runs the StaticNames checks on the command argv and the
// environment env as the container gets them, in the order --doctor
// reports them. Facts that need a node (the interfaces, the route, the
// RDMA devices) are not read: where a check would ask the node, it says
// that the node decides, and does not fail.
func Static(argv []string, env map[string]string) []Result {
	in := &Facts{Args: workerargs.Parse(argv), Env: env, Given: env, noNode: true}
	var out []Result
	for _, c := range Checks {
		for _, n := range StaticNames {
			if c.Name == n {
				r := c.Run(in)
				r.Name = c.Name
				out = append(out, r)
			}
		}
	}
	return out
}
