// Package testsupport holds the test rigs, none of which the shim links:
// sandbox (a container-like environment from Linux namespaces, and its
// command, which `make demo` uses), fixture (ELF objects, fake ROCm
// installs, RDMA probes, trees and the real-sized engine install for
// tests, benchmarks and the demo), testsummary (the closing summary of
// `make test`) and textbound (the stories' text lines held to
// logging.TextBound).
package testsupport
