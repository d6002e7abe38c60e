// Package queuehttp puts the session queue in front of session creation over HTTP:
// it reads the no-wait headers, answers refusals with a W3C JSON body and a
// Retry-After header, and answers nothing at all to a client that has gone.
package queuehttp

import (
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/websummoner/websummoner/internal/queue"
	"github.com/websummoner/websummoner/internal/webdriver"
)

// Header names that ask the hub to refuse rather than queue. Either counts when
// present, even empty: ggr sends X-Selenoid-No-Wait with no value.
const (
	NoWaitHeader       = "X-WebSummoner-No-Wait"
	LegacyNoWaitHeader = "X-Selenoid-No-Wait"
)

// StatusDisabled is the status of a refusal under -disable-queue. It is not 429:
// the client did not ask to skip the queue and no budget ran out; there is no
// queue. 500 is what W3C maps "session not created" to, so clients and ggr treat
// it as a failed start on this host and may try another.
const StatusDisabled = http.StatusInternalServerError

// NoWait reports whether the request carries either no-wait header.
func NoWait(h http.Header) bool {
	_, a := h[http.CanonicalHeaderKey(NoWaitHeader)]
	_, b := h[http.CanonicalHeaderKey(LegacyNoWaitHeader)]
	return a || b
}

// Admitter admits new-session requests through a queue.
type Admitter struct {
	// Queue hands out the slots.
	Queue *queue.Queue
}

// Admit waits for a slot for r. On admission it returns the slot and true; the
// caller owns the slot and must Release it. Otherwise it returns false, having
// answered the refusal on w, or having answered nothing when the client is gone.
//
// Admit drains what is left of r's body first: Go's server notices a closed
// connection only after the body has been read to its end, and a client that left
// must not be handed a slot.
func (a Admitter) Admit(w http.ResponseWriter, r *http.Request, id string) (*queue.Slot, bool) {
	_, _ = io.Copy(io.Discard, r.Body)
	slot, out := a.Queue.Acquire(r.Context(), queue.Request{ID: id, NoWait: NoWait(r.Header)})
	if out.Admitted {
		return slot, true
	}
	WriteRefusal(w, out)
	return nil, false
}

// WriteRefusal answers a queue refusal: 429 with Retry-After for no-wait and the two
// budgets, StatusDisabled for -disable-queue, 503 with Retry-After while the hub
// shuts down, and nothing for a cancelled request.
func WriteRefusal(w http.ResponseWriter, out queue.Outcome) {
	status := http.StatusTooManyRequests
	switch out.Reason {
	case queue.ReasonCancelled:
		return
	case queue.ReasonDisabled:
		status = StatusDisabled
	case queue.ReasonClosed:
		status = http.StatusServiceUnavailable
		w.Header().Set("Retry-After", strconv.Itoa(int(out.RetryAfter/time.Second)))
	default:
		w.Header().Set("Retry-After", strconv.Itoa(int(out.RetryAfter/time.Second)))
	}
	webdriver.WriteError(w, status, webdriver.ErrSessionNotCreated, out.Message())
}
