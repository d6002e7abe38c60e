package queue

import (
	"fmt"
	"time"
)

// DefaultLimit is -limit's default, as in Selenoid.
const DefaultLimit = 5

// MaxLimit bounds -limit: every session holds a browser and a handful of file
// descriptors, and a process here may open 20,000 at most, so a larger number
// is a typo, not a grid.
const MaxLimit = 10_000

// DefaultMaxWaitingBytes is -queue-max-bytes' default. Waiting requests hold
// their capabilities, up to 32 MiB each with base64 extensions: a gibibyte lets
// hundreds of extension-carrying requests wait, and stops a flood of large
// bodies from exhausting the hub's memory while the queue itself is unbounded.
const DefaultMaxWaitingBytes = 1 << 30

// DefaultRetryAfterMax bounds the Retry-After draw while -queue-timeout is unset:
// a no-wait refusal still needs a spread-out hint, and a minute keeps a rejected
// ggr pass short without putting every client on the same second.
const DefaultRetryAfterMax = 60 * time.Second

// Options configure a Queue. The first group is what the operator sets; the second
// is derived from it by Resolve, once, and is what the rest of the program reads.
type Options struct {
	// Limit is -limit, the number of sessions that may run at once. Zero:
	// DefaultLimit.
	Limit int
	// Timeout is -queue-timeout. Zero disables budgets: a request waits until its
	// client gives up, as in Selenoid, and the grid is never reported congested.
	Timeout time.Duration
	// CongestionTimeout is -queue-congestion-timeout, the saturated budget, used
	// exactly as given when CongestionTimeoutSet (0 = refuse at once when saturated).
	CongestionTimeout time.Duration
	// CongestionTimeoutSet says the operator gave -queue-congestion-timeout.
	CongestionTimeoutSet bool
	// Disabled is -disable-queue: with every slot busy a request is refused at once.
	Disabled bool
	// MaxWaiting is -queue-max: more waiting requests than this are refused at
	// once (ReasonFull). Zero means unbounded.
	MaxWaiting int
	// MaxWaitingBytes is -queue-max-bytes: a request is refused at once
	// (ReasonFull) when the waiters' Request.Bytes with its own would pass
	// it, unless no request waits. Zero means unbounded.
	MaxWaitingBytes int64
	// Gate, if set, must also permit a browser start for a request to be admitted.
	Gate Gate
	// TurnTimeout bounds how long a request that may not wait for a slot
	// (no-wait, or under Disabled) waits for its start's turn with the Gate,
	// or for a slot being torn down, when a slot is there for it: as long as
	// a browser may take to start or stop. Zero: its state's budget alone.
	TurnTimeout time.Duration
	// Quotas share the slots between tenants (-quotas; SetQuotas replaces
	// them). Nil: every tenant has weight 1 and no bound.
	Quotas *Quotas

	// FastThreshold is the longest wait that still counts as a fast admission:
	// Timeout/20, at least 1s. Set by Resolve.
	FastThreshold time.Duration
	// KeepingUpBudget is the wait allowed to a request queued while keeping up:
	// Timeout itself (0 = unbounded). Set by Resolve.
	KeepingUpBudget time.Duration
	// SaturatedBudget is the wait allowed to a request queued while saturated:
	// CongestionTimeout if set, else Timeout/10 with a floor of 1s. Set by Resolve.
	SaturatedBudget time.Duration
}

// Resolve validates the operator's values and fills in the derived numbers. Errors
// name the flag and the accepted range, so they can be shown to the operator as they are.
func (o Options) Resolve() (Options, error) {
	if o.Limit == 0 {
		o.Limit = DefaultLimit
	}
	if o.Limit < 1 || o.Limit > MaxLimit {
		return o, fmt.Errorf("-limit must be a whole number from 1 to %d (got %d)", MaxLimit, o.Limit)
	}
	if o.MaxWaiting < 0 {
		return o, fmt.Errorf("-queue-max must be 0 (unbounded) or a positive number of waiting requests (got %d)", o.MaxWaiting)
	}
	if o.MaxWaitingBytes < 0 {
		return o, fmt.Errorf("-queue-max-bytes must be 0 (unbounded) or a positive size such as 1g (got %d)", o.MaxWaitingBytes)
	}
	if o.Timeout < 0 {
		return o, fmt.Errorf("-queue-timeout must be 0 (unset: wait until the client gives up) or a positive duration such as 5m (got %v)", o.Timeout)
	}
	if o.CongestionTimeoutSet {
		if o.CongestionTimeout < 0 {
			return o, fmt.Errorf("-queue-congestion-timeout must be 0 (refuse at once when saturated) or a positive duration such as 30s (got %v)", o.CongestionTimeout)
		}
		if o.Timeout > 0 && o.CongestionTimeout > o.Timeout {
			return o, fmt.Errorf("-queue-congestion-timeout %v is longer than -queue-timeout %v: a saturated grid would make requests wait longer than a busy one; give at most %v", o.CongestionTimeout, o.Timeout, o.Timeout)
		}
		if o.Timeout == 0 {
			return o, fmt.Errorf("-queue-congestion-timeout %v needs -queue-timeout: the saturated budget applies only once no admission was fast for longer than -queue-timeout; set -queue-timeout (e.g. 5m) or drop -queue-congestion-timeout", o.CongestionTimeout)
		}
	}
	o.FastThreshold = max(o.Timeout/20, time.Second)
	o.KeepingUpBudget = o.Timeout
	switch {
	case o.Timeout == 0:
		o.SaturatedBudget = 0
	case o.CongestionTimeoutSet:
		o.SaturatedBudget = o.CongestionTimeout
	default:
		o.SaturatedBudget = max(o.Timeout/10, time.Second)
	}
	return o, nil
}

// String summarises the derived numbers for the start-up log line.
func (o Options) String() string {
	if o.Disabled {
		return fmt.Sprintf("limit=%d queue=disabled (-disable-queue)", o.Limit)
	}
	if o.Timeout == 0 {
		return fmt.Sprintf("limit=%d queue-timeout=unset (wait until the client gives up) fast-threshold=%v", o.Limit, o.FastThreshold)
	}
	return fmt.Sprintf("limit=%d queue-timeout=%v fast-threshold=%v keeping-up-budget=%v saturated-budget=%v",
		o.Limit, o.Timeout, o.FastThreshold, o.KeepingUpBudget, o.SaturatedBudget)
}
