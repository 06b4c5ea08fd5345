module github.com/raftlog/raftlog

go 1.26.0

require (
	github.com/edsrzf/mmap-go v1.2.0
	github.com/hashicorp/go-hclog v1.6.3
	golang.org/x/sys v0.50.0
)

require (
	github.com/fatih/color v1.13.0 // indirect
	github.com/mattn/go-colorable v0.1.12 // indirect
	github.com/mattn/go-isatty v0.0.14 // indirect
)
