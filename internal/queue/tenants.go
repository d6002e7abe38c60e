package queue

import (
	"bytes"
	"container/list"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strings"
	"time"
)

// Quota is one tenant's share of the grid (-quotas). A zero field takes its
// default: weight 1, maxSessions and maxQueued unbounded.
type Quota struct {
	// Weight is the tenant's share of the running sessions relative to the
	// others' while several wait: a tenant of weight 2 is given twice the
	// sessions of one of weight 1.
	Weight float64 `json:"weight,omitempty"`
	// MaxSessions is the most sessions the tenant may hold at once; at it,
	// the tenant's requests wait and take no free slot.
	MaxSessions int `json:"maxSessions,omitempty"`
	// MaxQueued is the most of the tenant's requests that may wait at once;
	// one more is refused at once (ReasonQuota).
	MaxQueued int `json:"maxQueued,omitempty"`
}

// DefaultTenant is the quotas file's entry for every tenant it does not name.
const DefaultTenant = "*"

// MaxTenantName bounds a tenant's name: a user name, or a trusted front's
// header value.
const MaxTenantName = 128

// Quotas are the -quotas file: each named tenant's quota, and "*" for the
// rest. The zero value (and nil) gives every tenant the defaults.
type Quotas struct {
	byName map[string]Quota
	path   string
}

// OtherTenants is the metrics' label for every tenant the quotas file does
// not name; the file may not name a tenant so.
const OtherTenants = "other"

// ParseQuotas reads a quotas file's JSON: {"alice": {"weight": 2,
// "maxSessions": 10, "maxQueued": 50}, "*": {"weight": 1}}. Names are
// exact: a tenant named twice, or a field spelt otherwise ("Weight"), which
// Go's JSON would take for another or the last, is an error. Errors name the
// tenant and the field.
func ParseQuotas(data []byte) (*Quotas, error) {
	tenants, err := members(data)
	if err != nil {
		return nil, fmt.Errorf("not a JSON object of tenants: %w", err)
	}
	q := &Quotas{byName: map[string]Quota{}}
	for _, m := range tenants {
		name := m.name
		switch {
		case name == "" || len(name) > MaxTenantName:
			return nil, fmt.Errorf("tenant %q: a name is 1 to %d bytes", name, MaxTenantName)
		case name == OtherTenants:
			return nil, fmt.Errorf("tenant %q: the metrics label every tenant the file does not name so; give it another name", name)
		}
		if _, dup := q.byName[name]; dup {
			return nil, fmt.Errorf("tenant %q is named twice", name)
		}
		if string(bytes.TrimSpace(m.value)) == "null" {
			q.byName[name] = Quota{} // the defaults, as an empty object
			continue
		}
		fields, err := members(m.value)
		if err != nil {
			return nil, fmt.Errorf("tenant %q: not a JSON object of fields (weight, maxSessions, maxQueued): %w", name, err)
		}
		seen := map[string]bool{}
		for _, f := range fields {
			switch {
			case f.name != "weight" && f.name != "maxSessions" && f.name != "maxQueued":
				return nil, fmt.Errorf("tenant %q: unknown field %q (fields: weight, maxSessions, maxQueued, spelt so)", name, f.name)
			case seen[f.name]:
				return nil, fmt.Errorf("tenant %q: %q is given twice", name, f.name)
			}
			seen[f.name] = true
		}
		var qt Quota
		if err := json.Unmarshal(m.value, &qt); err != nil {
			return nil, fmt.Errorf("tenant %q: %v", name, err)
		}
		switch {
		case qt.Weight < 0 || qt.Weight > 1e6 || math.IsNaN(qt.Weight):
			return nil, fmt.Errorf("tenant %q: \"weight\" must be a positive number up to 1000000 (got %v)", name, qt.Weight)
		case qt.MaxSessions < 0:
			return nil, fmt.Errorf("tenant %q: \"maxSessions\" must be 0 (unbounded) or a positive count (got %d)", name, qt.MaxSessions)
		case qt.MaxQueued < 0:
			return nil, fmt.Errorf("tenant %q: \"maxQueued\" must be 0 (unbounded) or a positive count (got %d)", name, qt.MaxQueued)
		}
		q.byName[name] = qt
	}
	return q, nil
}

// member is one member of a JSON object, in the order written.
type member struct {
	name  string
	value json.RawMessage
}

// members reads data as one JSON object and lists its members, repeats
// included.
func members(data []byte) ([]member, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		if err == nil {
			err = fmt.Errorf("it begins with %v", tok)
		}
		return nil, err
	}
	var out []member
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		var m member
		m.name, _ = tok.(string)
		if err := dec.Decode(&m.value); err != nil {
			return nil, err
		}
		out = append(out, m)
	}
	if _, err := dec.Token(); err != nil { // the closing brace
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("more follows the object")
	}
	return out, nil
}

