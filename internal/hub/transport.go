package hub

import (
	"net"
	"net/http"
	"time"
)

// Settings of the Transport to drivers (NewTransport).
const (
	// idlePerDriver is how many idle connections are kept to one driver. A
	// session's driver is a host of its own, and a client rarely runs more
	// than a few commands on one session at once; so every live session keeps
	// its connections, however many sessions there are (the Transport's total
	// is not capped: -limit caps the drivers).
	idlePerDriver = 16
	// driverIdleTimeout closes a connection no command used for this long; a
	// session that idles longer redials once.
	driverIdleTimeout = 5 * time.Minute
	// maxAnswerHead bounds a driver's answer headers: a hostile driver cannot
	// make the hub buffer more.
	maxAnswerHead = 1 << 20
)

// NewTransport returns the Transport the hub reaches drivers with, dialling
// with dial (nil: a net.Dialer). One Transport carries every session's
// commands, new-session calls and DELETEs, so a driver's connections are one
// pool. There is no answer timeout: a command may rightly run for minutes
// (executeAsyncScript, a page load); the client's hang-up and the session's
// end cancel it.
func NewTransport(dial DialFunc) *http.Transport {
	if dial == nil {
		dial = (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	}
	return &http.Transport{
		DialContext:         dial,
		MaxIdleConnsPerHost: idlePerDriver,
		IdleConnTimeout:     driverIdleTimeout,
		// Answers pass through as the driver sent them: no Accept-Encoding of
		// the hub's own, no transparent decompression.
		DisableCompression:     true,
		MaxResponseHeaderBytes: maxAnswerHead,
		ExpectContinueTimeout:  time.Second,
	}
}
