package hub

import (
	"context"
	"errors"
	"sync"

	"golang.org/x/sync/semaphore"
)

// budget bounds what requests hold at once (bytes of bodies being read or
// checked), and keeps one user from holding more than half of it: a user's
// slow bodies, each declaring the largest size, would otherwise hold the
// whole budget and make every other user's requests wait for their turn,
// or fail. Without -htpasswd every client is the one user "", who may hold
// it all. The zero value is not usable: see newBudget.
type budget struct {
	all     *semaphore.Weighted
	perUser int64

	mu    sync.Mutex
	users map[string]*userShare // while a request of the user holds or waits
}

// errUserHalf is a wait that ended while the user's own half of the budget
// was held by their other requests.
var errUserHalf = errors.New("the user's own half of the budget is held by their other requests")

// userShare is one user's part of a budget, and the requests that hold or
// wait for some of it.
type userShare struct {
	sem  *semaphore.Weighted
	refs int
}

// newBudget is a budget of n, of which a user holds n/2 at most.
func newBudget(n int64) *budget {
	return &budget{all: semaphore.NewWeighted(n), perUser: n / 2, users: map[string]*userShare{}}
}

// tryTake holds n for user if it can at once, and returns the function that
// gives it back (once); nil if it cannot.
func (b *budget) tryTake(user string, n int64) func() {
	s := b.join(user)
	if s != nil && !s.sem.TryAcquire(b.ofUser(n)) {
		b.leave(user, s)
		return nil
	}
	if !b.all.TryAcquire(n) {
		b.give(user, s, n, false)
		return nil
	}
	return sync.OnceFunc(func() { b.give(user, s, n, true) })
}

// take holds n for user, waiting while ctx lets it, and returns the
// function that gives it back (once). A wait that ends while the user's
// half is still held is errUserHalf.
func (b *budget) take(ctx context.Context, user string, n int64) (func(), error) {
	s := b.join(user)
	if s != nil {
		if err := s.sem.Acquire(ctx, b.ofUser(n)); err != nil {
			b.leave(user, s)
			return nil, errors.Join(errUserHalf, err)
		}
	}
	if err := b.all.Acquire(ctx, n); err != nil {
		b.give(user, s, n, false)
		return nil, err
	}
	return sync.OnceFunc(func() { b.give(user, s, n, true) }), nil
}

// ofUser is what n weighs against a user's part: a request larger than the
// part takes it whole.
func (b *budget) ofUser(n int64) int64 { return min(n, b.perUser) }

// join returns user's share, counting one more request on it; nil for "".
func (b *budget) join(user string) *userShare {
	if user == "" {
		return nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	s := b.users[user]
	if s == nil {
		s = &userShare{sem: semaphore.NewWeighted(b.perUser)}
		b.users[user] = s
	}
	s.refs++
	return s
}

// give gives back n of the budget (if all) and of user's share s, which
// one request fewer holds.
func (b *budget) give(user string, s *userShare, n int64, all bool) {
	if all {
		b.all.Release(n)
	}
	if s != nil {
		s.sem.Release(b.ofUser(n))
		b.leave(user, s)
	}
}

// leave counts one request fewer on user's share, and forgets the share
// when none is left.
func (b *budget) leave(user string, s *userShare) {
	if s == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if s.refs--; s.refs == 0 {
		delete(b.users, user)
	}
}
