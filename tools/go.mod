module github.com/infera/infera-exec/tools

go 1.26.8

require (
	github.com/BurntSushi/toml v1.6.0
	github.com/google/go-containerregistry v0.22.1
	github.com/infera/infera-exec v0.0.0
	github.com/klauspost/compress v1.19.2
	github.com/stretchr/testify v1.12.1
	golang.org/x/sys v0.50.0
)

require (
	github.com/bmatcuk/doublestar/v4 v4.10.4 // indirect
	github.com/hashicorp/go-version v1.9.0 // indirect
	github.com/opencontainers/go-digest v1.0.0 // indirect
	github.com/opencontainers/image-spec v1.1.1 // indirect
	go.yaml.in/yaml/v3 v3.0.5 // indirect
	golang.org/x/sync v0.22.0 // indirect
)

// The tools build from this checkout's shim packages (overlay, the test
// fixtures), never from a published version.
replace github.com/infera/infera-exec => ../
