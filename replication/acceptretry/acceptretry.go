// Package acceptretry is the wait of a server's accept loop after its
// listener fails an Accept with a temporary error (out of file
// descriptors, a connection aborted before it was accepted), so that the
// server goes on serving once the condition passes instead of stopping
// its listener for good.
package acceptretry

import (
	"errors"
	"time"
)

// Backoff is one accept loop's wait: 5 ms after the first temporary
// error, doubling up to a second while they follow one another.
type Backoff struct {
	d time.Duration
}

// Retry reports whether err is temporary; if it is, it first waits the
// next backoff, or until done is closed (then it reports false).
func (b *Backoff) Retry(err error, done <-chan struct{}) bool {
	var te interface{ Temporary() bool }
	if !errors.As(err, &te) || !te.Temporary() {
		return false
	}
	b.d = min(max(2*b.d, 5*time.Millisecond), time.Second)
	t := time.NewTimer(b.d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-done:
		return false
	}
}

// Delay is the wait Retry last took.
func (b *Backoff) Delay() time.Duration { return b.d }

// Reset is called after a successful Accept.
func (b *Backoff) Reset() { b.d = 0 }
