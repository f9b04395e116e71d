package sdp

import "embed"

// cHeaders holds this folder's C headers, so that this package's build
// output changes whenever one of them does. Go's build cache keys a cgo
// package on the files of its own folder only: a package that includes
// one of these headers from another folder (shm, sdp/rdma, sdp/sidetest,
// cmd/osfgw, internal/peerwire) imports this package and is rebuilt with
// it, under make or not (internal/layers TestCgoHeadersTracked).
//
//go:embed *.h
var cHeaders embed.FS
