module github.com/osfproject/osf

go 1.26.0

require (
	github.com/Mellanox/rdmamap v1.1.0
	go.uber.org/zap v1.28.0
	golang.org/x/sys v0.49.0
)

require (
	github.com/vishvananda/netlink v1.1.0 // indirect
	github.com/vishvananda/netns v0.0.0-20191106174202-0a2b9b5464df // indirect
	go.uber.org/multierr v1.10.0 // indirect
)
