module github.com/infera/infera-exec

go 1.26.8

require (
	github.com/rogpeppe/go-internal v1.16.0
	golang.org/x/sys v0.50.0
)

require (
	github.com/stretchr/testify v1.12.1 // indirect
	golang.org/x/tools v0.26.0 // indirect
)
