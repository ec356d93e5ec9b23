// Package testsupport holds the test rigs, none of which the shim links:
// sandbox (a container-like environment from Linux namespaces, and its
// command, which `make demo` uses) and fixture (ELF objects, fake ROCm
// installs, RDMA probes and trees for tests and the demo).
package testsupport