// LoadQuotas reads and parses a quotas file; the error names the file.
func LoadQuotas(path string) (*Quotas, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("-quotas %s: %w", path, err)
	}
	q, err := ParseQuotas(data)
	if err != nil {
		return nil, fmt.Errorf("-quotas %s: %w", path, err)
	}
	q.path = path
	return q, nil
}

// Of is the quota of a tenant, with defaults filled in.
func (q *Quotas) Of(tenant string) Quota {
	var qt Quota
	if q != nil {
		var ok bool
		if qt, ok = q.byName[tenant]; !ok {
			qt = q.byName[DefaultTenant]
		}
	}
	if qt.Weight == 0 {
		qt.Weight = 1
	}
	return qt
}

// Named reports whether the file names the tenant (metrics label it by its
// name; the rest are "other", so labels stay bounded).
func (q *Quotas) Named(tenant string) bool {
	if q == nil || tenant == DefaultTenant {
		return false
	}
	_, ok := q.byName[tenant]
	return ok
}

// Names lists the tenants the file names, sorted.
func (q *Quotas) Names() []string {
	if q == nil {
		return nil
	}
	var out []string
	for n := range q.byName {
		if n != DefaultTenant {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out
}

// tenant is one tenant's state in the queue, kept while it holds a slot or
// waits.
type tenant struct {
	name    string
	quota   Quota // Quotas.Of(name), kept current by SetQuotas
	running int
	// releasing counts its running sessions that have ended and whose
	// browsers are being torn down (Slot.Releasing).
	releasing int
	// vtime is the tenant's virtual time, as in weighted fair queuing: each
	// admission adds 1/weight, and a tenant that starts waiting joins at the
	// least of the waiting tenants' (it banks no credit for the time it
	// asked for nothing). The least goes first, so over time the starts
	// follow the weights even where -limit does not divide by them.
	vtime   float64
	waiters list.List // of *waiter, oldest first
	// at is the tenant's index in Queue.backlog while it has waiters, else -1.
	at int
}

// tenantLocked returns name's state, creating it.
func (q *Queue) tenantLocked(name string) *tenant {
	t := q.tenants[name]
	if t == nil {
		t = &tenant{name: name, quota: q.quotas.Of(name), vtime: q.virtualNowLocked(), at: -1}
		if q.tenants == nil {
			q.tenants = map[string]*tenant{}
		}
		q.tenants[name] = t
	}
	return t
}

// forgetLocked drops a tenant's state once it holds and waits for nothing.
func (q *Queue) forgetLocked(t *tenant) {
	if t != nil && t.running == 0 && t.waiters.Len() == 0 {
		delete(q.tenants, t.name)
	}
}

// mayRunLocked reports whether t is below its maxSessions.
func (q *Queue) mayRunLocked(t *tenant) bool {
	m := t.quota.MaxSessions
	return m == 0 || t.running < m
}

// nextLocked is the waiter a free slot goes to: of the tenants with a live
// waiter and below their maxSessions, the one furthest below its weighted
// share — the least virtual time (its starts per unit of weight while it
// waits), then the fewest running per unit of weight, then the oldest
// waiter; within a tenant, its oldest. Waiters whose client has left are
// dropped on the way. With one tenant this is the oldest waiter: first in,
// first out.
func (q *Queue) nextLocked() *waiter {
	if len(q.backlog) <= 1 {
		for e := q.waiters.Front(); e != nil; e = q.waiters.Front() {
			w := e.Value.(*waiter)
			if w.ctx.Err() != nil {
				q.removeLocked(w)
				continue
			}
			if !q.mayRunLocked(w.tenant) {
				return nil
			}
			return w
		}
		return nil
	}
	// The fronts are compared first and only the chosen one's client is
	// asked whether it is still there (a context's Err takes a lock): a
	// hand-off costs one such question, not one per tenant.
	for {
		var (
			best                 *waiter
			bestVtime, bestShare float64
		)
		for _, t := range q.backlog {
			e := t.waiters.Front()
			if e == nil || !q.mayRunLocked(t) {
				continue
			}
			front := e.Value.(*waiter)
			share := float64(t.running) / t.quota.Weight
			if best == nil || t.vtime < bestVtime || t.vtime == bestVtime && (share < bestShare || share == bestShare &&
				(front.queued.Before(best.queued) || front.queued.Equal(best.queued) && t.name < best.tenant.name)) {
				best, bestVtime, bestShare = front, t.vtime, share
			}
		}
		if best == nil || best.ctx.Err() == nil {
			return best
		}
		q.removeLocked(best)
	}
}

// SetQuotas replaces the quotas (a reload): counts carry over, and a slot
// free for a tenant the new quotas let run is handed out at once.
func (q *Queue) SetQuotas(qs *Quotas) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.quotas = qs
	for _, t := range q.tenants {
		t.quota = qs.Of(t.name)
	}
	q.dispatchLocked(time.Now())
}

// Starved counts the waiters that would run now but find every slot held
// — of each waiting tenant, as many as its maxSessions still lets run —
// less the slots already being released (each goes to one of them): after
// a reload that let them run, the warm pool frees that many
// (hub.SetQuotas).
func (q *Queue) Starved() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.inUse < q.opts.Limit {
		return 0
	}
	n := 0
	for _, t := range q.backlog {
		room := t.waiters.Len()
		if m := t.quota.MaxSessions; m > 0 {
			room = min(room, max(0, m-t.running))
		}
		n += room
	}
	return max(0, n-q.releasing)
}

