package fdtable

import "embed"

// cHeaders holds this folder's C headers, so that this package's build
// output changes whenever one of them does: a cgo package that includes
// one from another folder (the Go core, preload/core) imports this
// package and is rebuilt with it (sdp/headers.go says why;
// internal/layers TestCgoHeadersTracked).
//
//go:embed *.h
var cHeaders embed.FS
