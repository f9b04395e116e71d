package gateway

import _ "embed"

// cHeader is gwwire.h, so that this package's build output changes
// whenever it does: a cgo package that includes it from another folder
// (internal/peerwire) imports this package and is rebuilt with it
// (sdp/headers.go says why; internal/layers TestCgoHeadersTracked).
//
//go:embed gwwire.h
var cHeader string