// Quotas returns the quotas in force (nil: every tenant has the defaults).
func (q *Queue) Quotas() *Quotas {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.quotas
}

// MayStart reports whether tenant may take a slot now without waiting: it
// is below its maxSessions. A warm browser is handed over only then.
func (q *Queue) MayStart(tenant string) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	t := q.tenants[tenant]
	return t == nil || q.mayRunLocked(t)
}

// Assign gives a slot taken for no one (Spare) to tenant: a warm browser
// handed to a client now counts as that tenant's session. It reports
// false, assigning nothing, when the tenant is at its maxSessions: the
// check and the count are one step, so requests of one tenant arriving
// together cannot each pass the check and all be counted.
func (s *Slot) Assign(tenant string) bool {
	if s == nil {
		return false
	}
	s.q.mu.Lock()
	defer s.q.mu.Unlock()
	if s.tenant != nil || s.released.Load() {
		return false
	}
	t := s.q.tenantLocked(tenant)
	if !s.q.mayRunLocked(t) {
		s.q.forgetLocked(t)
		return false
	}
	s.tenant = t
	s.q.admitLocked(t)
	if s.releasing.Load() {
		t.releasing++ // as Release will take it back
	}
	return true
}

// TenantStats is one tenant's share of the grid now.
type TenantStats struct {
	// Tenant is the tenant's name ("" is everyone, without authentication).
	Tenant string `json:"tenant"`
	// Sessions are the slots it holds; Waiting its queued requests.
	Sessions int `json:"sessions"`
	Waiting  int `json:"waiting"`
	// Weight, MaxSessions and MaxQueued are its quota (0: unbounded).
	Weight      float64 `json:"weight"`
	MaxSessions int     `json:"maxSessions"`
	MaxQueued   int     `json:"maxQueued"`
}

// Tenants lists every tenant that holds a slot or waits, and every tenant
// the quotas name, sorted by name.
func (q *Queue) Tenants() []TenantStats {
	q.mu.Lock()
	defer q.mu.Unlock()
	seen := map[string]bool{}
	var out []TenantStats
	add := func(name string, t *tenant) {
		if seen[name] {
			return
		}
		seen[name] = true
		qt := q.quotas.Of(name)
		st := TenantStats{Tenant: name, Weight: qt.Weight, MaxSessions: qt.MaxSessions, MaxQueued: qt.MaxQueued}
		if t != nil {
			st.Sessions, st.Waiting = t.running, t.waiters.Len()
		}
		out = append(out, st)
	}
	for name, t := range q.tenants {
		add(name, t)
	}
	for _, name := range q.quotas.Names() {
		add(name, nil)
	}
	slices.SortFunc(out, func(a, b TenantStats) int { return strings.Compare(a.Tenant, b.Tenant) })
	return out
}

// virtualNowLocked is the system's virtual time: the least of the virtual
// times of the waiting tenants that may run, or, with none, the one the last
// admission started at. A tenant held at its maxSessions is left out: its
// virtual time stands still while it may not start, and a newcomer joining
// there would take every start ahead of the tenants that share the slots.
func (q *Queue) virtualNowLocked() float64 {
	least, found := q.vnow, false
	for _, o := range q.backlog {
		if q.mayRunLocked(o) && (!found || o.vtime < least) {
			least, found = o.vtime, true
		}
	}
	return least
}

// admitLocked counts an admission of t's: a slot more, and its virtual time
// on by one start's worth, from the system's if t was behind it (a tenant
// that did not wait takes no credit for the time it asked for nothing).
func (q *Queue) admitLocked(t *tenant) {
	t.vtime = max(t.vtime, q.virtualNowLocked())
	q.vnow = t.vtime
	t.vtime += 1 / t.quota.Weight
	t.running++
}

// backloggedLocked is called as t's first waiter queues: t joins the
// waiting tenants at the system's virtual time, if that is later than its
// own. Its own is later only by the starts it had while others waited.
func (q *Queue) backloggedLocked(t *tenant) {
	t.vtime = max(t.vtime, q.virtualNowLocked())
	t.at = len(q.backlog)
	q.backlog = append(q.backlog, t)
}

// unbackloggedLocked takes t, whose last waiter has left, out of the
// backlog.
func (q *Queue) unbackloggedLocked(t *tenant) {
	if t.at < 0 {
		return
	}
	last := q.backlog[len(q.backlog)-1]
	q.backlog[t.at], last.at = last, t.at
	q.backlog = q.backlog[:len(q.backlog)-1]
	t.at = -1
}
