package sigstart

// entry is the process's entry point (sigstart_amd64.s); the Go code
// never calls it.
//
//lint:ignore U1000 the linker's entry point (-E)
func entry()
